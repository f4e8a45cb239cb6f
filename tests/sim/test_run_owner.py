"""One controller per run from its first second (issue 31, items 2 and 6), on the built-in
simulated cluster: the run's lock is there as soon as its folder is, `cluster supervise` is
refused while the boot lives, and `cluster stop` ends the boot's controller with one STOPPED
verdict, whether it is in preflight or supervising."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.errors import ExitCode
from orchestrator.inventory import load_inventory
from orchestrator.models.events import Step
from orchestrator.models.run import Outcome
from orchestrator.paths import builtin_simulated_inventory
from orchestrator.run.boot import BootOptions, boot
from orchestrator.run.context import load_context
from orchestrator.run.stop import stop_run
from orchestrator.runstore import Run, RunStore

pytestmark = pytest.mark.sim
RECIPE = "mistral-large4-8x-sglang"


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


async def test_a_stop_asked_during_preflight_ends_the_boot_stopped_before_any_rank(
    twin_weights: Path, state: Path
) -> None:
    inventory = load_inventory(builtin_simulated_inventory())
    runs: list[Run] = []

    def on_run(run: Run) -> None:
        assert run.lock_holder() is not None, "the run has no owner in its first second"
        runs.append(run)
        run.request_stop(by="test")  # as `cluster stop` does through the lock

    options = BootOptions(sim_scale="test", sim_weights_root=twin_weights)
    try:
        result = await asyncio.wait_for(
            boot(RECIPE, inventory, options=options, store=RunStore(), on_run=on_run), 120
        )
    finally:  # had the stop come too late, the ranks it started must not outlive the test
        for started in runs:
            if started.has_launch_plan():
                await stop_run(load_context(started))
    (run,) = runs
    assert result.verdict.outcome is Outcome.STOPPED
    verdict = run.verdict()
    assert verdict is not None and verdict.outcome is Outcome.STOPPED
    assert json.loads(run.verdict_path.read_text())["exit_code"] == ExitCode.STOPPED
    steps = [e.step for e in run.events() if isinstance(e, Step)]
    assert "start" not in steps and not list(run.dir.glob("rank-*")), steps
    assert run.lock_holder() is None  # released


def test_supervise_is_refused_while_the_boot_lives_and_stop_ends_its_supervisor(
    twin_weights: Path, state: Path
) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(state), "COLUMNS": "200"}
    (state / "cluster").mkdir(parents=True)
    (state / "cluster" / "sim-weights").symlink_to(twin_weights)
    cli = [sys.executable, "-m", "orchestrator.cli"]
    # Slow reads: the boot is still loading, under its supervisor, when the stop comes.
    boot_proc = subprocess.Popen(
        [*cli, "boot", RECIPE, "--scale", "test", "--sim-fault", "rank=*:slow-read=4MB/s"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    runs = state / "cluster" / "runs"
    run_dir: Path | None = None
    try:
        deadline = time.monotonic() + 60
        while run_dir is None and time.monotonic() < deadline:
            found = sorted(runs.glob("*/lock.json")) if runs.exists() else []
            run_dir = found[-1].parent if found else None
            time.sleep(0.2)
        assert run_dir is not None, "no run directory with its lock within 60 s"
        # Before the ranks (twin, preflight) and after: the boot owns the run.
        refused = subprocess.run(
            [*cli, "supervise", run_dir.name], env=env, capture_output=True, text=True, timeout=60
        )
        assert refused.returncode == ExitCode.RUN_STORE, refused.stderr
        # Its boot, or already its supervisor (the same process) on a fast machine.
        assert re.search(r"held by its (boot|supervisor) \(pid \d+", refused.stderr), refused.stderr
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            log = run_dir / "rank-7" / "stderr.log"
            if log.exists() and b"Load weight begin" in log.read_bytes():
                break
            time.sleep(0.5)
        else:
            pytest.fail("the boot never reached loading")
        stopped = subprocess.run(
            [*cli, "stop", "--yes", "--run", run_dir.name],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert stopped.returncode == 0, stopped.stdout[-2000:] + stopped.stderr[-2000:]
        # The boot's own controller ended with the stop (generous: a busy 2-core machine).
        assert boot_proc.wait(timeout=60) == ExitCode.STOPPED
        verdict = json.loads((run_dir / "verdict.json").read_text())
        assert verdict["outcome"] == "STOPPED" and verdict["exit_code"] == ExitCode.STOPPED
        assert not (run_dir / "lock.json").exists()
        time.sleep(3)  # nothing decides the run after its stop
        assert json.loads((run_dir / "verdict.json").read_text()) == verdict
    finally:
        if boot_proc.poll() is None:
            os.killpg(boot_proc.pid, signal.SIGKILL)
            boot_proc.wait(timeout=10)
            if run_dir is not None:
                subprocess.run(
                    [*cli, "stop", "--yes", "--run", run_dir.name],
                    env=env,
                    capture_output=True,
                    timeout=120,
                )
