"""Processes by recorded PID only: spawn daemons, check they live, terminate them, run commands.

A PID record is {pid, start, what, argv, log}; `start` (clock ticks since boot, from
/proc/PID/stat) makes sure a reused PID is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .constants import DAEMON_ENV
from .errors import TestbedError

_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
_CHILDREN_LOCK = threading.Lock()


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a process, None when there is none."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def _reap(pid: int) -> None:
    """Collect the exit status of a child of ours (so no zombie stays behind)."""
    with _CHILDREN_LOCK:
        popen = _CHILDREN.get(pid)
    if popen is not None:
        if popen.poll() is not None:
            with _CHILDREN_LOCK:
                _CHILDREN.pop(pid, None)
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def pid_alive(pid: int | None, start: int | None = None) -> bool:
    """True when `pid` runs and (if given) started at `start`. Zombies count as dead."""
    if not pid:
        return False
    _reap(pid)
    st = _proc_stat(pid)
    if st is None or st[0] in ("Z", "X", "x"):
        return False
    return start is None or st[1] == start


def _rec_alive(rec: dict[str, Any] | None) -> bool:
    if not rec:
        return False
    return not rec.get("stopped") and pid_alive(rec.get("pid"), rec.get("start"))


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def terminate(records: Iterable[dict[str, Any]], timeout: float = 10.0) -> None:
    """SIGTERM every live recorded process, wait (bounded), SIGKILL what is left, wait again."""
    live = [r for r in records if r and pid_alive(r.get("pid"), r.get("start"))]
    for r in live:
        _signal(r["pid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = [r for r in live if pid_alive(r["pid"], r.get("start"))]
        if not live:
            return
        time.sleep(0.05)
    for r in live:
        _signal(r["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and live:
        live = [r for r in live if pid_alive(r["pid"], r.get("start"))]
        time.sleep(0.05)


def _spawn(argv: Sequence[str], log: Path, what: str) -> dict[str, Any]:
    """Start a daemon in its own session, output appended to `log`; returns its PID record."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            cwd="/",
            env=DAEMON_ENV,
        )
    with _CHILDREN_LOCK:
        _CHILDREN[popen.pid] = popen
    st = _proc_stat(popen.pid)
    return {
        "pid": popen.pid,
        "start": st[1] if st else None,
        "what": what,
        "argv": list(argv),
        "log": str(log),
    }


def _run(
    argv: Sequence[str],
    *,
    check: bool = True,
    input: str | None = None,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        list(argv),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
    if check and proc.returncode != 0:
        raise TestbedError(
            f"command failed (rc {proc.returncode}): {shlex.join(argv)}\n"
            f"{proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc


def _tail(path: Path | str, lines: int = 15) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
