"""`cluster boot` on the built-in simulated cluster: eight real simulator processes on
127.0.0.10-17, the process runtime, the real supervisor. No root needed.

Each boot runs the recipe's twin at the test scale (a boot is ~15 s) and stops its ranks after.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.inventory import load_inventory
from orchestrator.models.run import Outcome
from orchestrator.paths import builtin_simulated_inventory
from orchestrator.postmortem import postmortem_run
from orchestrator.run.boot import BootOptions, boot
from orchestrator.run.context import load_context
from orchestrator.run.status import live_view
from orchestrator.run.stop import stop_run
from orchestrator.runstore import RunStore

pytestmark = pytest.mark.sim
RECIPE = "mistral-large4-8x-sglang"


@pytest.fixture(scope="session")
def sim_weights(twin_weights: Path) -> Path:
    return twin_weights


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def options(
    sim_weights: Path, state: Path, fault: str | None = None, *, smoke: bool = True
) -> BootOptions:
    return BootOptions(
        sim_scale="test",
        sim_weights_root=sim_weights,
        sim_env={"CLUSTER_SIM_FAULT": fault} if fault else {},
        smoke=smoke,
    )


async def run_boot(
    sim_weights: Path,
    state: Path,
    fault: str | None = None,
    recipe: str = RECIPE,
    *,
    smoke: bool = True,
):
    inventory = load_inventory(builtin_simulated_inventory())
    store = RunStore()  # under $XDG_STATE_HOME, where `cluster status` looks too
    result = await asyncio.wait_for(
        boot(
            recipe, inventory, options=options(sim_weights, state, fault, smoke=smoke), store=store
        ),
        240,
    )
    return result, store


async def stop(result) -> None:
    ctx = load_context(result.run)
    report = await stop_run(ctx)
    assert not report.problems, report.problems


def warnings(run_dir: Path) -> list[dict]:
    return [
        json.loads(line)
        for line in (run_dir / "events.jsonl").read_text().splitlines()
        if '"kind":"warning"' in line
    ]


async def test_the_built_in_cluster_boots_to_ready_keeps_every_log_and_leaves_ranks_serving(
    sim_weights, state
):
    result, _ = await run_boot(sim_weights, state)
    try:
        assert result.verdict.outcome is Outcome.READY, result.verdict.message
        assert result.repaired_bytes == 0
        run = result.run
        for k in range(8):
            follow = json.loads((run.dir / f"rank-{k}" / "follow.json").read_text())
            assert follow["repaired_bytes"] == 0
            assert "Load weight end" in (run.dir / f"rank-{k}" / "stderr.log").read_text()
        assert json.loads((run.dir / "verdict.json").read_text())["outcome"] == "READY"
        view = await live_view(load_context(run))
        assert view.source == "live"
        assert len(view.ranks) == 8
        assert all(r.container_state == "running" for r in view.ranks)
        assert view.phase == "ready"
        assert all(r.phase == "serving" for r in view.ranks)  # workers serve in the head's group
        assert not warnings(run.dir)  # a healthy boot raises no warning
    finally:
        await stop(result)
    view = await live_view(load_context(result.run))
    assert all(r.container_state == "missing" for r in view.ranks)  # stopped and removed
    assert view.phase == "stopped", view.phase_text
    assert view.phase_detail.startswith("after READY (`cluster stop` at "), view.phase_text
    # ... and no row still reads as alive under that header
    assert all(r.phase == "exited" and r.serving is None for r in view.ranks), view.ranks
    assert (result.run.dir / "rank-3" / "full-stderr.log").stat().st_size > 0
    # Stopping the ranks one after another makes the others print what a lost peer makes
    # them print; the postmortem knows the stop did that, and the boot was ready.
    diagnosis = postmortem_run(result.run)
    assert diagnosis.category == "ready", diagnosis.verdict
    assert "`cluster stop` stopped it at" in diagnosis.verdict
    assert all(r.role == "ok" for r in diagnosis.ranks), [(r.rank, r.role) for r in diagnosis.ranks]
    assert all("served in the head's group" in r.reason for r in diagnosis.ranks[1:])
    assert any("`cluster stop` began" in n for n in diagnosis.notes)
    # Every rank's exit state was saved once it had stopped, before its removal.
    for k in range(8):
        state = json.loads((result.run.dir / f"rank-{k}" / "exit.json").read_text())
        assert state["status"] != "running", (k, state)


async def test_a_slow_rank_is_warned_about_before_the_barrier_closes_and_named_in_the_verdict(
    sim_weights, state
):
    result, _ = await run_boot(sim_weights, state, fault="rank=5:slow-read=2MB/s")
    try:
        v = result.verdict
        assert v.outcome is Outcome.BARRIER_TIMEOUT, v.message
        assert v.rank == 5 and "rank 5" in v.message
        barrier = [w for w in warnings(result.run.dir) if w["watcher"] == "barrier"]
        assert barrier and barrier[0]["rank"] == 5
        assert "will miss the post-load barrier" in barrier[0]["message"]
        for k in range(8):  # every rank's log is kept, the straggler's too
            assert (result.run.dir / f"rank-{k}" / "stderr.log").stat().st_size > 0
        assert result.diagnosis is not None
        assert result.diagnosis.category == "load-barrier-timeout"
        assert result.diagnosis.first_failing_rank == 5
    finally:
        await stop(result)
    # A failure before an operator's stop is still the failure.
    after_stop = postmortem_run(result.run)
    assert (after_stop.category, after_stop.first_failing_rank) == ("load-barrier-timeout", 5)


async def test_a_vllm_boot_with_one_slow_rank_is_ready_never_a_barrier_timeout(sim_weights, state):
    # vLLM has no post-load barrier: rank 5 reading at 12 MB/s (the others at 16) finishes its
    # 159 MB seconds after them, far past the 1 s the twin's default barrier window lasts at this
    # scale. It is only slow: its engine-ready deadline (10800 s, 22.5 s here) holds it.
    result, _ = await run_boot(
        sim_weights, state, fault="rank=5:slow-read=12MB/s", recipe="mistral-large4-8x-vllm"
    )
    try:
        assert result.verdict.outcome is Outcome.READY, result.verdict.message
        said = warnings(result.run.dir)
        assert not [w for w in said if w["watcher"] in ("barrier", "vllm-ready")], said
    finally:
        await stop(result)


async def test_a_rank_crashing_with_a_real_signature_is_named_with_its_exit_code(
    sim_weights, state
):
    result, _ = await run_boot(sim_weights, state, fault="rank=2:exit-at=kv:signature=trtllm-fmha")
    try:
        v = result.verdict
        assert v.outcome is Outcome.RANK_EXITED, v.message
        assert v.rank == 2
        assert "exit code 1" in v.message
        exit_state = json.loads((result.run.dir / "rank-2" / "exit.json").read_text())
        assert exit_state["exit_code"] == 1
        assert result.diagnosis is not None
        assert result.diagnosis.category == "unsupported-arch-kernel"
        assert result.diagnosis.first_failing_rank == 2
    finally:
        await stop(result)


def test_a_killed_controller_leaves_the_ranks_running_and_supervise_resumes_to_ready(
    sim_weights, state, tmp_path
):
    env = {**os.environ, "XDG_STATE_HOME": str(state), "COLUMNS": "200"}
    (state / "cluster").mkdir(parents=True)
    (state / "cluster" / "sim-weights").symlink_to(sim_weights)
    cli = [sys.executable, "-m", "orchestrator.cli"]
    # a slower read rate gives the test time to kill the controller mid-load
    boot_proc = subprocess.Popen(
        [*cli, "boot", RECIPE, "--scale", "test", "--sim-fault", "rank=*:slow-read=8MB/s"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    runs = state / "cluster" / "runs"
    deadline = time.monotonic() + 120
    run_dir = None
    while time.monotonic() < deadline:
        found = sorted(runs.glob("*/rank-7/stderr.log")) if runs.exists() else []
        if found and b"Load weight begin" in found[-1].read_bytes():
            run_dir = found[-1].parent.parent
            break
        time.sleep(0.5)
    assert run_dir is not None, "the boot never reached loading"
    os.killpg(boot_proc.pid, signal.SIGKILL)
    boot_proc.wait(timeout=10)
    try:
        first = json.loads(
            subprocess.run(
                [*cli, "status", "--json", "--run", run_dir.name],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
        )
        assert first["source"] == "live"
        assert [r["container_state"] for r in first["ranks"]] == ["running"] * 8
        time.sleep(3)
        second = json.loads(
            subprocess.run(
                [*cli, "status", "--json", "--run", run_dir.name],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
        )
        moved = sum(
            b["bytes_read"] > a["bytes_read"]
            for a, b in zip(first["ranks"], second["ranks"], strict=False)
        )
        assert moved >= 6  # (ranks that finished between the calls stop moving)
        resumed = subprocess.run(
            [*cli, "supervise", run_dir.name],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
        verdict = json.loads((run_dir / "verdict.json").read_text())
        assert verdict["outcome"] == "READY"
        assert verdict["repaired_bytes"] == 0
        assert verdict["fetched_on_resume_bytes"] > 0
        # no gap, no duplicate: the preserved copy equals what the ranks wrote
        nodes = state / "cluster" / "nodes"
        for k in range(8):
            kept = (run_dir / f"rank-{k}" / "stderr.log").read_bytes()
            (written,) = nodes.glob(f"sim-node{k}/*{run_dir.name}*/stderr.log")
            assert kept == written.read_bytes()[: len(kept)]
            assert kept.count(b"\n") == len(set(kept.split(b"\n"))) - (
                1 if kept.endswith(b"\n") else 0
            )
    finally:
        stopped = subprocess.run(
            [*cli, "stop", "--yes", "--run", run_dir.name],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert stopped.returncode == 0, stopped.stdout[-2000:] + stopped.stderr[-2000:]


async def test_prune_saves_and_removes_ranks_an_earlier_boot_left_behind(sim_weights, state):
    from datetime import timedelta

    from orchestrator.run.stop import find_leftovers, prune

    result, store = await run_boot(sim_weights, state, fault="rank=2:exit-at=kv:signature=cuda-oom")
    inventory = load_inventory(builtin_simulated_inventory())
    leftovers = await find_leftovers(inventory, timedelta(0))
    assert {x.run_id for x in leftovers} == {result.run.id}
    assert len(leftovers) == 8
    lines = await prune(inventory, leftovers, store)
    assert all("removed" in line for line in lines), lines
    assert await find_leftovers(inventory, timedelta(0)) == []
    for k in range(8):
        assert (result.run.dir / f"rank-{k}" / "full-stderr.log").exists()
        assert (result.run.dir / f"rank-{k}" / "inspect.json").exists()
