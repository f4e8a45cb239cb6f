"""`cluster boot` itself in a real 80x24 terminal: the live table while the ranks load, then,
once the run is stopped from another terminal, the final table and the verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.terminal.conftest import (
    CLI,
    FAULT,
    RECIPE,
    SCALE,
    Boot,
    assert_readable,
    check_snapshot,
    cli_env,
    only_run,
    rows,
    stop,
    table_shown,
    wait_all_loading,
)

pytestmark = pytest.mark.terminal


def test_the_boots_live_table_reads_whole_at_80x24(private_dir: Path, terminal):
    env = cli_env(private_dir / "state")
    argv = [*CLI, "boot", RECIPE, "--scale", SCALE, "--sim-fault", FAULT]
    term = terminal(80, 24, argv, env)
    boot = Boot(only_run(private_dir / "state"), env)
    try:
        wait_all_loading(boot)
        screen = term.wait_for(
            lambda s: table_shown(s) and all(m["eta"] != "-" for m in rows(s)),
            "8 loading rows with an ETA",
        )
        assert "start 8 ranks, one wave: ranks 0-7" in term.history()  # not a Python list
        assert_readable(screen, 80)
        # The live region, from its title down (the steps and warnings above it scroll).
        check_snapshot("boot-live-80x24", screen[screen.index(f"{RECIPE} · run ") :])
    finally:
        stopped = stop(boot)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    # The boot ends (its ranks are gone) and prints its last table, laid out for 80 columns.
    term.wait_for(lambda s: "[exit " in s, "the boot's end", timeout=180)
    final = term.history()
    final = final[final.rindex(f"{RECIPE} · run ") :]  # the last table, then the verdict
    assert "rank  sim-node*  phase" in final
    assert "not shown at 80 columns" in final
