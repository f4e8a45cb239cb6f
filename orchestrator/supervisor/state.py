"""The boot's state, folded from events by a pure reducer. Replaying events.jsonl rebuilds it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from orchestrator.dialects.base import PHASE_OF
from orchestrator.dialects.reader import Milestone, marked_lines, parse_line
from orchestrator.dialects.timestamps import strip_timestamps
from orchestrator.logtail import extend_tail
from orchestrator.models.memory import MemoryReading
from orchestrator.models.run import (
    Event,
    HeadReady,
    LogLine,
    NodeBack,
    NodeLost,
    NodeSlow,
    RankEvent,
    RankExited,
    RankPhase,
    RankStarted,
    Sample,
)

# Read-rate smoothing: new = ALPHA * instant + (1 - ALPHA) * old. Samples come every ~2 s;
# 0.5 follows a throttled disk within two samples yet ignores one burst.
RATE_ALPHA = 0.5


@dataclass(frozen=True)
class RankState:
    rank: int
    node: str
    phase: RankPhase = RankPhase.pending
    container: str = ""
    shards_done: int | None = None
    shards_total: int | None = None
    bytes_read: int = 0  # rchar of the rank's processes: what it has pulled through
    read_rate: float | None = None  # bytes/s, smoothed
    peak_rate: float = 0.0
    rate_samples: int = 0
    load_samples: int = 0  # rate samples taken after its load began: the basis of a prediction
    last_sample_ts: float | None = None
    last_rchar: int | None = None
    started_at: float | None = None
    load_began_at: float | None = None
    load_began_bytes: int = 0  # bytes_read when its load began: the base of load_rate
    load_ended_at: float | None = None
    barrier_failed: bool = False
    barrier_failed_at: float | None = None  # when its barrier error arrived (controller clock)
    exit_code: int | None = None
    oom_killed: bool = False
    exited_at: float | None = None
    phase_at_exit: RankPhase | None = None
    last_lines: tuple[str, ...] = ()
    last_signal_at: float | None = None
    progress_at: float | None = None  # last time bytes or milestones moved
    lost_since: float | None = None
    lost_reason: str = ""
    # Answering, but its sampling commands ran past their deadline since then (NodeSlow)
    slow_since: float | None = None
    slow_reason: str = ""
    memory: MemoryReading = field(default_factory=MemoryReading)  # the node's, last sampled

    @property
    def slow_for(self) -> float | None:
        """When its commands began running late, while that is still worth saying (not lost,
        not exited); None otherwise. The view's `slow` row and the slow-node watcher read it."""
        if self.lost_since is not None or self.phase is RankPhase.exited:
            return None
        return self.slow_since

    @property
    def shown_phase(self) -> RankPhase:
        return RankPhase.unreachable if self.lost_since is not None else self.phase

    @property
    def last_line(self) -> str:
        return self.last_lines[-1] if self.last_lines else ""

    @property
    def load_rate(self) -> float | None:
        """Bytes/s over the whole load so far (from its begin line to the last sample): the
        steady figure beside the smoothed `read_rate`, which one late sample on a busy host can
        halve. None until a sample came after the load began."""
        if self.load_began_at is None or self.last_sample_ts is None:
            return None
        span = self.last_sample_ts - self.load_began_at
        if span <= 0:
            return None
        return max(self.bytes_read - self.load_began_bytes, 0) / span

    def load_fraction(self, expected_bytes: int | None) -> float | None:
        """0..1: shard bar when the rank prints one, else bytes read against the recipe's share."""
        if self.phase.finished_loading or self.phase is RankPhase.serving:
            return 1.0
        by_bytes = (
            min(self.bytes_read / expected_bytes, 0.99)
            if expected_bytes and self.bytes_read
            else None
        )
        by_shards = (
            self.shards_done / self.shards_total
            if self.shards_total and self.shards_done is not None
            else None
        )
        known = [f for f in (by_bytes, by_shards) if f is not None]
        return max(known) if known else None

    def eta_s(self, expected_bytes: int | None) -> float | None:
        if not expected_bytes or not self.read_rate or self.phase.finished_loading:
            return None
        remaining = max(expected_bytes - self.bytes_read, 0)
        return remaining / self.read_rate


