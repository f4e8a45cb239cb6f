"""The per-rank table laid out for a terminal width (supervisor/table.py): whole cells only,
columns kept in priority order, node names shortened by their common prefix."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from orchestrator.models.run import Finding
from orchestrator.supervisor.summary import fitted_summary
from orchestrator.supervisor.table import PRIORITY, BootTable, lay_out, shorten_nodes
from orchestrator.supervisor.view import BootView, RankRow

GiB = 2**30
T0 = 1796105871.0
NOTE = re.compile(r"rank \d+: ")


def row(k: int, phase: str = "loading", pct: float | None = 40.0, **kw: object) -> RankRow:
    fields: dict[str, object] = {
        "rank": k,
        "node": f"sim-node{k}",
        "phase": phase,
        "progress_pct": pct,
        "bytes_read": int(0.4 * GiB),
        "rate_bps": 3.1e6,
        "eta_s": 700.0 - k,
        "mem_free": int(16.9 * GiB),
        "mem_available": int(22.5 * GiB),
        "cached": int(5.4 * GiB),
        "last_line": f"[2026-12-01 06:17:51 TP{k}] Load weight begin. avail mem=17.08 GB",
        "signal_age_s": 1.2,
    }
    fields.update(kw)
    return RankRow.model_validate(fields)


def view(*rows: RankRow, phase: str = "booting", **kw: object) -> BootView:
    return BootView.model_validate(
        {
            "run_id": "20261201T061746Z-ac7924",
            "recipe": "mistral-large4-8x-sglang",
            "updated": T0,
            "phase": phase,
            "ranks": rows,
            **kw,
        }
    )


def loading() -> BootView:
    rows = [row(k, pct=40.0 + k) for k in range(8)]
    rows[5] = row(5, pct=31.0, eta_s=725.4, barrier_slack_s=-65.0)
    return view(*rows)


def troubled() -> BootView:
    """Every long cell at once: an OOM-killed rank, an unreachable one, a hostile last line,
    long FQDN node names, a 12-hour ETA, warnings and a verdict."""
    rows = [
        row(k, node=f"spark-{k + 1:02d}.rack-a.lab.example.com", eta_s=43_000.0) for k in range(8)
    ]
    rows[3] = row(
        3,
        "exited",
        43.0,
        node="spark-04.rack-a.lab.example.com",
        exit_code=137,
        oom_killed=True,
        last_line="Rank 0 scheduler is dead. [bold]not markup[/bold] " * 4,
    )
    rows[6] = row(
        6,
        "unreachable",
        None,
        node="spark-07.rack-a.lab.example.com",
        unreachable="no SSH handshake with 198.18.0.17:22 within 5 s",
    )
    warn = Finding(watcher="stall", severity="warning", rank=2, message="rank 2 stalled")
    return view(*rows, warnings=(warn, warn))


def serving() -> BootView:
    rows = [row(k, "serving", 100.0, eta_s=None, serving="in the group") for k in range(8)]
    rows[0] = row(0, "serving", 100.0, eta_s=None, serving="answers in 12 ms")
    return view(*rows, phase="ready")


VIEWS = {"loading": loading, "troubled": troubled, "serving": serving}


@pytest.mark.parametrize("name", sorted(VIEWS))
@pytest.mark.parametrize("width", range(60, 201))
def test_every_line_fits_cells_are_whole_and_columns_go_in_priority_order(name, width):
    v = VIEWS[name]()
    layout = lay_out(v, width)
    assert all(line.cell_len <= width for line in layout.lines), [
        line.plain for line in layout.lines if line.cell_len > width
    ]
    # A column is shown only if every more important one is.
    assert layout.shown == PRIORITY[: len(layout.shown)]
    assert set(layout.shown) | set(layout.hidden) == set(PRIORITY)
    assert {"rank", "phase", "load", "eta"} <= set(layout.shown)  # the reason to look
    # Each row holds each shown cell whole, left to right.
    rows = [line.plain for line in layout.lines[4 : 4 + len(v.ranks)]]
    for text, cells in zip(rows, layout.cells, strict=True):
        at = 0
        for c in cells:
            found = text.find(c, at)
            assert found >= 0, (c, text)
            at = found + len(c)
    if layout.hidden:
        footer = " ".join(line.plain for line in layout.lines[4 + len(v.ranks) :])
        assert "--wide" in footer


@pytest.mark.parametrize("width", [60, 80, 100, 160])
def test_rich_renders_the_layout_as_laid_out_without_folding_a_row(width):
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    v = loading()
    console.print(BootTable(v))
    lines = console.export_text().splitlines()
    assert lines == [line.plain.rstrip() for line in lay_out(v, width).lines]


def test_at_80_columns_every_column_but_the_least_important_four_is_on_screen():
    layout = lay_out(loading(), 80)
    assert layout.shown == ("rank", "phase", "load", "eta", "rate", "node", "avail", "slack")
    text = "\n".join(line.plain for line in layout.lines)
    assert "   5  5          loading  ██░░░░░░  31%  12m05s   3.1 MB/s   22.5 GiB  -1m05s" in text
    assert "not shown at 80 columns: read, MemFree, Cached, quiet (--wide shows all)" in text


def test_wide_shows_every_column_and_the_ascii_bar_stands_in_without_unicode():
    layout = lay_out(loading(), None, unicode=False)
    assert layout.shown == PRIORITY and not layout.hidden
    assert "###....." in layout.lines[4].plain


def test_only_the_ranks_that_matter_get_their_last_line_under_the_table():
    notes = [line.plain for line in lay_out(troubled(), 80).lines if NOTE.match(line.plain)]
    # the OOM-killed rank, the unreachable one, the slowest loader, the warned-about one
    assert [n.split(":")[0] for n in notes] == ["rank 3", "rank 6", "rank 0", "rank 2"]
    assert "[bold]not markup[/bold]" in notes[0]  # shown as written, never interpreted
    assert notes[0].endswith("…") and len(notes[0]) == 80
    assert notes[1] == "rank 6: no SSH handshake with 198.18.0.17:22 within 5 s"
    slow = [line.plain for line in lay_out(loading(), 160).lines if NOTE.match(line.plain)]
    assert slow == ["rank 5: [2026-12-01 06:17:51 TP5] Load weight begin. avail mem=17.08 GB"]


def test_a_serving_row_says_how_it_serves_and_shows_no_eta_nor_a_stale_rate():
    layout = lay_out(serving().model_copy(update={"outcome": "READY"}), 80)
    assert layout.cells[0][:6] == ("0", "0", "serving", "answers in 12 ms", "-", "-")
    assert layout.lines[1].plain == "06:17:51 ready · serving 0-7"  # not "ready · READY"


@pytest.mark.parametrize(
    ("names", "header", "short"),
    [
        ([f"sim-node{k}" for k in range(8)], "sim-node*", [str(k) for k in range(8)]),
        ([f"spark-{k:02d}" for k in range(1, 9)], "spark-*", [f"{k:02d}" for k in range(1, 9)]),
        (
            ["spark-01.lab.example.com", "spark-12.lab.example.com"],
            "spark-*.lab.example.com",
            ["01", "12"],
        ),
        (["alpha", "alpine"], "node", ["alpha", "alpine"]),  # never inside a word
        (["node1", "node10"], "node*", ["1", "10"]),  # never inside a number
        (["gpu", "gpu-2"], "node", ["gpu", "gpu-2"]),  # no name left empty
        (["only"], "node", ["only"]),
    ],
)
def test_node_names_lose_their_common_prefix_never_a_letter_to_an_ellipsis(names, header, short):
    got = shorten_nodes(names)
    assert got.header == header
    assert [got.short[n] for n in names] == short


@pytest.mark.parametrize("width", range(30, 201))
def test_the_summary_line_always_fits_and_keeps_the_slowest_rank_longest(width):
    v = troubled().model_copy(update={"ranks": loading().ranks})
    text = fitted_summary(v, width).plain
    assert len(text) <= width
    if width >= 64:
        assert "slowest rank 5 31% ETA 12m05s" in text
        assert "2 warnings" in text
    if width >= 120:
        assert "loading 0-7" in text  # ranks named when there is room, counted when not


def test_a_log_line_with_escape_sequences_is_shown_harmless_under_the_table():
    hostile = row(5, pct=31.0, last_line="\x1b]0;pwned\x07\x1b[2Jcleared [red]x[/red]")
    lines = [line.plain for line in lay_out(view(row(0), hostile), 120).lines]
    assert "rank 5: \\x1b]0;pwned\\x07\\x1b[2Jcleared [red]x[/red]" in lines
    assert not any("\x1b" in line for line in lines)


def test_the_summary_names_the_outcome_once_the_boot_has_one():
    failed = loading().model_copy(update={"phase": "failed", "outcome": "READY_TIMEOUT"})
    assert fitted_summary(failed, 80).plain.startswith("06:17:51 failed · READY_TIMEOUT · ")
    assert fitted_summary(failed, 24).plain == "06:17:51 failed · READY_TIMEOUT"


def test_past_four_last_lines_the_ranks_left_out_are_named():
    warn = [Finding(watcher="barrier", severity="warning", rank=k, message="m") for k in range(8)]
    lines = [
        line.plain for line in lay_out(loading().model_copy(update={"warnings": warn}), 100).lines
    ]
    notes = [line for line in lines if NOTE.match(line)]
    assert [n.split(":")[0] for n in notes] == ["rank 5", "rank 0", "rank 1", "rank 2"]
    assert "also ranks 3-4, 6-7: `cluster logs --rank K` shows a rank's lines" in lines


def test_a_rank_whose_node_answers_late_reads_slow_in_its_phase_cell_and_in_the_summary():
    rows = [row(k, pct=40.0 + k) for k in range(8)]
    rows[4] = row(
        4, pct=44.0, slow="docker inspect cluster-R-r4 answered after 4 s", slow_for_s=9.0
    )
    layout = lay_out(view(*rows), 160)
    phases = {cells[0]: cells[2] for cells in layout.cells}  # rank, node, phase, ...
    assert phases["4"] == "loading (slow)", phases
    assert all(p == "loading" for k, p in phases.items() if k != "4"), phases
    assert "slow to answer 4" in layout.lines[1].plain
    # Every line still fits at the narrowest width the table supports.
    assert all(len(line.plain) <= 60 for line in lay_out(view(*rows), 60).lines)
