"""`cluster preflight RECIPE [-i INV] [--json]`: every reason the boot would fail, found in seconds.

Exit 0 when no check found an error (warnings are printed), 4 (`PreflightRefused`) otherwise.
With `--run RUN`, the report, the facts and both plans are written into that run directory.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from orchestrator.cli.inventory import open_inventory
from orchestrator.cli.options import ConnectOpt, InventoryOpt, JsonOpt, RecipeArg
from orchestrator.cli.output import console, err_console, print_json
from orchestrator.errors import PreflightRefused
from orchestrator.preflight import PreflightLimits, PreflightResult, Severity, run_preflight
from orchestrator.recipes import find_recipe, resolve_recipe
from orchestrator.runstore import Run, RunStore
from orchestrator.transport import ConnectOptions

RunOpt = Annotated[
    str | None,
    typer.Option(
        "--run", help="an existing run (id or path): write preflight.json and the plans there"
    ),
]


def open_run(ref: str | None, runs_dir: Path | None) -> Run | None:
    """The run named by `--run` (an id under the inventory's runs dir, or a path), if any."""
    return None if ref is None else RunStore(runs_dir).open(ref)


def render_result(result: PreflightResult) -> list[Table | str]:
    """The report for people: the ranks and where they meet, then every problem (three lines
    each: what, evidence, fix) and a count."""
    report, plan = result.report, result.rendezvous
    out: list[Table | str] = []
    ranks = Table(
        title=f"preflight {report.recipe}: {report.nodes} nodes, rendezvous "
        f"{plan.head_addr or '?'}:{plan.head_port} on {plan.head} ({plan.head_iface})",
        title_justify="left",
    )
    for col in ("rank", "node", "fabric", "NCCL_IB_HCA", "GID", "tcp to head"):
        ranks.add_column(col, overflow="fold")
    reach = report.reachability
    for r in plan.ranks:
        tcp = "-"
        if reach is not None:
            got = reach.results.get(r.node)
            if got is not None:
                tcp = f"[green]ok[/] {got.elapsed_ms} ms" if got.ok else f"[red]{got.outcome}[/]"
            elif r.node in reach.errors:
                tcp = "[red]untested[/]"
        ranks.add_row(
            str(r.rank),
            r.node,
            f"{r.iface} {r.address or '[red]no address[/]'}",
            r.env.get("NCCL_IB_HCA", "[dim]unset (no RDMA)[/]"),
            r.env.get("NCCL_IB_GID_INDEX", "-"),
            tcp,
        )
    out.append(ranks)
    skipped = [
        f"[yellow]not checked[/]: {n.check} because {escape(n.because)}" for n in report.not_checked
    ]
    if not report.problems:
        out.append(f"[green]ok[/]: {len(report.checks)} checks passed ({', '.join(report.checks)})")
        return [*out, *skipped]
    for p in report.problems:
        mark = "[bold red]error[/]  " if p.severity is Severity.error else "[yellow]warning[/]"
        where = "cluster" if p.node is None else f"rank {p.rank} {p.node}"
        out.append(f"{mark} {where}: {escape(p.what)} [dim]({p.check})[/]")
        out.append(f"         [dim]evidence:[/] {escape(p.evidence)}")
        out.append(f"         [dim]fix:[/] {escape(p.fix)}")
    out.extend(skipped)
    out.append(
        f"{len(report.errors)} error(s), {len(report.warnings)} warning(s) in "
        f"{report.elapsed_s or 0:.1f} s"
        + (f"; {len(skipped)} check(s) not run (listed above)" if skipped else "")
    )
    return out


def preflight(
    recipe: RecipeArg,
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
    run: RunOpt = None,
    connect_timeout: ConnectOpt = ConnectOptions.connect_timeout_s,
    tcp_timeout: Annotated[
        float,
        typer.Option("--tcp-timeout", help="seconds per connect to the head's rendezvous port"),
    ] = PreflightLimits.tcp_timeout_s,
) -> None:
    """Check every node against the recipe before any weight is read; exit 4 on errors."""
    rec = resolve_recipe(recipe)
    inv = open_inventory(inventory, quiet=json_out)
    target = open_run(run, inv.runs_dir)
    result = asyncio.run(
        run_preflight(
            rec,
            inv,
            ConnectOptions(connect_timeout_s=connect_timeout),
            run=target,
            limits=PreflightLimits(tcp_timeout_s=tcp_timeout),
            recipe_path=find_recipe(recipe),
        )
    )
    report = result.report
    if json_out:
        print_json(report.to_json())
    else:
        for item in render_result(result):
            (console if isinstance(item, Table) else err_console).print(item, soft_wrap=True)
    if not report.ok:
        first = report.errors[0]
        raise PreflightRefused(
            f"{len(report.errors)} error(s): the boot of {rec.name} would fail "
            f"(first: {first.node or 'cluster'}: {first.what})",
            where=str(inv.path),
            hint="fix the problems listed above and run `cluster preflight` again",
        )
