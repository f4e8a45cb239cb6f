"""`cluster runs` and `cluster logs`: what earlier and current runs kept, from any terminal."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from orchestrator.cli.complete import complete_run
from orchestrator.cli.options import InventoryOpt, JsonOpt
from orchestrator.cli.output import console, harmless, plain, print_json
from orchestrator.cli.stores import pick_run, store_for
from orchestrator.dialects.timestamps import timestamp_ns
from orchestrator.errors import ConfigError, RunStoreError
from orchestrator.run.logs import follow_lines, list_runs, merged_lines, rank_log_paths

RunOpt = Annotated[
    str | None,
    typer.Option(
        "--run",
        help="run id or run directory (default: the newest run)",
        autocompletion=complete_run,
    ),
]


def runs(inventory: InventoryOpt = None, json_out: JsonOpt = False) -> None:
    """The run directories, newest first: recipe, start, outcome, duration, serving restarts."""
    summaries = list_runs(store_for(inventory))
    if json_out:
        print_json([s.model_dump(mode="json") for s in summaries])
        return
    table = Table(title="runs", title_justify="left")
    for col in ("run", "recipe", "started (UTC)", "outcome", "duration", "restarts", "supervisor"):
        table.add_column(col)
    for s in summaries:
        table.add_row(
            s.run_id,
            plain(s.recipe or "-"),
            s.started[:19].replace("T", " "),
            plain(s.outcome or (f"unreadable: {s.problem}" if s.problem else "-")),
            "-" if s.duration_s is None else f"{s.duration_s:.0f}s",
            str(s.restarts) if s.restarts else "-",
            "alive" if s.supervisor_alive else "-",
        )
    console.print(table)


def logs(
    inventory: InventoryOpt = None,
    run: RunOpt = None,
    rank: Annotated[int | None, typer.Option("--rank", help="one rank's log")] = None,
    all_ranks: Annotated[bool, typer.Option("--all", help="every rank, merged by time")] = False,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="keep printing new lines")] = False,
    since: Annotated[
        str | None, typer.Option("--since", help="RFC 3339 time, e.g. 2026-11-29T15:31:00Z")
    ] = None,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw",
            help="print lines byte for byte, escape sequences included (for a pipe; by default "
            "control characters are shown as \\xNN so a log cannot drive your terminal)",
        ),
    ] = False,
) -> None:
    """Preserved rank logs from the run directory (both streams, in time order)."""
    if since is not None:
        check_since(since)
    r = pick_run(store_for(inventory), run)
    known = list(rank_log_paths(r))
    if not known:
        raise RunStoreError("this run has no rank logs yet", where=str(r.dir))
    if rank is not None and rank not in known:
        raise ConfigError(f"no rank {rank} in run {r.id} (ranks: {known})", where=str(r.dir))
    ranks = known if all_ranks or rank is None else [rank]
    prefix = len(ranks) > 1
    shown = (lambda text: text) if raw else harmless
    for k, line in merged_lines(r, ranks, since):
        print(f"[rank {k}] {shown(line)}" if prefix else shown(line))
    if follow:
        try:
            for k, line in follow_lines(r, ranks):
                print(f"[rank {k}] {shown(line)}" if prefix else shown(line), flush=True)
        except KeyboardInterrupt:
            return


def check_since(text: str) -> None:
    """`--since` must be a time we can compare, not silently "since the beginning"."""
    try:
        ok = timestamp_ns(text) > 0
    except (ValueError, OverflowError):
        ok = False
    if not ok:
        raise ConfigError(
            f"--since {text!r}: expected an RFC 3339 time, e.g. 2026-11-29T15:31:00Z",
            where="cluster logs",
        )
