"""`cluster nccl-check RECIPE [-i INV]`: the ranks meet and all-reduce, for real, in a minute.

One short-lived container per rank with the boot's image, env, network and rendezvous; exit 0
when every rank joined and summed right, 4 (`PreflightRefused`) naming the rank that could not
join, with its last log lines. `--image`, `--python` and `--volume` exist for images without
torch (the testbed runs the host's Python, bind-mounted read-only, in a busybox image).
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.table import Table

from orchestrator.cli.inventory import open_inventory
from orchestrator.cli.options import InventoryOpt, JsonOpt, RecipeArg
from orchestrator.cli.output import console, err_console, print_json, styled
from orchestrator.cli.preflight import RunOpt, open_run
from orchestrator.errors import ConfigError, PreflightRefused
from orchestrator.nccl_check import Backend, NcclCheckOptions, NcclCheckReport, run_nccl_check
from orchestrator.recipes import resolve_recipe
from orchestrator.transport import ConnectOptions


def _size(n: int) -> str:
    for unit, div in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            return f"{n / div:g} {unit}"
    return f"{n} B"


def render_report(report: NcclCheckReport) -> Table:
    table = Table(
        title=f"nccl-check {report.recipe}: {len(report.ranks)} ranks meet at "
        f"{report.head_addr}:{report.head_port} ({report.backend}), {report.elapsed_s:.1f} s",
        title_justify="left",
    )
    for col in ("rank", "node", "fabric", "joined", "sum", "transport", "bus bandwidth", "time"):
        table.add_column(col, overflow="fold")
    for r in report.ranks:
        log = r.log
        joined = "[green]yes[/]" if log.joined else f"[red]no[/] ({log.error_stage or log.stage})"
        if not r.started:
            joined = "[red]not started[/]"
        total = "-" if log.sum is None else f"{log.sum:g}"
        if log.sum_ok is not None:
            total += " [green]ok[/]" if log.sum_ok else f" [red]want {log.expected:g}[/]"
        bw = ", ".join(f"{_size(s.bytes)} {s.busbw_gbps:.3g} GB/s" for s in log.bandwidth) or "-"
        table.add_row(
            str(r.rank),
            r.node,
            f"{r.iface} {r.address or '?'}",
            joined,
            total,
            log.transport or "-",
            bw,
            "-" if log.elapsed_s is None else f"{log.elapsed_s:.1f} s",
        )
    return table


def nccl_check(
    recipe: RecipeArg,
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
    run: RunOpt = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="torch.distributed timeout in each rank (s)")
    ] = 120.0,
    startup: Annotated[
        float, typer.Option("--startup", help="extra seconds for docker run and import torch")
    ] = 120.0,
    backend: Annotated[
        str, typer.Option("--backend", help="auto (NCCL with a GPU, else Gloo), nccl or gloo")
    ] = "auto",
    sizes: Annotated[
        str | None, typer.Option("--sizes", help="bytes per all-reduce, comma-separated")
    ] = None,
    iters: Annotated[int, typer.Option("--iters", help="timed all-reduces per size")] = 5,
    image: Annotated[
        str | None, typer.Option("--image", help="run this image instead of the recipe's")
    ] = None,
    python: Annotated[
        str, typer.Option("--python", help="the Python interpreter inside the container")
    ] = "python3",
    volume: Annotated[
        list[str] | None,
        typer.Option("--volume", help="an extra bind mount for the check containers (repeat)"),
    ] = None,
    keep: Annotated[bool, typer.Option("--keep", help="keep the containers afterwards")] = False,
) -> None:
    """Run a tiny torch.distributed all-reduce across every rank, exactly as the boot would meet."""
    if backend not in ("auto", "nccl", "gloo"):
        raise ConfigError(f"--backend {backend!r}: use auto, nccl or gloo")
    try:
        size_list = tuple(int(s) for s in (sizes or "").split(",") if s.strip())
    except ValueError as exc:
        raise ConfigError(f"--sizes {sizes!r}: comma-separated byte counts") from exc
    chosen: Backend = "nccl" if backend == "nccl" else "gloo" if backend == "gloo" else "auto"
    rec = resolve_recipe(recipe)
    inv = open_inventory(inventory, quiet=json_out)
    options = NcclCheckOptions(
        timeout_s=timeout,
        startup_s=startup,
        backend=chosen,
        sizes=size_list,
        iters=iters,
        image=image,
        python=python,
        volumes=tuple(volume or ()),
        keep=keep,
    )
    report = asyncio.run(
        run_nccl_check(rec, inv, ConnectOptions(), options, run=open_run(run, inv.runs_dir))
    )
    if json_out:
        print_json(report.to_json())
    else:
        console.print(render_report(report))
    if report.ok:
        return
    culprits = report.culprits()
    if not json_out:
        for r in culprits:
            why = r.start_error or r.log.error or f"exit {r.exit_code}"
            err_console.print(styled("red", f"rank {r.rank} {r.node}: ", why), soft_wrap=True)
            for line in r.last_lines[-8:]:
                err_console.print(f"    {line}", markup=False, soft_wrap=True)
    named = ", ".join(f"rank {r.rank} ({r.node})" for r in culprits)
    raise PreflightRefused(
        f"nccl-check failed: {named} could not join the all-reduce",
        where=str(inv.path),
        hint="`cluster preflight` checks the fabric, ports and reachability of every node",
    )