@dataclass(frozen=True)
class BootState:
    ranks: tuple[RankState, ...]
    first_load_end_at: float | None = None
    head_ready_at: float | None = None
    head_latency_s: float | None = None
    now: float = 0.0
    events_seen: int = field(default=0, compare=False)

    def rank(self, k: int) -> RankState:
        return self.ranks[k]


def initial_state(nodes: list[str]) -> BootState:
    return BootState(ranks=tuple(RankState(rank=k, node=n) for k, n in enumerate(nodes)))


_LAST_LINES = 20


def _advance(phase: RankPhase, to: RankPhase) -> RankPhase:
    """Phases only move forward; exited/unreachable are set by their own events."""
    if phase in (RankPhase.exited,):
        return phase
    return to if to.order > phase.order else phase


def _on_logs(r: RankState, ts: float, raw_lines: Sequence[str]) -> RankState:
    """Fold a batch of one rank's lines, all received at `ts`, with one copy of the state.

    The same as folding them one by one (a test holds it to that); the supervisor takes a
    chunk of lines at a time (~100 at serving volume), so the batch is stripped of timestamps
    and searched for milestones in one pass each, and only the lines that can still be in the
    tail are kept. A line that carries tqdm's \r-joined updates is read update by update."""
    text = strip_timestamps("\n".join(raw_lines))
    lines = text.split("\n") if raw_lines else []
    if "\r" in text:
        lines = [
            piece
            for line in lines
            for piece in (line.split("\r") if "\r" in line else (line,))
            if piece or "\r" not in line
        ]
    phase = _advance(r.phase, RankPhase.starting)
    changes: dict[str, object] = {}
    # Only the lines a keyword is on (one pass over the batch), each read update by update.
    for line in (piece for hit in marked_lines(text) for piece in hit.split("\r")):
        p = parse_line(line)
        if p is None:
            continue
        changes["progress_at"] = ts
        m = p.milestone
        proves = PHASE_OF.get(m)  # the dialect tables say which phase a milestone proves
        if proves is not None:
            phase = _advance(phase, proves)
        if m is Milestone.load_begin or (m is Milestone.shards and r.load_began_at is None):
            # the begin line, or the first shard bar of an engine that prints none
            changes.setdefault("load_began_at", r.load_began_at or ts)
            if r.load_began_at is None:
                changes.setdefault("load_began_bytes", r.bytes_read)
        if m is Milestone.shards:
            changes.update(shards_done=p.done, shards_total=p.total)
        elif m is Milestone.load_end:
            changes.setdefault("load_ended_at", r.load_ended_at or ts)
        elif m is Milestone.barrier_failed:
            changes["barrier_failed"] = True
            changes.setdefault("barrier_failed_at", r.barrier_failed_at or ts)
    changes.update(
        last_lines=extend_tail(r.last_lines, lines, _LAST_LINES), last_signal_at=ts, phase=phase
    )
    return replace(r, **changes)  # type: ignore[arg-type]


def _on_sample(r: RankState, e: Sample) -> RankState:
    changes: dict[str, object] = {
        "memory": MemoryReading.of(e),
        "last_signal_at": e.ts,
        "lost_since": None,
        "slow_since": None,
    }
    if e.rchar is not None:
        # rchar is cumulative over the rank's live processes since they started; a reader
        # child that exits takes its count with it, so progress never goes backwards.
        bytes_read = max(e.rchar, r.bytes_read)
        changes["bytes_read"] = bytes_read
        if bytes_read > r.bytes_read:
            changes["progress_at"] = e.ts
        if r.last_sample_ts is not None and r.last_rchar is not None and e.ts > r.last_sample_ts:
            instant = max(e.rchar - r.last_rchar, 0) / (e.ts - r.last_sample_ts)
            rate = (
                instant
                if r.read_rate is None
                else (RATE_ALPHA * instant + (1 - RATE_ALPHA) * r.read_rate)
            )
            in_load = r.load_began_at is not None and e.ts > r.load_began_at
            changes.update(
                read_rate=rate,
                peak_rate=max(r.peak_rate, rate),
                rate_samples=r.rate_samples + 1,
                load_samples=r.load_samples + (1 if in_load else 0),
            )
        changes.update(last_sample_ts=e.ts, last_rchar=e.rchar)
    return replace(r, **changes)  # type: ignore[arg-type]


