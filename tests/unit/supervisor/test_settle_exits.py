"""After the drain the supervisor asks every rank for its state before it judges again: exits are
noticed by each rank's sampler in turn, and on a busy host one lags. CI caught it on the serving
watch: rank 3 died first, its head (rank 0) followed it ("Received sigquit from a child"), rank
0's sampler noticed first, and the incident named rank 0."""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import NodeUnreachable
from orchestrator.models.memory import MemoryReading
from orchestrator.runstore import RunStore
from orchestrator.runtime.base import ExitState, NodeSample, RankSpec
from orchestrator.supervisor.serving import watch_died
from orchestrator.supervisor.supervise import SuperviseConfig, Supervisor
from orchestrator.supervisor.watchers import WatchConfig
from tests.unit.supervisor.specs import SPECS

DIED_AT = {3: "2026-12-03T14:42:44.100000000Z", 0: "2026-12-03T14:42:45.300000000Z"}


class TwoDeaths:
    """Ranks 3 and 0 have exited (3 first); rank 2's node does not answer; rank 1 runs."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    async def sample(self, spec: RankSpec) -> NodeSample:
        return NodeSample(memory=MemoryReading(), rchar=0, read_bytes=0)

    async def state(self, spec: RankSpec, *, timeout_s: float | None = None) -> ExitState:
        self.asked.append(spec.rank)
        if spec.rank == 2:
            raise NodeUnreachable("no answer", node=spec.node.name, reason="timeout")
        if spec.rank in DIED_AT:
            code = 3 if spec.rank == 3 else 1
            return ExitState("exited", exit_code=code, finished_at=DIED_AT[spec.rank])
        return ExitState("running")


async def test_the_rank_that_died_first_is_named_though_its_sampler_noticed_it_last(
    tmp_path: Path,
) -> None:
    runtime = TwoDeaths()
    sup = Supervisor(
        RunStore(tmp_path).create(),
        SPECS,
        runtime,  # type: ignore[arg-type]  # only what settle_exits calls
        SuperviseConfig(watch=WatchConfig(), ready_url=None),
        recipe="r",
    )
    # rank 0's sampler came round first: only its exit is in
    sup._note_exit(SPECS[0], await runtime.state(SPECS[0]))
    [first] = watch_died(sup.state)
    assert first.rank == 0  # what a judgement after the drain saw before
    runtime.asked.clear()
    await sup.settle_exits()
    assert sorted(runtime.asked) == [1, 2, 3]  # every rank not yet seen exiting, once
    [named] = watch_died(sup.state)
    assert named.rank == 3 and "exit code 3" in named.message
    assert sup.state.rank(2).phase.value != "exited"  # an unanswering node is no exit
    assert (sup.run_dir.dir / "rank-3" / "exit.json").is_file()
