"""Operate a boot from any terminal: `cluster status`, `supervise`, `stop`, `prune`."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from enum import StrEnum
from typing import Annotated

import typer
from rich.live import Live
from rich.text import Text

from orchestrator.cli.complete import complete_run
from orchestrator.cli.inventory import open_inventory
from orchestrator.cli.options import InventoryOpt, JsonOpt, WideOpt
from orchestrator.cli.output import (
    console,
    err_console,
    live_terminal,
    plain,
    print_json,
    styled,
)
from orchestrator.cli.runs import RunOpt
from orchestrator.cli.stores import pick_run, store_for
from orchestrator.errors import BootFailed, ConfigError, UnhealthyCluster
from orchestrator.models.events import Step
from orchestrator.models.run import Finding, Outcome, RunPhase
from orchestrator.run.context import load_context
from orchestrator.run.status import current_view
from orchestrator.run_files import RankImage
from orchestrator.runstore import Run, RunStore
from orchestrator.supervisor.summary import PlainProgress
from orchestrator.supervisor.table import BootTable
from orchestrator.supervisor.view import BootView
from orchestrator.wording import plural, rank_list


class StatusFormat(StrEnum):
    table = "table"
    json = "json"
    prometheus = "prometheus"


YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="do not ask")]


def status(
    inventory: InventoryOpt = None,
    run: RunOpt = None,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="refresh in place until Ctrl-C")
    ] = False,
    json_out: JsonOpt = False,
    interval: Annotated[
        float,
        typer.Option("--interval", help="seconds between refreshes (at least 0.2)", min=0.2),
    ] = 2.0,
    wide: WideOpt = False,
    output: Annotated[
        StatusFormat,
        typer.Option(
            "--format", help="table, json (as --json), or prometheus (metrics.prom's text)"
        ),
    ] = StatusFormat.table,
) -> None:
    """One row per rank: phase, load, ETA, rate, memory, barrier slack, fitted to the terminal.

    Columns that do not fit are named in the footer (--wide shows all); the last line of the
    ranks that matter (failing, warned about, the slowest) goes under the table.

    From the running supervisor's status.json when one is alive, else derived live from the
    nodes (the table's title says which)."""
    picked = pick_run(store_for(inventory), run)
    table = not json_out and output is StatusFormat.table
    early = not_started(picked)
    if early is not None and (json_out or output is StatusFormat.json):
        # A script polling a boot in its twin or preflight step gets a document, not an error.
        print_json(preparing_view(picked, early).model_dump(mode="json"))
        return
    if table and early is not None:
        if not watch:
            console.print(early, markup=False)
            return
        with Live(Text(early), console=console, refresh_per_second=4) as live:
            try:
                while (early := not_started(picked)) is not None:
                    live.update(Text(early, no_wrap=True, overflow="ellipsis"))
                    time.sleep(min(interval, 1.0))
            except KeyboardInterrupt:
                return
    ctx = load_context(picked)
    if output is StatusFormat.prometheus:
        from orchestrator.supervisor.metrics import run_metrics

        sys.stdout.write(run_metrics(ctx.run, asyncio.run(current_view(ctx))))
        return
    if json_out or output is StatusFormat.json:
        print_json(asyncio.run(current_view(ctx)).model_dump(mode="json"))
        return
    if not watch:
        console.print(BootTable(asyncio.run(current_view(ctx)), wide=wide), soft_wrap=wide)
        if wide:
            for text in image_lines(ctx.manifest.images):
                console.print(plain(text), soft_wrap=True)
        return
    if not live_terminal():  # a pipe, a file, TERM=dumb: the boot's plain progress lines
        progress = PlainProgress()
        try:
            while True:
                if (line := progress.due(asyncio.run(current_view(ctx)))) is not None:
                    console.print(line, markup=False, highlight=False, soft_wrap=True)
                time.sleep(interval)
        except KeyboardInterrupt:
            return
    # Laid out again at every refresh (4 a second), so a resized terminal gets its own layout
    # within a quarter second, between two asks of the nodes.
    with Live(console=console, refresh_per_second=4, screen=False) as live:
        try:
            while True:
                live.update(BootTable(asyncio.run(current_view(ctx)), wide=wide))
                time.sleep(interval)
        except KeyboardInterrupt:
            return


def image_lines(images: Sequence[RankImage]) -> list[str]:
    """`status --wide`: which image each rank ran (image Id and config digest per node, from
    the push; ranks that agree share a line)."""
    if not images:
        return ["image: not recorded (the boot pushed no image: --no-push or the built-in cluster)"]
    groups: dict[tuple[str | None, str | None], list[int]] = {}
    for im in images:
        groups.setdefault((im.image_id, im.config_digest), []).append(im.rank)
    return [
        f"image: ranks {rank_list(ranks)}: id {image_id or '?'}, "
        f"config {config or 'hidden by its store'}"
        for (image_id, config), ranks in groups.items()
    ]


def not_started(run: Run) -> str | None:
    """A run still before its ranks (the twin's weights, preflight): a line saying what it is
    doing. None once it has ranks, or once it has ended without them (`load_context` says so)."""
    if run.verdict_path.exists() or run.has_launch_plan():
        return None
    steps = [e for e in run.events() if isinstance(e, Step)]
    doing = f"{steps[-1].step} {steps[-1].detail}" if steps else "starting"
    return f"run {run.id}: no ranks yet; {doing.strip()}…"


def preparing_view(run: Run, doing: str) -> BootView:
    """The --json document of a run before its ranks: booting, no rows, what it is doing."""
    recipe = ""
    if run.manifest_path.exists():
        recipe = run.manifest().recipe.name
    return BootView(
        run_id=run.id,
        recipe=recipe,
        source="live",
        updated=time.time(),
        phase=RunPhase.booting,
        phase_detail=doing.removeprefix(f"run {run.id}: "),
        ranks=(),
    )


def supervise(
    run: Annotated[
        str, typer.Argument(help="run id or run directory", autocompletion=complete_run)
    ],
    inventory: InventoryOpt = None,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch/--no-watch",
            help="a run still booting: after READY, carry on as its serving watch (a serving "
            "run is always watched)",
        ),
    ] = False,
    systemd_unit: Annotated[
        bool,
        typer.Option(
            "--systemd-unit",
            help="print a systemd user unit that keeps RUN's serving watch alive across "
            "controller reboots (docs/operating.md), and exit",
        ),
    ] = False,
) -> None:
    """Supervise a run again after its controller died: resume every rank's log where the
    preserved copy ends, and carry on to READY or a verdict; a serving run (READY) is watched
    until an incident or `cluster stop` (the serving watch, docs/operating.md)."""
    r = pick_run(store_for(inventory), run)
    if systemd_unit:
        from orchestrator.run.watch import systemd_unit as unit_text

        print(unit_text(r, inventory), end="")
        return
    current = r.verdict()
    if current is None or not current.outcome.serving:
        # Imported here: `cluster status` shares this module and should not pay for the boot.
        from orchestrator.cli.boot_screen import LiveUI, print_outcome
        from orchestrator.run.boot import BootOptions, resume

        ui = LiveUI(None)
        result = asyncio.run(resume(r, options=BootOptions(), ui=ui))
        result.last_view = ui.last
        print_outcome(result)
        if not result.ok:
            outcome = result.verdict.outcome or Outcome.RANK_EXITED
            err = BootFailed(f"{outcome.value}: {result.verdict.message}", where=f"run {r.id}")
            err.exit_code = outcome.exit_code
            raise err
        if not watch:
            return
    watch_serving(r)


