"""Helpers of the serving watch's drills on the netns testbed (test_serving_watch_netns.py).

The drills boot with the real CLI through test_boot_netns's `boots` fixture. A drill that needs
a recipe of its own (a short `timeouts.wedge`, a `restart:` block: what an operator would write)
writes it beside the test and boots it (`boots(..., recipe=path)`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.paths import builtin_recipes_dir
from orchestrator.testbed import Testbed
from tests.netns import test_boot_netns
from tests.netns.test_boot_netns import RECIPE, BootProc, line_time, lines_of, preserved

PORT = 30000  # the recipe's serving port


def head_url(tb: Testbed) -> str:
    """Rank 0's serving address on this testbed (its node's management address)."""
    return f"http://{tb.node(0).mgmt_addr}:{PORT}"


FIRED_UP = b"The server is fired up and ready to roll!"


def drill_recipe(folder: Path, *, wedge: float | None = None, restart: str | None = None) -> Path:
    """The boots' recipe with `timeouts.wedge` and/or a `restart:` block (the file keeps the
    recipe's name: a recipe is named by its file)."""
    text = (builtin_recipes_dir() / f"{RECIPE}.yaml").read_text()
    if wedge is not None:
        text, n = re.subn(r"(?m)^timeouts:\n", f"timeouts:\n  wedge: {wedge:g}\n", text)
        assert n == 1, "the recipe has no `timeouts:` block"
    if restart is not None:
        text = f"{text}\nrestart: {restart}\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{RECIPE}.yaml"
    path.write_text(text)
    return path


def watched_boot(
    boots: Callable[..., BootProc],
    folder: Path,
    fault: str,
    *,
    wedge: float | None = None,
    restart: str | None = None,
) -> tuple[BootProc, int]:
    """`cluster boot --watch` of the drill recipe with `fault`, READY: the boot and the pid of
    the detached serving watch it handed over to."""
    recipe = drill_recipe(folder, wedge=wedge, restart=restart)
    boot = boots("--json", "--watch", "--sim-fault", fault, recipe=str(recipe))
    verdict = boot.wait()
    assert verdict.get("outcome") == "READY", verdict
    return boot, watcher_pid(boot)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pid: int, timeout: float = 20) -> None:
    test_boot_netns.wait_for(f"pid {pid} to end", lambda: not alive(pid), timeout=timeout)


def incidents(boot: BootProc) -> list[dict[str, Any]]:
    return [e for e in boot.events() if e.get("kind") == "incident"]


def watcher_pid(boot: BootProc) -> int:
    """The detached watcher `cluster boot` handed over to (it holds the run's lock)."""
    holder = test_boot_netns.read_json(boot.run / "lock.json") or {}
    assert holder.get("owner") == "serving-watch", holder
    pid = int(holder["pid"])
    assert alive(pid), holder
    return pid


def health(tb: Testbed, timeout: float = 10) -> int | None:
    """The head's /health status code (None: no answer)."""
    try:
        with urllib.request.urlopen(f"{head_url(tb)}/health", timeout=timeout) as resp:
            return int(resp.status)
    except (urllib.error.URLError, OSError):
        return None


def head_served_at(run: Path) -> float:
    """When rank 0 began serving: its `fired up` line's docker timestamp (the simulator's
    `serving` phase, whose `after=` counts from there)."""
    for raw in lines_of(preserved(run, 0)["stderr"]):
        if FIRED_UP in raw:
            return line_time(raw)
    raise AssertionError("rank 0 never said it was fired up")


def docker_time(stamp: str) -> float:
    """An RFC 3339 time as docker writes it (nanoseconds, Z)."""
    return line_time(stamp.encode())


def end_watch(
    state: Path, boot: BootProc, watcher: int, supervise: subprocess.Popen[bytes] | None = None
) -> None:
    """After a failed assertion: `cluster stop` ends whichever watcher still holds the run (the
    detached one, or a `cluster supervise` this test started), then neither lingers."""

    def running() -> bool:
        return alive(watcher) or (supervise is not None and supervise.poll() is None)

    if running():
        test_boot_netns.cluster(state, "stop", "--yes", "--run", boot.id, timeout=180)
    deadline = time.monotonic() + 60
    while running() and time.monotonic() < deadline:
        time.sleep(0.25)
    for pid in (watcher, *([supervise.pid] if supervise is not None else [])):
        with contextlib.suppress(ProcessLookupError):
            if alive(pid):
                os.killpg(pid, signal.SIGKILL)
    if supervise is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            supervise.wait(timeout=10)


_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "kB": 10**3, "MB": 10**6, "GB": 10**9}


def container_memory(tb: Testbed, rank: int, name: str) -> int:
    """Bytes the container's memory cgroup holds now (`docker stats`, from its node's dockerd)."""
    shown = tb.docker(rank, "stats", "--no-stream", "--format", "{{.MemUsage}}", name)
    used = shown.stdout.split("/")[0].strip()  # "1.2GiB / 22.9GiB"
    m = re.fullmatch(r"([\d.]+)\s*([A-Za-z]+)", used)
    assert m and m.group(2) in _UNITS, shown.stdout
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def start_supervise(state: Path, run: Path, out: Path) -> subprocess.Popen[bytes]:
    """`cluster supervise RUN` in its own session, its output in `out`."""
    with out.open("wb") as fh:
        return subprocess.Popen(
            [*test_boot_netns.CLUSTER, "supervise", str(run)],
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=test_boot_netns.cli_env(state),
            start_new_session=True,
        )
