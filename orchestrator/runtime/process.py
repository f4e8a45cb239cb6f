"""Ranks as detached local processes: the built-in simulated cluster (`cluster_connection: local`).

Each rank runs under `orchestrator.runtime.launcher` in its own session, so it survives the
controller and the terminal, with its output in files shaped like `docker logs --timestamps`
under `<state>/nodes/<node>/<name>/`. The same follower, sampler and reconciliation code then
serve both runtimes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import psutil

from orchestrator.dialects.timestamps import line_timestamp_ns, timestamp_ns
from orchestrator.errors import BootFailed
from orchestrator.models.memory import MemoryReading
from orchestrator.paths import state_dir
from orchestrator.probes.meminfo import parse_meminfo
from orchestrator.runtime.base import STREAMS, ExitState, NodeSample, RankSpec
from orchestrator.runtime.node_sampler import mapped_weight_bytes

POLL_S = 0.2


class ProcessRuntime:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or state_dir() / "nodes"

    def rank_dir(self, spec: RankSpec) -> Path:
        return self.root / spec.node.name / spec.name

    async def start(self, spec: RankSpec) -> None:
        out = self.rank_dir(spec)
        if out.exists():
            raise BootFailed(
                f"{out} already exists", where=f"rank {spec.rank}", hint="run names are unique"
            )
        out.mkdir(parents=True, mode=0o700)
        (out / "spec.json").write_text(
            json.dumps({"argv": list(spec.argv), "labels": dict(spec.labels)}, indent=2)
        )
        # CLUSTER_SIM_NODE_DIR: where a simulated rank keeps its node's own memory reading
        # (simulator/nodeview.py: the eight nodes here share one machine's /proc/meminfo).
        env = {**os.environ, **spec.env, "CLUSTER_SIM_NODE_DIR": str(out)}
        # start_new_session: its own process group and session, so Ctrl-C or the controller's
        # death never reaches it (DOMAIN.md: ranks must not be owned by a login session).
        subprocess.Popen(
            [sys.executable, "-m", "orchestrator.runtime.launcher", str(out), "--", *spec.argv],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        for _ in range(100):  # the launcher writes its pid file once the program started
            if (out / "pid").exists() or (out / "exit.json").exists():
                return
            await asyncio.sleep(0.05)
        raise BootFailed(f"rank {spec.rank} did not start within 5 s", where=str(out))

    def _pids(self, spec: RankSpec) -> tuple[int, int] | None:
        try:
            launcher, child = (self.rank_dir(spec) / "pid").read_text().split()
            return int(launcher), int(child)
        except (OSError, ValueError):
            return None

    async def state(self, spec: RankSpec, *, timeout_s: float | None = None) -> ExitState:
        out = self.rank_dir(spec)
        # ended.json: written the moment the process ended; exit.json: once its output is
        # drained too (launcher.py). The state is the first; followers wait for the second.
        for name in ("exit.json", "ended.json"):
            with contextlib.suppress(FileNotFoundError):
                data = json.loads((out / name).read_text())
                return ExitState(
                    status="exited",
                    exit_code=data.get("exit_code"),
                    signal=data.get("signal"),
                    finished_at=data.get("finished_at"),
                )
        pids = self._pids(spec)
        if pids is None:
            return ExitState(status="missing" if not out.exists() else "created")
        return ExitState(status="running" if psutil.pid_exists(pids[0]) else "missing")

    async def follow(
        self, spec: RankSpec, since: str | None
    ) -> AsyncGenerator[tuple[str, list[bytes]], None]:
        out = self.rank_dir(spec)
        since_ns = timestamp_ns(since) if since else 0
        offsets = dict.fromkeys(STREAMS, 0)
        partial = dict.fromkeys(STREAMS, b"")
        while True:
            finished = (out / "exit.json").exists()  # read before draining: no line lost
            grew = False
            for stream in STREAMS:
                path = out / f"{stream}.log"
                if not path.exists():
                    continue
                with path.open("rb") as fh:
                    fh.seek(offsets[stream])
                    data = fh.read()
                if not data:
                    continue
                grew = True
                offsets[stream] += len(data)
                *lines, partial[stream] = (partial[stream] + data).split(b"\n")
                batch = [line + b"\n" for line in lines if line_timestamp_ns(line) >= since_ns]
                if batch:
                    yield stream, batch
            if finished and not grew:
                return
            await asyncio.sleep(POLL_S)

    async def full_logs(self, spec: RankSpec) -> dict[str, bytes]:
        out = self.rank_dir(spec)
        return {
            s: (out / f"{s}.log").read_bytes() if (out / f"{s}.log").exists() else b""
            for s in STREAMS
        }

    async def tail(
        self, spec: RankSpec, lines: int, *, timeout_s: float | None = None
    ) -> list[tuple[str, bytes]]:
        # `timeout_s` unused: the simulated ranks' logs are local files.
        out: list[tuple[str, bytes]] = []
        for stream in STREAMS:
            path = self.rank_dir(spec) / f"{stream}.log"
            if not path.exists():
                continue
            with path.open("rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                fh.seek(max(size - 256 * 1024, 0))
                data = fh.read()
            out += [(stream, raw + b"\n") for raw in data.split(b"\n")[:-1][-lines:]]
        return out

    async def inspect(self, spec: RankSpec) -> dict[str, Any]:
        state = await self.state(spec)
        pids = self._pids(spec)
        return {
            "Name": spec.name,
            "Runtime": "process",
            "Dir": str(self.rank_dir(spec)),
            "Pid": pids[1] if pids else None,
            "Config": {"Cmd": list(spec.argv), "Env": [f"{k}={v}" for k, v in spec.env.items()]},
            "Labels": dict(spec.labels),
            "State": state.as_json(),
        }

    async def sample(self, spec: RankSpec) -> NodeSample:
        node_view = self.rank_dir(spec) / "node-meminfo"  # simulator/nodeview.py
        mem = parse_meminfo(
            node_view.read_text() if node_view.exists() else Path("/proc/meminfo").read_text()
        )
        rchar = read_bytes = 0
        pids = self._pids(spec)
        if pids is not None:
            for proc in _group(pids[0]):
                try:
                    io = proc.io_counters()
                except (psutil.Error, AttributeError):
                    continue
                rchar += getattr(io, "read_chars", 0)
                read_bytes += io.read_bytes
            # An mmap load moves no read counter: its weight files' resident pages instead.
            mapped, _ = mapped_weight_bytes([proc.pid for proc in _group(pids[0])])
            rchar = max(rchar, mapped)
        return NodeSample(
            memory=MemoryReading.of(mem),
            rchar=rchar if pids else None,
            read_bytes=read_bytes if pids else None,
            loadavg=os.getloadavg()[0],
        )

    async def stop(self, spec: RankSpec, *, remove: bool = False) -> None:
        pids = self._pids(spec)
        if pids is not None and psutil.pid_exists(pids[0]):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pids[0], signal.SIGTERM)
            for _ in range(50):
                if (self.rank_dir(spec) / "exit.json").exists():
                    break
                await asyncio.sleep(0.1)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pids[0], signal.SIGKILL)
        if remove:  # like `docker rm`: the caller saved the logs into the run first
            shutil.rmtree(self.rank_dir(spec), ignore_errors=True)


def _group(pgid: int) -> list[psutil.Process]:
    """Every process in the rank's process group: the launcher, the engine and its children
    (the real engines read weights in child processes, not in PID 1)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid:
                found.append(proc)
        except (ProcessLookupError, PermissionError):
            continue
    return found