def watch_serving(r: Run) -> None:
    """The serving watch in this process, until an incident (its exit code) or a stop."""
    from orchestrator.run.watch import install_halt, watch_run

    async def main() -> Finding | None:
        halt = asyncio.Event()
        install_halt(halt)
        return await watch_run(r, halt=halt)

    print(f"run {r.id}: serving watch (pid {os.getpid()}); `cluster status --run {r.id}`")
    incident = asyncio.run(main())
    if incident is None:
        print(f"run {r.id}: serving watch ended (stopped)")
        return
    outcome = incident.outcome or Outcome.RANK_DIED
    err = BootFailed(
        f"{outcome.value}: {incident.message}",
        where=f"run {r.id}",
        hint=f"`cluster postmortem {r.id}` for the diagnosis",
        run_dir=str(r.dir),
    )
    err.exit_code = outcome.exit_code
    raise err


def stop(inventory: InventoryOpt = None, run: RunOpt = None, yes: YesOpt = False) -> None:
    """Save every rank's complete log and inspect output into the run directory, then stop and
    remove that run's containers (only those: matched by the run's labels)."""
    from orchestrator.run.stop import end_controller, record_stopped, stop_run

    r = pick_run(store_for(inventory), run)
    if not r.has_launch_plan():  # still in preflight or its twin: no ranks to save or remove
        if not yes and not typer.confirm(f"stop run {r.id} (no ranks started yet)?"):
            raise typer.Abort()
        late = asyncio.run(end_controller(r))
        record_stopped(r, "before its ranks were started")
        console.print(plain(late or f"run {r.id}: stopped before any rank started"))
        return
    ctx = load_context(r)
    names = ", ".join(f"{s.name}@{s.node.name}" for s in ctx.specs)
    if not yes and not typer.confirm(f"stop and remove run {r.id}'s ranks ({names})?"):
        raise typer.Abort()
    if (late := asyncio.run(end_controller(r))) is not None:
        err_console.print(plain(f"warning: {late}"), soft_wrap=True)
    report = asyncio.run(stop_run(ctx))
    gone = f"; {len(report.gone)} already gone" if report.gone else ""
    # The built-in simulated cluster runs its ranks as local processes, not containers.
    ended = (
        f"stopped {plural(len(report.removed), 'process')}"
        if ctx.simulated
        else f"removed {plural(len(report.removed), 'container')}"
    )
    console.print(
        plain(
            f"run {r.id}: saved logs of {plural(len(report.saved), 'rank')} into {r.dir}; "
            f"{ended}{gone}"
        ),
        soft_wrap=True,
    )
    for p in report.problems:
        err_console.print(styled("red", "", p), soft_wrap=True)
    if report.problems:
        # A node that could not be asked is exit 3 (docs/exit-codes.md), as for every command.
        raise UnhealthyCluster(
            f"{len(report.problems)} rank(s) not stopped cleanly",
            where=f"run {r.id}",
            hint="what could not be saved was not removed; run `cluster stop` again",
        )


