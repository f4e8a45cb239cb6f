"""The plain progress line a boot writes when its output is not a terminal."""

from __future__ import annotations

from datetime import UTC, datetime

from orchestrator.supervisor.summary import PlainProgress, summary_line
from orchestrator.supervisor.view import BootView, RankRow

T0 = datetime(2026, 11, 29, 21, 37, 40, tzinfo=UTC).timestamp()


def view(at: float, *rows: RankRow, phase: str = "booting") -> BootView:
    return BootView(run_id="r", recipe="x", updated=at, phase=phase, ranks=rows)


def row(rank: int, phase: str, pct: float | None = None, eta: float | None = None, **kw) -> RankRow:
    return RankRow(rank=rank, node=f"n{rank}", phase=phase, progress_pct=pct, eta_s=eta, **kw)


def loading_view(at: float = T0) -> BootView:
    return view(
        at,
        *(row(k, "loading", 40.0, 700) for k in (0, 1, 2, 4, 6, 7)),
        row(3, "loaded", 100.0),
        row(5, "loading", 31.0, 725.4),
    )


def test_the_line_names_each_phases_ranks_the_overall_progress_and_the_slowest_rank():
    assert summary_line(loading_view()) == (
        "21:37:40 booting · loading 0-2, 4-7 · loaded 3 · 46% · slowest rank 5 31% ETA 12m05s"
    )


def test_an_unreachable_rank_is_named_with_its_reason_and_a_ready_boot_shows_no_percentage():
    lost = view(
        T0,
        row(0, "serving", 100.0),
        row(1, "unreachable", 100.0, unreachable="no SSH handshake with 198.18.0.11:22 within 5 s"),
        phase="ready",
    )
    assert summary_line(lost) == (
        "21:37:40 ready · serving 0 · unreachable 1 · "
        "rank 1 unreachable: no SSH handshake with 198.18.0.11:22 within 5 s"
    )


def test_a_line_is_due_at_once_on_a_phase_change_and_otherwise_every_interval():
    plain = PlainProgress(every_s=30)
    assert plain.due(loading_view(T0)) is not None  # the first view
    assert plain.due(loading_view(T0 + 1)) is None  # nothing moved on, too soon
    assert plain.due(loading_view(T0 + 29)) is None
    assert plain.due(loading_view(T0 + 30)) is not None  # the interval
    moved = view(T0 + 31, *(row(k, "loaded", 100.0) for k in range(8)))
    assert plain.due(moved) == "21:38:11 booting · loaded 0-7"  # a phase change, at once


def test_the_verdict_gets_its_line_even_when_no_rank_moved():
    plain = PlainProgress(every_s=30)
    serving = [row(k, "serving", 100.0) for k in range(8)]
    assert plain.due(view(T0, *serving)) is not None
    assert plain.due(view(T0 + 1, *serving, phase="ready")) == "21:37:41 ready · serving 0-7"


def test_ranks_whose_nodes_answer_late_are_named_slow_not_unreachable():
    late = view(
        T0,
        row(0, "loading", 40.0, 700),
        row(1, "loading", 41.0, 690, slow="docker inspect c1 answered after 4 s", slow_for_s=8.0),
        row(2, "loading", 42.0, 680, slow="docker logs c2 answered after 10 s", slow_for_s=3.0),
    )
    line = summary_line(late)
    assert line.endswith("slow to answer 1-2"), line
    assert "unreachable" not in line
