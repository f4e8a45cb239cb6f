"""`cluster status`: the per-rank view of a run, from its live supervisor or from the nodes.

When a supervisor holds the run (fresh heartbeat), its `status.json` is the answer. Otherwise
the same view is derived live: the preserved logs replayed, then each node asked now (container
state, the tail of the rank's log, a memory and I/O sample). A node that cannot be asked is
that rank's row, marked unreachable with the reason; one whose sshd answers but whose docker
daemon runs past its deadline is marked slow (its row as the logs left it); the other rows stay
live.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from orchestrator.deadlines import DEADLINES
from orchestrator.dialects.timestamps import line_timestamp_ns
from orchestrator.errors import ClusterError, answered_late
from orchestrator.models.events import Stopped
from orchestrator.models.run import (
    HeadReady,
    LogLine,
    NodeLost,
    NodeSlow,
    RankExited,
    RunPhase,
    Sample,
)
from orchestrator.run.context import RunContext, replay_logs
from orchestrator.runtime.base import ExitState, NodeSample, RankSpec, Runtime
from orchestrator.runtime.docker import DockerRuntime
from orchestrator.runtime.process import ProcessRuntime
from orchestrator.runtime.specs import exit_event, probe_ready, sample_fields
from orchestrator.supervisor.state import BootState, reduce
from orchestrator.supervisor.view import BootView, build_view
from orchestrator.transport import ConnectOptions, Transport
from orchestrator.transport.pool import close_transports, open_transports

TAIL_LINES = 200


def supervisor_view(ctx: RunContext) -> BootView | None:
    """The live supervisor's own view, when one holds the run."""
    if not ctx.run.supervisor_alive():
        return None
    data = ctx.run.read_status()
    return BootView.model_validate(data) if data else None


def runtime_for(
    ctx: RunContext, options: ConnectOptions
) -> tuple[Runtime, Mapping[str, Transport]]:
    if ctx.simulated:
        return ProcessRuntime(), {}
    transports = open_transports(ctx.inventory, options)
    return DockerRuntime(transports), transports


async def _ask(
    runtime: Runtime, spec: RankSpec
) -> tuple[ExitState, NodeSample | None, list[tuple[str, bytes]]] | ClusterError:
    """One node's answers, over one connection: its container's state and then a sample (the
    sampler needs the pid the state gives), and meanwhile the log tail. Two round trips."""

    async def state_then_sample() -> tuple[ExitState, NodeSample | None]:
        state = await runtime.state(spec, timeout_s=DEADLINES.operator_docker_s)
        return state, (await runtime.sample(spec) if state.running else None)

    try:
        first, tail = await asyncio.gather(
            state_then_sample(),
            runtime.tail(spec, TAIL_LINES, timeout_s=DEADLINES.operator_docker_s),
            return_exceptions=True,  # both finish before either's error is raised
        )
        if isinstance(first, BaseException):
            raise first
        state, sample = first
        if state.status == "missing":
            return state, sample, []  # no container, so no tail (its error says just that)
        if isinstance(tail, BaseException):
            raise tail
        return state, sample, tail
    except ClusterError as exc:
        return exc


def _stopped_at(ctx: RunContext) -> float | None:
    """When `cluster stop` first began on this run (its event), or None."""
    return min((ev.began for ev in ctx.run.events() if isinstance(ev, Stopped)), default=None)


async def live_view(ctx: RunContext, options: ConnectOptions | None = None) -> BootView:
    runtime, transports = runtime_for(
        ctx, options or ConnectOptions(connect_timeout_s=DEADLINES.operator_connect_s)
    )
    try:
        answers = await asyncio.gather(*(_ask(runtime, s) for s in ctx.specs))
    finally:
        await close_transports(transports)
    now = time.time()
    stopped_at = _stopped_at(ctx)
    state: BootState = replay_logs(ctx)
    states: dict[int, str] = {}
    for spec, answer in zip(ctx.specs, answers, strict=True):
        k = spec.rank
        if isinstance(answer, ClusterError):
            # Its sshd answered but its docker daemon did not in time (busy, or frozen): slow,
            # not lost. Anything else: the node could not be asked.
            late = answered_late(answer)
            event = NodeSlow if late else NodeLost
            state = reduce(state, event(ts=now, rank=k, reason=answer.line()))
            states[k] = "slow" if late else "unreachable"
            continue
        exit_state, sample, tail = answer
        states[k] = exit_state.status
        last = state.rank(k).last_signal_at or 0.0
        for stream, raw in tail:  # lines the preserved copy does not have yet
            ts = line_timestamp_ns(raw) / 1e9
            if ts > last:
                text = raw.decode(errors="replace").rstrip("\n")
                state = reduce(state, LogLine(ts=ts, rank=k, stream=stream, text=text))
        if sample is not None:
            state = reduce(
                state,
                Sample(ts=now, rank=k, **sample_fields(sample)),
            )
        if (exited := exit_event(k, exit_state, now)) is not None:
            state = reduce(state, exited)
        elif stopped_at is not None and exit_state.status == "missing":
            # `cluster stop` removed it: whatever its last line said (serving, warming), the
            # rank has exited; its row must not read as alive under a "stopped" header.
            state = reduce(state, RankExited(ts=now, rank=k, exit_code=None))
    ended = ctx.run.verdict()
    outcome = ended.outcome.value if ended else None
    phase, detail = RunPhase.booting, ""
    if stopped_at is not None and not any(
        v in ("running", "unreachable", "slow") for v in states.values()
    ):
        # Nothing left to ask: the run ended at `cluster stop`, whatever it had reached.
        when = datetime.fromtimestamp(stopped_at, UTC).strftime("%H:%M:%S UTC")
        after = "after READY " if outcome == "READY" else ""
        phase, detail = RunPhase.stopped, f"{after}(`cluster stop` at {when})"
    elif outcome == "READY" or state.rank(0).phase.value == "serving":
        latency = await asyncio.to_thread(probe_ready, ctx.ready_url)
        if latency is not None:
            state = reduce(state, HeadReady(ts=now, latency_s=latency))
            phase = RunPhase.ready
        elif outcome == "READY":
            phase, detail = RunPhase.ready, "(head not answering now)"
    elif outcome:
        phase = RunPhase.failed
    view = build_view(
        state,
        now,
        ctx.watch,
        run_id=ctx.run.id,
        recipe=ctx.recipe_name,
        phase=phase,
        phase_detail=detail,
        endpoint=ctx.endpoint,
        container_states=states,
    )
    return view.model_copy(update={"source": "live", "outcome": outcome})


async def current_view(ctx: RunContext, options: ConnectOptions | None = None) -> BootView:
    # After `cluster stop` a supervisor may live on a few seconds, its status.json still from
    # before the stop: the nodes say how the run ended.
    supervised = supervisor_view(ctx) if _stopped_at(ctx) is None else None
    return supervised or await live_view(ctx, options)
