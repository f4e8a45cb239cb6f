"""A node cut off while the supervisor asks it for its container's state is found as fast as
one cut off during a sample. CI caught the gap: the sample answered, the cut came during the
`docker inspect` that follows it, and that call's 30 s default held NODE_LOST back for 31 s."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from orchestrator.errors import CommandTimeout, NodeUnreachable, answered_late
from orchestrator.models.inventory import Node
from orchestrator.models.memory import MemoryReading
from orchestrator.models.run import (
    NodeLost,
    NodeSlow,
    RankExited,
    RankPhase,
    RankStarted,
    RunPhase,
    Sample,
)
from orchestrator.runstore import RunStore
from orchestrator.runtime.base import SAMPLE_TIMEOUT_S, ExitState, NodeSample, RankSpec
from orchestrator.runtime.docker import DockerRuntime
from orchestrator.supervisor.state import BootState, initial_state, reduce
from orchestrator.supervisor.supervise import SuperviseConfig, Supervisor
from orchestrator.supervisor.view import RankRow, build_view
from orchestrator.supervisor.watchers import WatchConfig
from orchestrator.transport import CommandResult

NODE = Node(name="node3", address="198.18.0.13", user="u", rank=0, fabric_iface="eth1")
SPEC = RankSpec(rank=0, node=NODE, name="cluster-R-r0", argv=("true",))


class CutDuringState:
    """Samples answer; the state call meets a cut link: nothing comes back, and the call fails
    only when its deadline passes (as `DockerRuntime._run` does)."""

    def __init__(self) -> None:
        self.deadlines: list[float | None] = []

    async def sample(self, spec: RankSpec) -> NodeSample:
        return NodeSample(memory=MemoryReading(), rchar=0, read_bytes=0)

    async def state(self, spec: RankSpec, *, timeout_s: float | None = None) -> ExitState:
        self.deadlines.append(timeout_s)
        await asyncio.sleep(30 if timeout_s is None else timeout_s)
        raise NodeUnreachable("no answer", node=spec.node.name, reason="timeout")


async def test_a_cut_during_the_state_call_is_a_lost_node_within_the_sample_deadline(
    tmp_path: Path,
) -> None:
    runtime = CutDuringState()
    sup = Supervisor(
        RunStore(tmp_path).create(),
        [SPEC],
        runtime,  # type: ignore[arg-type]  # only what the sample loop calls
        SuperviseConfig(watch=WatchConfig(), ready_url=None),
        recipe="r",
    )
    began = time.monotonic()
    loop = asyncio.create_task(sup._sample_loop(SPEC))
    while sup.state.rank(0).lost_since is None and time.monotonic() - began < 60:
        await asyncio.sleep(0.05)
    sup.stop.set()
    await asyncio.wait_for(loop, 30)
    assert runtime.deadlines[0] == SAMPLE_TIMEOUT_S
    assert sup.state.rank(0).lost_since is not None
    assert time.monotonic() - began < SAMPLE_TIMEOUT_S + 10  # generous: the bound is 4 s


class AnsweredLate:
    """The node's sshd opens each session, but its docker daemon is too busy to answer the
    state call in time (a loading node, a loaded host: seen in CI as a false NODE_LOST); after
    `slow_for` calls it answers again."""

    def __init__(self, slow_for: int) -> None:
        self.calls = 0
        self.slow_for = slow_for

    async def sample(self, spec: RankSpec) -> NodeSample:
        return NodeSample(memory=MemoryReading(), rchar=0, read_bytes=0)

    async def state(self, spec: RankSpec, *, timeout_s: float | None = None) -> ExitState:
        self.calls += 1
        if self.calls <= self.slow_for:
            await asyncio.sleep(0.05)
            raise CommandTimeout(
                node=spec.node.name, argv=["docker", "inspect"], timeout_s=4.0, answered=True
            )
        return ExitState(status="running")


def supervisor(tmp_path: Path, runtime: object) -> Supervisor:
    return Supervisor(
        RunStore(tmp_path).create(),
        [SPEC],
        runtime,  # type: ignore[arg-type]  # only what the sample loop calls
        SuperviseConfig(watch=WatchConfig(), ready_url=None, sample_every_s=0.1),
        recipe="r",
    )


async def test_a_node_that_answers_too_slowly_is_slow_not_lost_and_recorded_once(
    tmp_path: Path,
) -> None:
    runtime = AnsweredLate(slow_for=5)
    sup = supervisor(tmp_path, runtime)
    loop = asyncio.create_task(sup._sample_loop(SPEC))
    seen_slow = False
    began = time.monotonic()
    while runtime.calls <= runtime.slow_for + 1 and time.monotonic() - began < 30:
        r = sup.state.rank(0)
        assert r.lost_since is None  # never counted lost: its sshd answered every time
        seen_slow = seen_slow or r.slow_since is not None
        await asyncio.sleep(0.01)
    sup.stop.set()
    await asyncio.wait_for(loop, 30)
    assert seen_slow and sup.state.rank(0).slow_since is None  # a sample in time ended it
    kinds = [
        e.get("kind") for e in map(json.loads, sup.run_dir.events_path.read_text().splitlines())
    ]
    assert kinds.count("node_slow") == 1 and "node_lost" not in kinds, kinds


async def test_a_node_that_does_not_answer_is_still_lost(tmp_path: Path) -> None:
    class NoAnswer(AnsweredLate):
        async def state(self, spec: RankSpec, *, timeout_s: float | None = None) -> ExitState:
            await asyncio.sleep(0.05)
            raise CommandTimeout(node=spec.node.name, argv=["docker"], timeout_s=4.0)

    sup = supervisor(tmp_path, NoAnswer(slow_for=0))
    loop = asyncio.create_task(sup._sample_loop(SPEC))
    began = time.monotonic()
    while sup.state.rank(0).lost_since is None and time.monotonic() - began < 30:
        await asyncio.sleep(0.01)
    sup.stop.set()
    await asyncio.wait_for(loop, 30)
    assert sup.state.rank(0).lost_since is not None and sup.state.rank(0).slow_since is None


class LateInspect:
    """A transport whose node's sshd opened the session for `docker inspect`, which then ran
    past its deadline; whether a trivial `true` session opens after it is the test's choice:
    it does (a busy docker daemon), or it hangs (the link was cut while the inspect ran)."""

    def __init__(self, cut: bool) -> None:
        self.cut = cut
        self.asked: list[str] = []

    async def run(
        self, argv: list[str], *, timeout_s: float, check: bool = False, stdin: bytes | None = None
    ) -> CommandResult:
        self.asked.append(argv[0])
        if argv[0] == "docker":
            raise CommandTimeout(node="node3", argv=argv, timeout_s=timeout_s, answered=True)
        if self.cut:
            await asyncio.sleep(60)  # no session opens: the runtime's whole-call bound ends it
        return CommandResult("node3", tuple(argv), 0, "", "", 0.0)


async def test_a_late_command_on_a_node_that_still_answers_is_slow_and_on_a_cut_one_is_lost() -> (
    None
):
    busy = LateInspect(cut=False)
    with pytest.raises(CommandTimeout) as slow:
        await DockerRuntime({"node3": busy}).state(SPEC, timeout_s=SAMPLE_TIMEOUT_S)  # type: ignore[dict-item]
    assert answered_late(slow.value) and busy.asked == ["docker", "true"]
    assert "docker inspect cluster-R-r0" in slow.value.line()
    cut = LateInspect(cut=True)
    began = time.monotonic()
    with pytest.raises(NodeUnreachable):
        await DockerRuntime({"node3": cut}).state(SPEC, timeout_s=SAMPLE_TIMEOUT_S)  # type: ignore[dict-item]
    assert time.monotonic() - began < 10  # the probe's bound is 3 s


async def test_a_late_log_tail_on_a_node_that_still_answers_is_slow_too() -> None:
    """`cluster status` derived live asks for the tail beside the state: a busy daemon makes
    that row slow, not unreachable."""
    busy = LateInspect(cut=False)
    with pytest.raises(CommandTimeout) as slow:
        await DockerRuntime({"node3": busy}).tail(SPEC, 20, timeout_s=1.0)  # type: ignore[dict-item]
    assert answered_late(slow.value) and busy.asked == ["docker", "true"]
    assert "docker logs cluster-R-r0" in slow.value.line()


def test_the_view_shows_a_slow_row_until_a_sample_comes_in_time_and_never_beside_lost() -> None:
    cfg = WatchConfig()

    def row(s: BootState, now: float) -> RankRow:
        return build_view(s, now, cfg, run_id="r", recipe="x", phase=RunPhase.booting).ranks[0]

    s = reduce(initial_state(["node3"]), RankStarted(ts=0.0, rank=0, container="c"))
    s = reduce(s, NodeSlow(ts=10.0, rank=0, reason="docker inspect c answered after 4 s"))
    late = row(s, 16.0)
    assert late.slow == "docker inspect c answered after 4 s" and late.slow_for_s == 6.0
    assert late.phase is RankPhase.starting and not late.unreachable
    in_time = reduce(s, Sample(ts=17.0, rank=0, rchar=0))
    assert row(in_time, 18.0).slow == "" and row(in_time, 18.0).slow_for_s is None
    lost = reduce(s, NodeLost(ts=17.0, rank=0, reason="no SSH handshake"))
    assert row(lost, 18.0).slow == "" and row(lost, 18.0).unreachable == "no SSH handshake"
    ended = reduce(s, RankExited(ts=17.0, rank=0, exit_code=1))
    assert row(ended, 18.0).slow == ""
