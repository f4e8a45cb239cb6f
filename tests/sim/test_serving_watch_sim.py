"""The serving watch on the built-in simulated cluster: eight real simulator ranks boot to READY,
then a fault after READY (the simulator's `serving` phase) and the watch names it.

Short deadlines (ServeWatchConfig) keep each drill to a boot (~15 s) and seconds of watching."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from pathlib import Path

import pytest

from orchestrator.models.events import Incident
from orchestrator.models.run import Outcome
from orchestrator.runctx import load_context
from orchestrator.runtime.specs import probe_ready
from orchestrator.supervisor.serving import ServeWatchConfig
from orchestrator.watch import watch_run
from tests.sim.test_boot_process import run_boot, stop

pytestmark = pytest.mark.sim

FAST = ServeWatchConfig(
    wedge_s=4.0, canary_every_s=1.0, canary_timeout_s=2.0, drain_s=1.5, log_bound=64 * 2**10
)


@pytest.fixture(scope="module")
def sim_weights(twin_weights: Path) -> Path:
    return twin_weights


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


async def test_a_rank_killed_after_ready_is_rank_died_with_its_exit_code_and_last_lines(
    sim_weights, state
):
    result, _ = await run_boot(sim_weights, state, fault="rank=3:exit-at=serving:after=5:code=3")
    try:
        assert result.verdict.outcome is Outcome.READY, result.verdict.message
        incident = await asyncio.wait_for(watch_run(result.run, serve=FAST), 90)
        assert incident is not None and incident.outcome is Outcome.RANK_DIED, incident
        assert incident.rank == 3 and "exit code 3" in incident.message, incident.message
        run = result.run
        died = json.loads((run.dir / "rank-3" / "exit.json").read_text())
        (record,) = [e for e in run.events() if isinstance(e, Incident)]
        assert record.exit_code == 3 and record.last_lines and record.final
        ended = datetime.fromisoformat(died["finished_at"]).timestamp()
        assert record.ts - ended < 30, (record.ts, died)  # named within 30 s
        assert "RuntimeError" in " ".join(record.last_lines)  # the rank's own last words
        assert json.loads((run.dir / "incidents.json").read_text())[0]["outcome"] == "RANK_DIED"
        verdict = run.verdict()
        assert verdict is not None and verdict.outcome is Outcome.RANK_DIED
        status = json.loads(run.status_path.read_text())
        assert status["serving"]["canary_p50_s"] is not None
        assert status["serving"]["incidents"] == 1
        assert "cluster_serving_uptime_seconds" in (run.dir / "metrics.prom").read_text()
    finally:
        await stop(result)


async def test_a_wedged_head_is_named_wedged_while_health_still_says_200(sim_weights, state):
    result, _ = await run_boot(sim_weights, state, fault="rank=0:hang-at=serving:after=15")
    try:
        assert result.verdict.outcome is Outcome.READY, result.verdict.message
        began = time.time()
        incident = await asyncio.wait_for(watch_run(result.run, serve=FAST), 90)
        assert incident is not None and incident.outcome is Outcome.WEDGED, incident
        assert incident.watcher in ("wedge:metrics", "wedge:canary"), incident.watcher
        assert time.time() - began < 15 + FAST.wedge_s + 30
        ctx = load_context(result.run)
        assert probe_ready(ctx.ready_url) is not None  # /health still answers
        (record,) = [e for e in result.run.events() if isinstance(e, Incident)]
        assert record.signal in ("metrics", "canary")
    finally:
        await stop(result)
