"""Ranks start side by side, each within its deadline (issue 31, item 7): one node that hangs
at start holds back no other rank, and is named NODE_LOST, not blamed on a later barrier miss."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orchestrator.errors import BootFailed
from orchestrator.models.run import Event, NodeLost, Outcome
from orchestrator.plan.launch import plan_launch
from orchestrator.plan.rendezvous import plan_rendezvous
from orchestrator.recipes import resolve_recipe
from orchestrator.run.boot import QuietUI, StartFailed, start_deadline, start_ranks
from orchestrator.runstore import RunStore
from orchestrator.runtime.base import RankSpec
from orchestrator.runtime.specs import rank_specs
from tests.unit.plan.test_rendezvous import spark_cluster, spark_inventory


class Starts:
    """A runtime whose starts wait at a gate, so the test sees how many were in flight."""

    def __init__(self, hang: set[int], refuse: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.hang, self.refuse = hang, refuse
        self.in_flight = 0
        self.most_in_flight = 0
        self.all_began = asyncio.Event()
        self.total = 0

    async def start(self, spec: RankSpec) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        if self.most_in_flight == self.total:
            self.all_began.set()
        try:
            await self.all_began.wait()  # nobody returns before every start has begun
            if spec.rank in self.hang:
                await asyncio.sleep(3600)  # a node whose link was cut mid-start
            if spec.rank in self.refuse:
                raise BootFailed("`docker run` failed", where=f"rank {spec.rank}")
        finally:
            self.in_flight -= 1


class Marks:
    def __init__(self) -> None:
        self.started: list[int] = []
        self.events: list[Event] = []

    def mark_started(self, spec: RankSpec) -> None:
        self.started.append(spec.rank)

    def fold(self, event: Event) -> None:
        self.events.append(event)


def plan_and_specs(tmp_path: Any) -> tuple[Any, list[RankSpec], Any]:
    run = RunStore(tmp_path).create()
    recipe = resolve_recipe("mistral-large4-8x-sglang")
    inv, facts = spark_cluster(spark_inventory(8))
    plan = plan_launch(recipe, inv, plan_rendezvous(recipe, inv, facts), run.id)
    return run, rank_specs(plan, inv), plan


def test_every_rank_of_a_wave_starts_side_by_side_and_a_hung_node_is_node_lost(tmp_path):
    run, specs, plan = plan_and_specs(tmp_path)
    runtime, marks = Starts(hang={5}), Marks()
    runtime.total = len(specs)

    async def go() -> StartFailed:
        with pytest.raises(StartFailed) as caught:
            await asyncio.wait_for(
                start_ranks(
                    run, QuietUI(), plan, specs, runtime, {}, marks, 1.0, start_deadline_s=0.5
                ),  # type: ignore[arg-type]
                30,
            )
        return caught.value

    failed = asyncio.run(go())
    assert runtime.most_in_flight == 8  # all eight began before any returned
    assert sorted(marks.started) == [0, 1, 2, 3, 4, 6, 7]  # rank 5 held back nobody
    verdict = failed.verdict
    assert verdict.outcome is Outcome.NODE_LOST and verdict.rank == 5
    assert "rank 5 (spark-5)" in verdict.message and "stopped answering" in verdict.message
    assert "spark-5" in verdict.advice
    assert set(failed.lost) == {5}
    (lost,) = [e for e in marks.events if isinstance(e, NodeLost)]
    assert lost.rank == 5


def test_a_refused_start_is_rank_exited_naming_that_rank(tmp_path):
    run, specs, plan = plan_and_specs(tmp_path)
    runtime, marks = Starts(hang=set(), refuse={2}), Marks()
    runtime.total = len(specs)

    async def go() -> StartFailed:
        with pytest.raises(StartFailed) as caught:
            await start_ranks(run, QuietUI(), plan, specs, runtime, {}, marks, 1.0)  # type: ignore[arg-type]
        return caught.value

    failed = asyncio.run(go())
    assert failed.verdict.outcome is Outcome.RANK_EXITED and failed.verdict.rank == 2
    assert "rank 2 (spark-2) did not start" in failed.verdict.message
    assert not failed.lost and len(marks.started) == 7


def test_the_start_deadline_is_the_connect_deadline_twice():
    assert start_deadline(15.0) == 30.0
