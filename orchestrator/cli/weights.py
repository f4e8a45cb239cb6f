"""`cluster weights push | status`: stage a model's weights on every node's own disk; say what
every node holds."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from orchestrator.cli.complete import complete_recipe
from orchestrator.cli.inventory import open_inventory
from orchestrator.cli.options import ConnectOpt, InventoryOpt, JsonOpt, StallOpt
from orchestrator.cli.output import console, err_console, plain, print_json
from orchestrator.cli.transfer import TransferDisplay
from orchestrator.deadlines import DEADLINES
from orchestrator.errors import ConfigError, UnhealthyCluster
from orchestrator.models.inventory import Inventory
from orchestrator.models.recipe import flag_value
from orchestrator.preflight.model import PreflightLimits
from orchestrator.recipes import resolve_recipe
from orchestrator.transport import ConnectOptions
from orchestrator.weights.model import (
    GIB,
    Holding,
    NodeAction,
    WeightsEvent,
    WeightsOptions,
    WeightsReport,
)
from orchestrator.weights.push import push_weights, resolve_dest, weights_root
from orchestrator.weights.status import decide_warm, engine_claim, warm_nodes, weights_status

app = typer.Typer(
    help="Stage a model's weights on every node's own disk, verified, node to node.",
    no_args_is_help=True,
)

DestOpt = Annotated[
    str | None,
    typer.Option(
        "--dest",
        help="the directory on every node (default: the recipe's model.host_dir, else "
        "cluster_weights_root/<model>)",
    ),
]
RecipeOpt = Annotated[
    str | None,
    typer.Option(
        "--recipe",
        "-r",
        help="recipe name or file: its model.host_dir and flags",
        autocompletion=complete_recipe,
    ),
]


class PushDisplay(TransferDisplay):
    """Per node: bytes received of what it lacks, rate and ETA; then its state."""

    def __call__(self, ev: WeightsEvent) -> None:
        p = self.progress
        if ev.kind == "plan" and ev.needs is not None:
            p.console.print(
                f"to {ev.text}: {len(ev.needs)} nodes lack files"
                + "".join(f"\n  {n}: {b / GIB:.2f} GiB" for n, b in ev.needs.items()),
                soft_wrap=True,
            )
        elif ev.kind == "round":
            p.console.print(plain(f"round {ev.round}: {ev.text}"), soft_wrap=True)
            needs = ev.needs or {}
            # the source sends the round's bytes once; every node of the chain receives them
            for name, total in {"sent": max(needs.values(), default=0), **needs}.items():
                p.reset(self.task(name, total), total=total, state="")
        elif ev.kind == "progress" and ev.node and ev.bytes is not None:
            task = self.task(ev.node)
            p.update(task, completed=ev.bytes)
        elif ev.kind == "source" and ev.bytes is not None:
            p.update(self.task("sent"), completed=ev.bytes)
        elif ev.kind == "done" and ev.node:
            state = "[green]verified[/]" if ev.ok else "[red]failed[/]"
            p.update(self.task(ev.node), state=state)
        elif ev.kind == "note":
            p.console.print(plain(f"  {ev.text}"), soft_wrap=True)


def render_push(report: WeightsReport) -> Table:
    table = Table(
        title=f"weights {report.model} -> {report.dest} ({report.manifest_id[7:19]})",
        title_justify="left",
    )
    for col in ("rank", "node", "action", "files sent", "MiB", "s", "sends", "from", "error"):
        table.add_column(col, overflow="fold")
    for n in report.nodes:
        action = {
            NodeAction.skipped: "skipped (holds it)",
            NodeAction.sent: "[green]sent, verified[/]",
            NodeAction.failed: "[red]failed[/]",
        }[n.action]
        table.add_row(
            str(n.rank),
            n.node,
            action,
            str(n.files_sent),
            f"{(n.received_bytes or 0) / 2**20:.1f}",
            "-" if n.seconds is None else f"{n.seconds:.1f}",
            str(n.sends),
            n.sent_from or "-",
            n.error or "",
        )
    return table


def _dest(
    inv: Inventory, model_name: str, dest: str | None, recipe: str | None
) -> tuple[str, tuple[str, ...]]:
    """The destination and the recipe's engine flags."""
    if recipe is None:
        return resolve_dest(inv, model_name, dest, None), ()
    r = resolve_recipe(recipe)
    return resolve_dest(inv, model_name, dest, r.model.host_dir), tuple(r.args)


@app.command("push")
def push(
    model_dir: Annotated[Path, typer.Argument(help="the model's directory (or a hub snapshot)")],
    inventory: InventoryOpt = None,
    dest: DestOpt = None,
    recipe: RecipeOpt = None,
    json_out: JsonOpt = False,
    verify: Annotated[
        bool, typer.Option("--verify", help="re-hash every node's copy before deciding")
    ] = False,
    no_check: Annotated[
        bool, typer.Option("--no-check", help="skip the safetensors/config/tokenizer checks")
    ] = False,
    headroom_gib: Annotated[
        float, typer.Option("--headroom-gib", help="free space kept beyond what is written")
    ] = 1.0,
    connect_timeout: ConnectOpt = DEADLINES.connect_s,
    stall_timeout: StallOpt = 15.0,
) -> None:
    """Copy MODEL_DIR to every node's own disk: one read of the source, node to node; only
    what a node lacks (by sha256) is sent; every file verified before it takes its name."""
    inv = open_inventory(inventory, quiet=json_out)
    target, flags = _dest(inv, model_dir.name, dest, recipe) if dest or recipe else (None, ())
    options = WeightsOptions(
        connect=ConnectOptions(connect_timeout_s=connect_timeout),
        stall_timeout_s=stall_timeout,
        headroom_bytes=int(headroom_gib * GIB),
        verify=verify,
        engine_args=flags,
        check_model=not no_check,
    )
    if json_out:
        report = asyncio.run(push_weights(inv, model_dir, dest=target, options=options))
        print_json(report.to_json())
    else:
        with PushDisplay() as display:
            report = asyncio.run(
                push_weights(inv, model_dir, dest=target, options=options, on_event=display)
            )
        console.print(render_push(report))
        hub = f", {report.sums_from_hub} sums from the hub cache" if report.sums_from_hub else ""
        err_console.print(
            f"{report.files} files, {report.total_bytes / GIB:.2f} GiB{hub}; "
            f"{len(report.rounds)} rounds; {report.seconds:.1f} s",
            soft_wrap=True,
        )
    report.raise_for_failures()


