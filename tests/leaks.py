"""Finding the rank processes a test left running.

`tests/conftest.py` puts a marker with this session's id in the environment; every process the
session starts (the CLI, the process runtime's launchers, the simulator's ranks and their weight
readers) inherits it. A tier that runs ranks on this machine checks after each module that none
of them outlived it: a rank left listening on the built-in cluster's serve port makes the next
boot fail its preflight ("the serve port 30000 on the head sim-node0 is already taken"), and
the failure would show up in another tier, far from the test that leaked it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

MARKER = "CLUSTER_TEST_SESSION"
# Our own processes: a rank's launcher, the simulator, its weight reader, a detached controller.
OURS = b"orchestrator."


def _marked_processes() -> dict[int, str]:
    """pid -> command line of each process that carries this session's marker and runs our code,
    other than this one."""
    token = f"{MARKER}={os.environ.get(MARKER, '')}".encode()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes()
            if OURS in cmdline and token in (entry / "environ").read_bytes().split(b"\0"):
                found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


def left_running(grace_s: float = 15.0) -> dict[int, str]:
    """The marked processes still alive after `grace_s` (a stopped rank may take a few seconds
    to go; a detached controller writes its verdict first)."""
    deadline = time.monotonic() + grace_s
    while (found := _marked_processes()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return found


def kill(pids: dict[int, str]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def describe(pids: dict[int, str]) -> str:
    return "; ".join(f"pid {pid}: {cmd[:160]}" for pid, cmd in sorted(pids.items()))
