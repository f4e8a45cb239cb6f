"""The serving watch's edges (orchestrator/run/watch.py): a run `cluster stop` reached is never
watched (a watcher starting late must not judge the ranks the stop ended as RANK_DIED), and a
run that is not serving is refused with one line."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.errors import RunStoreError
from orchestrator.models.run import Finding, Outcome
from orchestrator.run.watch import already_stopped, watch_run
from orchestrator.run_files import Verdict
from orchestrator.runstore import RunStore


def ready(tmp_path):
    run = RunStore(tmp_path / "runs").create()
    run.write_verdict(
        Verdict.of(
            Finding(
                watcher="ready", severity="verdict", rank=None, outcome=Outcome.READY, message="ok"
            )
        )
    )
    return run


def test_a_stopped_run_is_not_watched_and_its_lock_is_not_taken(tmp_path):
    run = ready(tmp_path)
    assert not already_stopped(run)
    run.request_stop(by="cluster stop")
    assert already_stopped(run)
    assert asyncio.run(watch_run(run)) is None  # returns at once: no context read, no ranks
    assert run.lock_holder() is None
    verdict = run.verdict()
    assert verdict is not None and verdict.outcome is Outcome.READY


def test_a_run_that_is_not_serving_is_refused_with_one_line(tmp_path):
    run = RunStore(tmp_path / "runs").create()
    with pytest.raises(RunStoreError, match="is not serving \\(no verdict yet\\)"):
        asyncio.run(watch_run(run))