_AGE = re.compile(r"^(\d+)([smhd])$")


def parse_age(text: str) -> timedelta:
    m = _AGE.match(text.strip())
    if not m:
        raise ConfigError(f"--older-than {text!r}: expected e.g. 30m, 12h, 7d")
    n, unit = int(m.group(1)), m.group(2)
    try:
        return timedelta(**{{"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[unit]: n})
    except OverflowError:
        raise ConfigError(
            f"--older-than {text}: more than {timedelta.max.days:,} days, the longest age there is"
        ) from None


def prune_cmd(
    inventory: InventoryOpt = None,
    older_than: Annotated[str, typer.Option("--older-than", help="e.g. 12h, 7d")] = "0s",
    include_serving: Annotated[
        bool, typer.Option("--include-serving", help="also runs that are READY or supervised")
    ] = False,
    yes: YesOpt = False,
) -> None:
    """Remove containers earlier runs left behind (a failed boot keeps them as evidence),
    after saving their logs and inspect output into their runs."""
    inv = open_inventory(inventory)
    store = RunStore(inv.runs_dir)
    from orchestrator.run.stop import find_leftovers, prune

    problems: list[str] = []
    leftovers = asyncio.run(find_leftovers(inv, parse_age(older_than), problems=problems))
    for p in problems:
        err_console.print(styled("red", "", p), soft_wrap=True)
    if not include_serving:
        # Never a boot that is serving or still supervised: that is `cluster stop`'s job.
        busy = {x.run_id for x in leftovers if _serving_or_supervised(store, x.run_id)}
        for run_id in sorted(busy):
            err_console.print(
                f"skipping run {run_id}: serving (READY) or supervised now — "
                f"`cluster stop --run {run_id}` ends it, or pass --include-serving"
            )
        leftovers = [x for x in leftovers if x.run_id not in busy]
    if not leftovers:
        if problems:  # "nothing to prune" would be a guess about the nodes we could not ask
            raise _prune_incomplete(problems)
        console.print("nothing to prune")
        return
    for item in leftovers:
        console.print(
            plain(
                f"{item.node}: {item.container} (run {item.run_id}, rank {item.rank}, {item.state})"
            ),
            soft_wrap=True,
        )
    if not yes and not typer.confirm(f"save logs and remove these {len(leftovers)} containers?"):
        raise typer.Abort()
    for line in asyncio.run(prune(inv, leftovers, store)):
        console.print(plain(line), soft_wrap=True)
    if problems:
        raise _prune_incomplete(problems)


def _prune_incomplete(problems: list[str]) -> UnhealthyCluster:
    return UnhealthyCluster(
        f"{len(problems)} node(s) or container(s) not pruned (listed above)",
        hint="what was found elsewhere was pruned; run `cluster prune` again once they answer",
    )


def _serving_or_supervised(store: RunStore, run_id: str) -> bool:
    run_dir = store.root / run_id
    if not run_dir.is_dir():
        return False
    run = store.open(run_id)
    verdict = run.verdict()
    return (verdict is not None and verdict.outcome.serving) or run.supervisor_alive()
