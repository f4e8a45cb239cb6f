"""What the supervisor measured while the boot ran: the evidence no rank printed.

A straggler's fault often shows only in its peers' words (a watchdog, a lost peer, a ready
timeout), and the peer that printed first is a victim. The supervisor measured what decides it:
each rank's bytes read (samples.jsonl), when each rank started (rank_started), when it lost a
node (node_lost), what it warned about and projected (warning records), and the phase each rank
was in at its last look (status.json). This module holds those measurements as one typed, pure
structure (`Measured`), built from records `collect` read; `blame.from_measured` weighs it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from pydantic import ConfigDict

from orchestrator.models.base import StrictModel
from orchestrator.models.events import Record, VerdictRecord, WatcherWarning
from orchestrator.models.run import NodeBack, NodeLost, RankStarted

SAMPLE_EVERY_S = 2.0
"""The supervisor samples each node every 2 s (docs/run-directory.md, samples.jsonl)."""


class SampleRow(StrictModel):
    """One line of rank-<k>/samples.jsonl (fields a newer version adds are ignored)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    ts: float
    rchar: int | None = None
    read_bytes: int | None = None
    mem_free: int | None = None
    mem_available: int | None = None
    cached: int | None = None


class Mark(StrictModel):
    """A measurement and where the run directory keeps it."""

    file: str  # relative to the run directory
    line: int
    text: str
    ts: float


class Reading(StrictModel):
    """Bytes a rank's processes had read by `ts` (cumulative, never going backwards)."""

    ts: float
    bytes_read: int
    line: int  # in rank-<k>/samples.jsonl


class Warned(Mark):
    watcher: str  # barrier, vllm-ready, stall, page-cache, rendezvous, ...


class RankMeasures(StrictModel):
    rank: int
    node: str | None = None
    started: Mark | None = None  # the supervisor started its container (rank_started)
    readings: tuple[Reading, ...] = ()  # every sample, in time order
    lost: Mark | None = None  # the supervisor lost its node for good (node_lost, no node_back)
    warnings: tuple[Warned, ...] = ()  # the supervisor's warnings naming this rank
    view_phase: str | None = None  # the phase at the supervisor's last look (status.json)

    @property
    def samples_file(self) -> str:
        return f"rank-{self.rank}/samples.jsonl"

    @property
    def last_sample(self) -> Reading | None:
        return self.readings[-1] if self.readings else None

    def reading_at(self, ts: float) -> Reading | None:
        """The last reading taken at or before `ts`."""
        found = None
        for r in self.readings:
            if r.ts > ts:
                break
            found = r
        return found

    def rate_before(self, ts: float, window_s: float = 20.0) -> float | None:
        """Bytes per second over the readings of the `window_s` before `ts`."""
        seen = [r for r in self.readings if ts - window_s <= r.ts <= ts]
        if len(seen) < 2 or seen[-1].ts <= seen[0].ts:
            return None
        return (seen[-1].bytes_read - seen[0].bytes_read) / (seen[-1].ts - seen[0].ts)


class Measured(StrictModel):
    """Everything the supervisor measured about a run's ranks."""

    expected_bytes: int | None = None  # each rank's share of the weights (the recipe's)
    ranks: tuple[RankMeasures, ...] = ()
    # When the supervisor ended the boot (its last verdict record's decided_at): what a rank
    # printed after it came too late for the boot (a head up after READY_TIMEOUT)
    decided: Mark | None = None

    def of(self, rank: int) -> RankMeasures | None:
        return next((m for m in self.ranks if m.rank == rank), None)

    def fraction_at(self, rank: int, ts: float) -> float | None:
        """How much of its share a rank had read by `ts` (0..1), by its samples."""
        m = self.of(rank)
        reading = m.reading_at(ts) if m is not None else None
        if reading is None or not self.expected_bytes:
            return None
        return min(reading.bytes_read / self.expected_bytes, 1.0)

    def late_start(self, rank: int) -> float | None:
        """How many seconds after the others' median start this rank started (None: unknown)."""
        m = self.of(rank)
        others = [x.started.ts for x in self.ranks if x.rank != rank and x.started is not None]
        if m is None or m.started is None or not others:
            return None
        return m.started.ts - statistics.median(others)


def measured_from(
    events: Sequence[tuple[int, Record]],
    samples: Mapping[int, Sequence[tuple[int, SampleRow]]],
    *,
    ranks: Sequence[int],
    expected_bytes: int | None = None,
    nodes: Mapping[int, str] | None = None,
    view_phases: Mapping[int, str] | None = None,
) -> Measured:
    """The measurements, from events.jsonl's records and each rank's samples (line, row)."""
    nodes = nodes or {}
    view_phases = view_phases or {}
    decided: Mark | None = None
    for n, ev in events:
        if isinstance(ev, VerdictRecord):
            text = f"verdict: {ev.outcome.value if ev.outcome else '-'} ({ev.message[:200]})"
            at = ev.decided_at if ev.decided_at is not None else ev.ts
            decided = Mark(file="events.jsonl", line=n, text=text, ts=at)
    out: list[RankMeasures] = []
    for k in ranks:
        started: Mark | None = None
        lost: Mark | None = None
        warned: list[Warned] = []
        for n, ev in events:
            if getattr(ev, "rank", None) != k:
                continue
            if isinstance(ev, RankStarted) and started is None:
                text = f"rank_started: rank {k} ({ev.container})"
                started = Mark(file="events.jsonl", line=n, text=text, ts=ev.ts)
            elif isinstance(ev, NodeLost):
                text = f"node_lost: rank {k}'s node became unreachable ({ev.reason})"
                lost = lost or Mark(file="events.jsonl", line=n, text=text, ts=ev.ts)
            elif isinstance(ev, NodeBack):
                lost = None
            elif isinstance(ev, WatcherWarning):
                warned.append(
                    Warned(
                        file="events.jsonl",
                        line=n,
                        text=ev.message[:2000],
                        ts=ev.ts,
                        watcher=ev.watcher,
                    )
                )
        readings: list[Reading] = []
        most = 0
        for n, row in sorted(samples.get(k, ()), key=lambda nr: nr[1].ts):
            # rchar counts the rank's live processes: a reader child that exits takes its count
            # with it, so the supervisor keeps the largest seen (supervisor/state.py does too)
            most = max(most, row.rchar or 0)
            readings.append(Reading(ts=row.ts, bytes_read=most, line=n))
        out.append(
            RankMeasures(
                rank=k,
                node=nodes.get(k),
                started=started,
                readings=tuple(readings),
                lost=lost,
                warnings=tuple(warned),
                view_phase=view_phases.get(k),
            )
        )
    return Measured(expected_bytes=expected_bytes, ranks=tuple(out), decided=decided)