def reduce_lines(state: BootState, rank: int, ts: float, lines: Sequence[str]) -> BootState:
    """Fold a batch of rank `rank`'s log lines received at `ts`: `reduce` with a `LogLine`
    for each, at the cost of one."""
    r = state.ranks[rank]
    new = _on_logs(r, ts, lines)
    first_end = state.first_load_end_at
    if new.load_ended_at is not None and first_end is None:
        first_end = new.load_ended_at
    return replace(
        state,
        ranks=(*state.ranks[:rank], new, *state.ranks[rank + 1 :]),
        now=max(state.now, ts),
        events_seen=state.events_seen + len(lines),
        first_load_end_at=first_end,
    )


def reduce(state: BootState, event: Event) -> BootState:
    """Fold one event into the state. Pure: same events, same state."""
    r = state.ranks[event.rank] if isinstance(event, RankEvent) else None
    new: RankState | None = None
    extra: dict[str, object] = {}
    if isinstance(event, LogLine) and r is not None:
        return reduce_lines(state, event.rank, event.ts, (event.text,))
    elif isinstance(event, Sample) and r is not None:
        new = _on_sample(r, event)
    elif isinstance(event, RankStarted) and r is not None:
        new = replace(
            r,
            container=event.container,
            started_at=event.ts,
            phase=_advance(r.phase, RankPhase.starting),
            last_signal_at=event.ts,
            progress_at=event.ts,
        )
    elif isinstance(event, RankExited) and r is not None:
        lines = r.last_lines or event.last_lines
        new = replace(
            r,
            phase=RankPhase.exited,
            phase_at_exit=r.phase_at_exit or r.phase,
            exit_code=event.exit_code,
            oom_killed=event.oom_killed,
            exited_at=event.finished_at or event.ts,
            last_lines=lines,
        )
    elif isinstance(event, NodeLost) and r is not None:
        # The phase is kept: a node that comes back resumes where it was.
        new = replace(
            r, lost_since=r.lost_since or event.ts, lost_reason=event.reason, slow_since=None
        )
    elif isinstance(event, NodeBack) and r is not None:
        new = replace(r, lost_since=None, lost_reason="")
    elif isinstance(event, NodeSlow) and r is not None:
        # It answered: whatever loss was counted ends; slowness is watched on its own.
        new = replace(
            r,
            lost_since=None,
            lost_reason="",
            slow_since=r.slow_since or event.ts,
            slow_reason=event.reason,
        )
    elif isinstance(event, HeadReady):
        extra.update(head_ready_at=state.head_ready_at or event.ts, head_latency_s=event.latency_s)
    ranks = state.ranks
    if isinstance(event, HeadReady):
        # The head serves only once every rank of its group is in: a worker that loaded serves
        # with it, though it prints nothing more (SGLang's TP>0 ranks, vLLM's headless workers).
        ranks = tuple(
            replace(x, phase=RankPhase.serving) if x.phase.finished_loading else x for x in ranks
        )
    if new is not None and r is not None:
        ranks = (*ranks[: r.rank], new, *ranks[r.rank + 1 :])
    return replace(
        state,
        ranks=ranks,
        now=max(state.now, event.ts),
        events_seen=state.events_seen + 1,
        **extra,  # type: ignore[arg-type]
    )
