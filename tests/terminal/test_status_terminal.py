"""`cluster status` and `status --watch` in a real terminal during a detached boot, at 80x24,
100x30 and 160x40, a resize, and the screen after `cluster stop`. One boot for the module."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.terminal.conftest import (
    CLI,
    Boot,
    assert_readable,
    check_snapshot,
    cli_env,
    start_detached,
    stop,
    table_shown,
    wait_all_loading,
)

pytestmark = pytest.mark.terminal
FG = re.compile(r"\x1b\[(?:\d+;)*3[0-8](?:;\d+)*m")  # a foreground colour; 39 is the default


@pytest.fixture(scope="module")
def boot(private_dir: Path) -> Iterator[Boot]:
    boot = start_detached(cli_env(private_dir / "state"), private_dir)
    try:
        wait_all_loading(boot)
        yield boot
    finally:
        stop(boot)


# What each size must show: the columns by priority that fit, the rest named in the footer.
EXPECTED = {
    (80, 24): ("rank  sim-node*  phase", "not shown at 80 columns: read, MemFree, Cached, quiet"),
    (100, 30): ("MemAvail   slack", "not shown at 100 columns: Cached, quiet"),
    (160, 40): ("Cached  quiet", None),
}


@pytest.mark.parametrize(("width", "height"), sorted(EXPECTED))
def test_status_watch_shows_every_rank_whole_at_each_terminal_size(boot, terminal, width, height):
    term = terminal(width, height, [*CLI, "status", "--watch", "--run", boot.run_id], boot.env)
    screen = term.wait_for(table_shown, "table of 8 ranks")
    assert_readable(screen, width)
    header, footer = EXPECTED[width, height]
    assert header in screen
    if footer:
        assert footer in screen and "(--wide shows all)" in screen
    else:
        assert "not shown" not in screen
    assert "slowest rank " in screen and " ETA " in screen  # the summary line
    check_snapshot(f"status-watch-{width}x{height}", screen)


def test_a_resized_terminal_gets_its_own_layout_on_the_next_refresh(boot, terminal):
    term = terminal(160, 40, [*CLI, "status", "--watch", "--run", boot.run_id], boot.env)
    term.wait_for(lambda s: table_shown(s) and "Cached" in s, "the wide table")
    term.resize(80, 24)
    screen = term.wait_for(
        lambda s: table_shown(s) and "not shown at 80 columns" in s, "the 80-column layout"
    )
    assert_readable(screen, 80)


def test_one_status_at_80x24_and_the_wide_table_on_request(boot, terminal):
    term = terminal(80, 24, [*CLI, "status", "--run", boot.run_id], boot.env)
    screen = term.wait_for(lambda s: "[exit " in s, "the command's end")
    assert "[exit 0]" in screen
    assert_readable(screen, 80)
    check_snapshot("status-80x24", screen)
    wide = terminal(200, 40, [*CLI, "status", "--wide", "--run", boot.run_id], boot.env)
    screen = wide.wait_for(lambda s: "[exit " in s, "the command's end")
    assert "quiet" in screen and "not shown" not in screen
    assert_readable(screen, 200)


def test_a_dumb_terminal_gets_the_plain_progress_lines_and_no_color_only_loses_colour(
    boot, terminal
):
    dumb = {**boot.env, "TERM": "dumb"}
    argv = [*CLI, "status", "--watch", "--interval", "1", "--run", boot.run_id]
    term = terminal(80, 24, argv, dumb)
    line = re.compile(r"^\d\d:\d\d:\d\d booting · loading 0-7 · \d+% · slowest rank \d ", re.M)
    screen = term.wait_for(lambda s: bool(line.search(s)), "a plain progress line")
    assert "rank  sim-node*" not in screen  # no table: it could not be redrawn in place
    colourless = {**boot.env, "NO_COLOR": "1"}
    term = terminal(80, 24, [*CLI, "status", "--run", boot.run_id], colourless)
    term.wait_for(lambda s: "[exit " in s, "the command's end")
    assert_readable(term.screen(), 80)  # the same layout
    assert not FG.search(term.screen(escapes=True))  # no foreground colour (cyan bars, ...)
    coloured = terminal(80, 24, [*CLI, "status", "--run", boot.run_id], boot.env)
    coloured.wait_for(lambda s: "[exit " in s, "the command's end")
    assert FG.search(coloured.screen(escapes=True))  # where colour is allowed, it is there


def test_after_stop_no_row_reads_alive_and_stop_counts_processes(boot, terminal):
    term = terminal(80, 24, [*CLI, "stop", "--yes", "--run", boot.run_id], boot.env)
    screen = term.wait_for(lambda s: "[exit " in s, "the stop's end", timeout=180)
    assert "[exit 0]" in screen
    assert "stopped 8 processes" in screen.replace("\n", "")
    assert "containers" not in screen
    term = terminal(80, 24, [*CLI, "status", "--run", boot.run_id], boot.env)
    screen = term.wait_for(lambda s: "[exit " in s, "the command's end")
    assert " stopped (`cluster stop` at " in screen
    for word in ("serving", "warming", "loading", "in the group"):
        assert word not in screen
    assert screen.count(" exited ") >= 8
    assert all(len(line) <= 80 for line in screen.splitlines())
