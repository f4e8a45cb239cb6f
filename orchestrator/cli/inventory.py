"""`cluster inventory check | show`: what the inventory says, and what the nodes say back."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from orchestrator.cli.options import AcceptKeysOpt, ConnectOpt, InventoryOpt, JsonOpt
from orchestrator.cli.output import (
    RICH_TABLE_MAX_ROWS,
    console,
    err_console,
    harmless,
    plain,
    print_columns,
    print_json,
    styled,
)
from orchestrator.errors import UnhealthyCluster
from orchestrator.inventory import load_inventory, resolve_inventory_path
from orchestrator.models.inventory import Inventory
from orchestrator.transport import ConnectOptions
from orchestrator.transport.base import DEFAULT_FANOUT, MAX_FANOUT

if TYPE_CHECKING:
    from orchestrator.check import CheckReport, NodeCheck

app = typer.Typer(help="Read and check the inventory of nodes.", no_args_is_help=True)

FanoutOpt = Annotated[
    int,
    typer.Option(
        "--fanout",
        help=f"nodes asked at once (1-{MAX_FANOUT}); the rest wait their turn",
    ),
]


def open_inventory(path: str | None, *, quiet: bool = False) -> Inventory:
    """Resolve and load the inventory, saying in one line which one was chosen."""
    resolved, note = resolve_inventory_path(path)
    if not quiet:
        err_console.print(styled("dim", "", note), soft_wrap=True)
    return load_inventory(resolved)


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.1f}"


def _fabric(row: NodeCheck) -> str:
    f = row.fabric
    if f is None:
        return "-"
    if not f.present:
        return f"{f.iface}: missing"
    addr = ",".join(f.addresses) or "no address"
    return f"{f.iface} {addr} mtu {f.mtu} {f.state}"


def render_check(report: CheckReport) -> Table:
    """One row per node; columns fold rather than truncate, so a narrow terminal loses nothing."""
    table = Table(title=plain(f"inventory check: {report.inventory}"), title_justify="left")
    local = report.connection == "local"
    for col in ("rank", "node", "status", "host", "mem GiB free/avail/total", "docker", "GPU"):
        table.add_column(col, overflow="fold")
    table.add_column("fabric", overflow="fold")
    for row in report.nodes:
        status = (
            Text("ok", style="green")
            if row.healthy
            else styled("red", "", row.reason or "unhealthy")
        )
        host = " ".join(x for x in (row.hostname, row.arch, row.kernel) if x) or "-"
        mem = (
            f"{_gib(row.mem_free)} / {_gib(row.mem_available)} / {_gib(row.mem_total)}"
            if row.mem_total
            else "-"
        )
        table.add_row(
            str(row.rank),
            plain(f"{row.node} {row.address}"),
            status,
            plain(host),
            mem,
            plain(row.docker_server or ("n/a (processes)" if row.reachable and local else "-")),
            plain(row.gpu or "-"),
            plain(_fabric(row)),
        )
    return table


@app.command("check")
def check(
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
    accept_new_host_keys: AcceptKeysOpt = False,
    connect_timeout: ConnectOpt = ConnectOptions.connect_timeout_s,
    fanout: FanoutOpt = DEFAULT_FANOUT,
) -> None:
    """Connect to every node in parallel; a row per node. Exit 0 only when all are healthy."""
    options = ConnectOptions(
        connect_timeout_s=connect_timeout,
        accept_new_host_keys=accept_new_host_keys,
        fanout=fanout,
    )
    inv = open_inventory(inventory, quiet=json_out)
    if len(inv.nodes) > fanout and not json_out:
        err_console.print(
            styled("dim", "", f"asking {len(inv.nodes)} nodes, {fanout} at a time (--fanout)"),
            soft_wrap=True,
        )
    from orchestrator.check import check_inventory  # its probes: only this command needs them

    report = asyncio.run(check_inventory(inv, options))
    if json_out:
        print_json(report.to_json())
    else:
        console.print(render_check(report))
        for row in report.nodes:
            for problem in row.problems:
                err_console.print(
                    Text.assemble(
                        (harmless(f"rank {row.rank} {row.node}: "), "red"), harmless(problem)
                    ),
                    soft_wrap=True,
                )
    if not report.healthy:
        bad = [f"{r.node} ({r.reason or 'unhealthy'})" for r in report.nodes if not r.healthy]
        named = ", ".join(bad[:10]) + (f" and {len(bad) - 10} more" if len(bad) > 10 else "")
        raise UnhealthyCluster(
            f"{len(bad)} of {len(report.nodes)} nodes unhealthy: {named}",
            where=str(inv.path),
            hint="fix the nodes named above and run the check again",
        )


def inventory_view(inv: Inventory) -> dict[str, Any]:
    """The resolved inventory: per host, the merged variables as Ansible would see them."""
    return {
        "inventory": str(inv.path),
        "sha256": inv.sha256,
        "name": inv.name,
        "connection": inv.connection.value,
        "known_hosts": str(inv.known_hosts) if inv.known_hosts else None,
        "runs_dir": str(inv.runs_dir) if inv.runs_dir else None,
        "nodes": [n.model_dump(mode="json") for n in inv.nodes],
    }


@app.command("show")
def show(inventory: InventoryOpt = None, json_out: JsonOpt = False) -> None:
    """Print the validated inventory: nodes by rank with their resolved variables."""
    inv = open_inventory(inventory, quiet=json_out)
    if json_out:
        print_json(inventory_view(inv))
        return
    title = f"{inv.name} ({inv.connection.value}): {inv.path}"
    headers = ("rank", "node", "address", "user", "fabric", "mgmt", "ib_hca", "docker_host")
    rows = [
        (
            str(n.rank),
            n.name,
            f"{n.address}:{n.port}",
            n.user,
            n.fabric_iface,
            n.mgmt_iface or "-",
            ",".join(n.ib_hca) or "-",
            n.docker_host or "-",
        )
        for n in inv.nodes
    ]
    if len(rows) > RICH_TABLE_MAX_ROWS:
        print_columns(title, headers, rows)
        return
    table = Table(title=plain(title), title_justify="left")
    for col in headers:
        table.add_column(col)
    for row in rows:
        table.add_row(*(plain(c) for c in row))
    console.print(table)
