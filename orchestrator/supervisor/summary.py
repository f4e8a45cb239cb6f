"""A boot's progress as one plain line, for output that is not a terminal.

The live table redraws in place, which a log file cannot do: `cluster boot > boot.log`, nohup,
or `--detach`'s controller.log would otherwise hold nothing between the steps and the verdict
of an 80-minute boot. There, a line like this is written every `EVERY_S` seconds and whenever
the boot or a rank changes phase, so whoever tails the file sees what a glance at the table
would tell:

    21:37:40 booting · loading 0-2, 4-7 · loaded 3 · 42% · slowest rank 5 31% ETA 12m05s

A terminal shows the same pieces above its table (`fitted_summary`), thinned to its width.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from rich.text import Text

from orchestrator.models.run import RankPhase
from orchestrator.supervisor.view import BootView, RankRow, duration_text
from orchestrator.wording import plural, rank_list

EVERY_S = 30.0
_ORDER = tuple(p.value for p in RankPhase)  # boot order


def phases_of(view: BootView) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Each phase with its ranks, in boot order: what changes when a rank moves on."""
    by_phase: dict[str, list[int]] = {}
    for r in view.ranks:
        by_phase.setdefault(r.phase, []).append(r.rank)
    known = [p for p in _ORDER if p in by_phase] + sorted(set(by_phase) - set(_ORDER))
    return tuple((p, tuple(by_phase[p])) for p in known)


def slowest(rows: tuple[RankRow, ...]) -> RankRow | None:
    """The rank furthest behind among those still loading: the barrier waits for it."""
    loading = [r for r in rows if r.phase == "loading" and r.progress_pct is not None]
    return min(loading, key=lambda r: (r.progress_pct, r.rank), default=None)


@dataclass(frozen=True)
class Part:
    """One piece of the line. `drop`: the order pieces go when a terminal is too narrow (the
    highest first; 0 never); `short`: what it says before it goes (counts, not rank lists)."""

    text: str
    drop: int = 0
    short: str = ""
    style: str = ""


def summary_parts(view: BootView) -> list[Part]:
    clock = datetime.fromtimestamp(view.updated, UTC).strftime("%H:%M:%S")
    parts = [Part(f"{clock} {view.phase_text}")]
    parts += [
        Part(f"{phase} {rank_list(ranks)}", 3, f"{phase} {len(ranks)}")
        for phase, ranks in phases_of(view)
    ]
    known = [r.progress_pct for r in view.ranks if r.progress_pct is not None]
    if known and any(r.phase in ("starting", "initializing", "loading") for r in view.ranks):
        parts.append(Part(f"{sum(known) / len(view.ranks):.0f}%", 4))
    slow = slowest(view.ranks)
    if slow is not None:
        eta = f" ETA {duration_text(slow.eta_s)}" if slow.eta_s is not None else ""
        parts.append(Part(f"slowest rank {slow.rank} {slow.progress_pct:.0f}%{eta}", 1))
    lost = [r for r in view.ranks if r.unreachable]
    parts += [Part(f"rank {r.rank} unreachable: {r.unreachable}", 5) for r in lost[:2]]
    late = [r for r in view.ranks if r.slow]
    if late:
        parts.append(
            Part(
                f"slow to answer {rank_list(r.rank for r in late)}",
                5,
                f"slow to answer {len(late)}",
            )
        )
    return parts


def summary_line(view: BootView) -> str:
    return " · ".join(p.text for p in summary_parts(view))


def fitted_summary(view: BootView, width: int | None) -> Text:
    """The line above the terminal's table: the plain line's pieces plus the outcome and the
    warnings count, shortened and then thinned, least important first, until it fits `width`."""
    parts = summary_parts(view)
    if view.warnings:
        parts.insert(1, Part(plural(len(view.warnings), "warning"), 2, style="yellow"))
    if view.outcome and view.outcome.lower() not in parts[0].text.lower():  # not "ready · READY"
        parts.insert(1, Part(view.outcome, style="green" if view.outcome == "READY" else "red"))

    def joined() -> str:
        return " · ".join(p.text for p in parts)

    while width is not None and len(joined()) > width:
        movable = [i for i, p in enumerate(parts) if p.drop]
        if not movable:
            break  # the clock and the phase alone: the caller cuts them at the width
        i = max(movable, key=lambda i: (parts[i].drop, i))
        if parts[i].short and parts[i].short != parts[i].text:
            parts[i] = Part(parts[i].short, parts[i].drop, style=parts[i].style)
        else:
            del parts[i]
    text = Text(no_wrap=True, end="")
    for i, p in enumerate(parts):
        if i:
            text.append(" · ")
        text.append(p.text, style="bold" if i == 0 else p.style)
    return text


class PlainProgress:
    """Decides when a summary line is due: when the boot or a rank changes phase, else every
    `every_s` seconds."""

    def __init__(self, every_s: float = EVERY_S) -> None:
        self.every_s = every_s
        self._last_at: float | None = None
        self._last_phases: tuple[str, tuple[tuple[str, tuple[int, ...]], ...]] = ("", ())

    def due(self, view: BootView) -> str | None:
        phases = (view.phase_text, phases_of(view))
        recent = self._last_at is not None and view.updated - self._last_at < self.every_s
        if phases == self._last_phases and recent:
            return None
        self._last_at = view.updated
        self._last_phases = phases
        return summary_line(view)
