"""A boot's progress as one plain line, for output that is not a terminal.

The live table redraws in place, which a log file cannot do: `cluster boot > boot.log`, nohup,
or `--detach`'s controller.log would otherwise hold nothing between the steps and the verdict
of an 80-minute boot. There, a line like this is written every `EVERY_S` seconds and whenever
the boot or a rank changes phase, so whoever tails the file sees what a glance at the table
would tell:

    21:37:40 booting · loading 0-2, 4-7 · loaded 3 · 42% · slowest rank 5 31% ETA 12m05s
"""

from __future__ import annotations

from datetime import UTC, datetime

from orchestrator.models.run import RankPhase
from orchestrator.supervisor.view import BootView, RankRow, duration_text
from orchestrator.wording import rank_list

EVERY_S = 30.0
_ORDER = tuple(p.value for p in RankPhase)  # boot order


def phases_of(view: BootView) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Each phase with its ranks, in boot order: what changes when a rank moves on."""
    by_phase: dict[str, list[int]] = {}
    for r in view.ranks:
        by_phase.setdefault(r.phase, []).append(r.rank)
    known = [p for p in _ORDER if p in by_phase] + sorted(set(by_phase) - set(_ORDER))
    return tuple((p, tuple(by_phase[p])) for p in known)


def _slowest(rows: tuple[RankRow, ...]) -> RankRow | None:
    """The rank furthest behind among those still loading: the barrier waits for it."""
    loading = [r for r in rows if r.phase == "loading" and r.progress_pct is not None]
    return min(loading, key=lambda r: (r.progress_pct, r.rank), default=None)


def summary_line(view: BootView) -> str:
    clock = datetime.fromtimestamp(view.updated, UTC).strftime("%H:%M:%S")
    parts = [f"{clock} {view.phase}"]
    parts += [f"{phase} {rank_list(ranks)}" for phase, ranks in phases_of(view)]
    known = [r.progress_pct for r in view.ranks if r.progress_pct is not None]
    if known and any(r.phase in ("starting", "initializing", "loading") for r in view.ranks):
        parts.append(f"{sum(known) / len(view.ranks):.0f}%")
    slow = _slowest(view.ranks)
    if slow is not None:
        eta = f" ETA {duration_text(slow.eta_s)}" if slow.eta_s is not None else ""
        parts.append(f"slowest rank {slow.rank} {slow.progress_pct:.0f}%{eta}")
    lost = [r for r in view.ranks if r.unreachable]
    parts += [f"rank {r.rank} unreachable: {r.unreachable}" for r in lost[:2]]
    return " · ".join(parts)


class PlainProgress:
    """Decides when a summary line is due: when the boot or a rank changes phase, else every
    `every_s` seconds."""

    def __init__(self, every_s: float = EVERY_S) -> None:
        self.every_s = every_s
        self._last_at: float | None = None
        self._last_phases: tuple[str, tuple[tuple[str, tuple[int, ...]], ...]] = ("", ())

    def due(self, view: BootView) -> str | None:
        phases = (view.phase, phases_of(view))
        recent = self._last_at is not None and view.updated - self._last_at < self.every_s
        if phases == self._last_phases and recent:
            return None
        self._last_at = view.updated
        self._last_phases = phases
        return summary_line(view)
