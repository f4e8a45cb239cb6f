"""Boot a twin's ranks as local processes, one per loopback "node": `cluster sim run`.

A rehearsal helper, not the orchestrator: it renders every rank with `render()` (so the argv and
env are the ones `cluster boot` would use), gives rank k the address 127.0.0.(10+k) of the
built-in `sim-8x` inventory, sets NCCL/Gloo to `lo` as that inventory's `fabric_iface` says,
and writes each rank's merged stdout and stderr to `LOG_DIR/rank-<k>.log`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.models.recipe import Engine, Recipe, render
from orchestrator.simulator import dialects

READY_LINE = {Engine.sglang: dialects.READY_SGLANG, Engine.vllm: dialects.READY_VLLM}


@dataclass
class LocalRank:
    rank: int
    addr: str
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class Outcome:
    ready: bool
    seconds: float
    exited: dict[int, int]  # rank -> exit status, for ranks that ended
    last_lines: dict[int, str]  # rank -> its last log line


def rank_address(base: str, rank: int) -> str:
    head, _, last = base.rpartition(".")
    return f"{head}.{int(last) + rank}"


def _set_flag(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == flag and i + 1 < len(out):
            out[i + 1] = value
        elif arg.startswith(flag + "="):
            out[i] = f"{flag}={value}"
    return out


def start_local(
    twin: Recipe,
    log_dir: Path,
    *,
    base_addr: str = "127.0.0.10",
    head_port: int | None = None,
    serve_port: int | None = None,
    iface: str = "lo",
    extra_env: Mapping[str, str] | None = None,
) -> list[LocalRank]:
    """Start every rank of `twin`; `serve_port` overrides the `--port` flag for a local run."""
    log_dir.mkdir(parents=True, exist_ok=True)
    head = rank_address(base_addr, 0)
    port = head_port or twin.ports.rendezvous
    ranks: list[LocalRank] = []
    for k in range(twin.nodes):
        command = render(twin, k, twin.nodes, head, port)
        argv = command.argv_tail
        if serve_port is not None:
            argv = _set_flag(argv, "--port", str(serve_port))
        env = dict(os.environ)
        env.update(command.env)
        env.update({"NCCL_SOCKET_IFNAME": iface, "GLOO_SOCKET_IFNAME": iface})
        env.update(extra_env or {})
        log = log_dir / f"rank-{k}.log"
        with open(log, "wb") as f:
            proc = subprocess.Popen(
                argv, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        ranks.append(LocalRank(k, rank_address(base_addr, k), proc, log))
    return ranks


def _last_line(path: Path) -> str:
    with contextlib.suppress(OSError):
        lines = path.read_text(errors="replace").replace("\r", "\n").splitlines()
        return next((line for line in reversed(lines) if line.strip()), "")
    return ""


def wait_ready(ranks: list[LocalRank], engine: Engine, timeout_s: float) -> Outcome:
    """Until rank 0 prints the engine's ready line, a rank exits, or `timeout_s` passes."""
    started = time.monotonic()
    ready_line = READY_LINE[engine]
    ready = False
    while time.monotonic() - started < timeout_s:
        with contextlib.suppress(OSError):
            if ready_line in ranks[0].log.read_text(errors="replace"):
                ready = True
                break
        if any(r.proc.poll() is not None for r in ranks):
            time.sleep(0.5)  # let the others print how the failure reached them
            break
        time.sleep(0.1)
    exited = {r.rank: int(r.proc.returncode) for r in ranks if r.proc.poll() is not None}
    return Outcome(
        ready=ready,
        seconds=time.monotonic() - started,
        exited=exited,
        last_lines={r.rank: _last_line(r.log) for r in ranks},
    )


def stop_local(ranks: list[LocalRank], grace_s: float = 3.0) -> None:
    """SIGTERM every rank's process group, then SIGKILL what is left."""
    for r in ranks:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(r.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for r in ranks:
        with contextlib.suppress(subprocess.TimeoutExpired):
            r.proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
    for r in ranks:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(r.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            r.proc.wait(timeout=5)