def render_status(rows: list[Holding], warm: dict[str, str]) -> Table:
    table = Table(title="weights status", title_justify="left")
    for col in ("rank", "node", "manifest", "state", "GiB", "page cache", "extra", "note"):
        table.add_column(col, overflow="fold")
    for h in rows:
        total = h.total_bytes or 0
        cache = (
            "-"
            if h.cached_bytes is None or not total
            else f"{h.cached_bytes / GIB:.1f} GiB ({100 * h.cached_bytes / total:.0f}%)"
        )
        state = h.state
        if state != "complete":
            bad = [f"{p} {s}" for p, s in h.files.items() if s != "held"][:3]
            state = f"[red]{state}[/]" + (f": {', '.join(bad)}" if bad else "")
        table.add_row(
            str(h.rank),
            h.node,
            (h.manifest_id or "-")[7:19] or "-",
            state if h.reachable else f"[red]{h.error}[/]",
            f"{total / GIB:.2f}",
            cache,
            str(len(h.extra)),
            warm.get(h.node, ""),
        )
    return table


@app.command("status")
def status(
    model: Annotated[
        str | None,
        typer.Argument(help="the model's directory name under cluster_weights_root, or a path"),
    ] = None,
    inventory: InventoryOpt = None,
    dest: DestOpt = None,
    recipe: RecipeOpt = None,
    json_out: JsonOpt = False,
    verify: Annotated[
        bool, typer.Option("--verify", help="re-hash every file on every node (slow)")
    ] = False,
    warm: Annotated[
        bool,
        typer.Option(
            "--warm",
            help="read the copy once on each node whose MemAvailable, less what is not cached "
            "yet, still covers the engine's claim",
        ),
    ] = False,
    claim_gib: Annotated[
        float | None,
        typer.Option("--claim-gib", help="the engine's memory claim per node (for --warm)"),
    ] = None,
    connect_timeout: ConnectOpt = DEADLINES.connect_s,
) -> None:
    """Per node: the manifest it holds, complete or not, how much is in the page cache."""
    inv = open_inventory(inventory, quiet=json_out)
    if model is None and dest is None and recipe is None:
        raise ConfigError("name the model (or --dest / --recipe)", hint="e.g. org/name")
    if model is not None and model.startswith("/"):
        dest = dest or model
    target, _ = _dest(inv, model or "-", dest, recipe)
    rows = asyncio.run(
        weights_status(inv, target, cache=True, verify=verify, connect_timeout_s=connect_timeout)
    )
    notes: dict[str, str] = {}
    if warm:
        r = resolve_recipe(recipe) if recipe else None
        util = flag_value(r.args, "--gpu-memory-utilization") if r else None
        explicit = int(claim_gib * GIB) if claim_gib is not None else None
        decisions = []
        for h in rows:
            claim = engine_claim(
                h.mem.get("MemTotal"),
                float(util) if util else None,
                r.model.expected_bytes_per_rank if r else None,
                PreflightLimits().mem_headroom,
                explicit,
            )
            if claim is None:
                raise ConfigError("--warm needs the engine's claim: --recipe R or --claim-gib N")
            decisions.append(decide_warm(h, claim))
        notes = {d.node: d.reason for d in decisions}
        todo = [d.node for d in decisions if d.warm]
        if todo:
            done = asyncio.run(warm_nodes(inv, target, todo, connect_timeout_s=connect_timeout))
            for name, what in done.items():
                notes[name] += f"; {what}"
    if json_out:
        print_json(
            {
                "dest": target,
                "root": weights_root(inv),
                "nodes": [{**h.model_dump(mode="json"), "state": h.state} for h in rows],
                "warm": notes,
            }
        )
    else:
        console.print(render_status(rows, notes))
    bad = [h for h in rows if h.state != "complete"]
    if bad:
        raise UnhealthyCluster(
            f"{len(bad)} of {len(rows)} nodes do not hold a complete copy at {target}",
            hint=f"`cluster weights push MODEL_DIR --dest {target}` sends only what is missing",
            more=tuple(f"{h.node}: {_why(h)}" for h in bad),
        )


def _why(h: Holding) -> str:
    if not h.reachable:
        return h.error or "unreachable"
    off = [f"{p} {s}" for p, s in h.files.items() if s != "held"]
    if h.manifest_id is None:
        return "no manifest there (never pushed, or a push that did not finish)"
    return (
        f"{h.state}: " + ", ".join(off[:5]) + (f" (+{len(off) - 5} more)" if len(off) > 5 else "")
    )
