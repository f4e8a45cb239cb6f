"""Run one rank as a detached process and keep its output the way `docker logs` would.

    python -m orchestrator.runtime.launcher DIR -- PROGRAM [ARGS...]

Started in its own session by the process runtime, so it outlives the controller (and any
terminal). It runs PROGRAM with the environment it was given, prefixes every output line with
an RFC 3339 UTC timestamp with nanoseconds (the shape of `docker logs --timestamps`), appends
them to DIR/stdout.log and DIR/stderr.log as they arrive. When PROGRAM ends it writes
DIR/ended.json at once (how and when it ended: the rank's state) and DIR/exit.json once its last
output is in the files (the followers' sign that nothing more will come). A line is a run of
bytes ending in \\n; tqdm's \\r updates stay inside their line, as in Docker's json-file log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO


def stamp(now_ns: int | None = None) -> bytes:
    ns = time.time_ns() if now_ns is None else now_ns
    secs, frac = divmod(ns, 1_000_000_000)
    base = datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{frac:09d}Z ".encode()


def _pump(src: BinaryIO, dst_path: Path) -> None:
    partial = b""
    with dst_path.open("ab", buffering=0) as dst:
        while chunk := src.read1(65536) if hasattr(src, "read1") else src.read(65536):
            data = partial + chunk
            *lines, partial = data.split(b"\n")
            if lines:
                dst.write(b"".join(stamp() + line + b"\n" for line in lines))
        if partial:
            dst.write(stamp() + partial + b"\n")


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write(
            "usage: python -m orchestrator.runtime.launcher DIR -- PROGRAM [ARGS...]\n"
        )
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    program = argv[2:]
    try:
        child = subprocess.Popen(program, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        (out / "stderr.log").open("ab").write(stamp() + f"exec failed: {exc}\n".encode())
        _write_exit(out, 127, None, datetime.now(UTC))
        return 127
    (out / "pid").write_text(f"{os.getpid()} {child.pid}\n")

    def forward(signum: int, _frame: object) -> None:  # `stop` signals the launcher
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    assert child.stdout is not None and child.stderr is not None
    pumps = [
        threading.Thread(target=_pump, args=(child.stdout, out / "stdout.log"), daemon=True),
        threading.Thread(target=_pump, args=(child.stderr, out / "stderr.log"), daemon=True),
    ]
    for t in pumps:
        t.start()
    code = child.wait()
    # How and when the process ended, written now: the pumps may take seconds yet to drain its
    # last output (a busy host, a grandchild such as a weight reader stuck in uninterruptible
    # I/O holding the pipe). Two ranks that died a moment apart (one killed, one reacting to
    # its peer's socket closing) must both be seen ended, in that order, when the supervisor
    # names the first to die as the cause; docker, too, reports a container exited before its
    # log is read to the end.
    ended = datetime.now(UTC)
    sig = signal.Signals(-code).name if code < 0 else None
    status = 128 - code if code < 0 else code
    _write_exit(out, status, sig, ended, name="ended.json")
    for t in pumps:
        t.join(timeout=10)
    _write_exit(out, status, sig, ended)
    return 0


def _write_exit(
    out: Path, code: int, sig: str | None, ended: datetime, *, name: str = "exit.json"
) -> None:
    tmp = out / f".{name}.tmp"
    tmp.write_text(
        json.dumps(
            {
                "exit_code": code,
                "oom_killed": False,
                "signal": sig,
                "finished_at": ended.isoformat(),
                "status": "exited",
            }
        )
    )
    os.replace(tmp, out / name)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
