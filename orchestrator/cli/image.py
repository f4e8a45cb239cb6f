"""`cluster image push | probe`: put an image on every node; prove every node can run it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import TaskID
from rich.table import Table

from orchestrator.cli.inventory import open_inventory
from orchestrator.cli.options import ConnectOpt, InventoryOpt, JsonOpt, StallOpt
from orchestrator.cli.output import console, err_console, plain, print_json, styled
from orchestrator.cli.transfer import TransferDisplay
from orchestrator.deadlines import DEADLINES
from orchestrator.errors import ConfigError
from orchestrator.images import (
    ImageStatusReport,
    NodeAction,
    ProbeReport,
    PushEvent,
    PushOptions,
    PushReport,
    Source,
    SourceKind,
    image_status,
    probe_image,
    push_image,
)
from orchestrator.probes.exec_ready import DEFAULT_WINDOW_S, ExecReadiness
from orchestrator.transport import ConnectOptions

app = typer.Typer(
    help="Distribute the serving image to every node and probe that each can run it.",
    no_args_is_help=True,
)


class CompressChoice(StrEnum):
    auto = "auto"
    zstd = "zstd"
    none = "none"


class ModeChoice(StrEnum):
    auto = "auto"
    chain = "chain"
    fanout = "fanout"


ImageArg = Annotated[str, typer.Argument(help="image reference, e.g. lmsysorg/sglang:<tag>")]
ReadyOpt = Annotated[
    float,
    typer.Option(
        "--ready-timeout",
        help="seconds to retry the exec-readiness probe while it fails like a lazy unpack",
    ),
]
DigestOpt = Annotated[
    str | None,
    typer.Option("--digest", help="expected digest sha256:<64 hex> (config or manifest)"),
]


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


class PushDisplay(TransferDisplay):
    """Per node: bytes received, rate and ETA while the stream flows; then its state."""

    def __init__(self) -> None:
        super().__init__()
        self.estimate: int | None = None
        self.raw_total: int | None = None
        self.finished: set[str] = set()

    def _task(self, name: str) -> TaskID:
        return self.task(name, self.estimate)

    def _bytes(self, name: str, n: int) -> None:
        """A node's count; a finished node's bar is full at what it received."""
        task = self._task(name)
        if name in self.finished:
            self.progress.update(task, total=max(n, 1), completed=n)
        else:
            total = max(self.estimate or 0, n) or None
            self.progress.update(task, total=total, completed=n)

    def __call__(self, ev: PushEvent) -> None:
        p = self.progress
        if ev.kind == "plan" and ev.plan is not None:
            plan = ev.plan
            self.raw_total = plan.source.size_bytes
            self.estimate = plan.source.size_bytes
            p.console.print(
                f"[bold]{plan.reference}[/] {plan.source.identity.short()} "
                f"({plan.source.platform or 'platform ?'}) from {plan.source.source.label()}: "
                f"{len(plan.targets)} to send, {len(plan.skipped)} already hold it"
                + (f", {len(plan.unreachable)} unreachable" if plan.unreachable else ""),
                soft_wrap=True,
            )
            for name in plan.skipped:
                p.console.print(f"  {name}: skipped (holds {plan.source.identity.short()})")
            for problem in plan.unreachable:
                p.console.print(
                    styled("red", "", f"  {problem.node}: {problem.evidence}"), soft_wrap=True
                )
            if plan.targets:
                self._task("sent")
            for name in plan.targets:
                self._task(name)
        elif ev.kind == "round":
            p.console.print(plain(f"round {ev.round}: {ev.text}"), soft_wrap=True)
            if ev.round > 1:
                for name, task in self.tasks.items():
                    if name == "sent" or f" {name}" in ev.text:
                        self.finished.discard(name)
                        p.reset(task, total=self.estimate, state="")
        elif ev.kind == "source":
            raw, wire = ev.raw_bytes or 0, ev.wire_bytes or 0
            if self.raw_total and raw > 0 and wire > 0:
                self.estimate = max(wire, int(self.raw_total * wire / raw))
            self._bytes("sent", wire)
        elif ev.kind == "progress" and ev.node is not None and ev.wire_bytes is not None:
            self._bytes(ev.node, ev.wire_bytes)
        elif ev.kind == "loaded" and ev.node is not None:
            task = self._task(ev.node)
            if ev.ok:
                self.finished.add(ev.node)
                self._bytes(ev.node, int(p.tasks[task].completed))
            p.update(task, state="[green]loaded[/]" if ev.ok else "[red]load failed[/]")
        elif ev.kind == "verify" and ev.node is not None:
            p.update(
                self._task(ev.node),
                state="[green]verified[/]" if ev.ok else "[red]not verified[/]",
            )
        elif ev.kind == "probe" and ev.readiness is not None and ev.node is not None:
            r = ev.readiness
            p.update(
                self._task(ev.node),
                state=f"[green]{r.summary()}[/]" if r.ready else f"[red]{r.summary()}[/]",
            )
        elif ev.kind == "note":
            p.console.print(styled("yellow", "", ev.text), soft_wrap=True)


def _probe_cell(r: ExecReadiness | None) -> str:
    if r is None:
        return "-"
    if r.ready:
        text = f"ready ({r.tries} {'try' if r.tries == 1 else 'tries'}, {r.seconds:.1f} s)"
        return f"[green]{text}[/]" if r.tries == 1 else f"[yellow]{text}[/]"
    return f"[red]{r.summary()}[/]"


def render_push(report: PushReport) -> Table:
    table = Table(
        title=f"image push {report.reference} ({report.identity}) from {report.source}",
        title_justify="left",
    )
    for col in ("rank", "node", "result", "s", "MiB in", "sends", "verified", "probe"):
        table.add_column(col, overflow="fold")
    table.add_column("detail", overflow="fold")
    colour = {
        NodeAction.skipped: "dim",
        NodeAction.loaded: "green",
        NodeAction.failed: "red",
    }
    for n in report.nodes:
        verified = "-" if n.verified is None else ("yes" if n.verified else "[red]no[/]")
        detail = n.error or n.note or ""
        if n.sends > 1 and not n.error:
            detail = f"re-sent from {n.sent_from}"
        table.add_row(
            str(n.rank),
            n.node,
            f"[{colour[n.action]}]{n.action.value}[/]",
            "-" if n.seconds is None else f"{n.seconds:.1f}",
            _mib(n.received_bytes),
            str(n.sends),
            verified,
            _probe_cell(n.probe),
            detail,
        )
    return table


def _footer(report: PushReport) -> list[str]:
    lines = []
    if report.mode is not None:
        lines.append(f"mode: {report.mode.value} — {report.mode_reason}")
        lines.append(f"wire: {report.compression.value} — {report.compression_reason}")
    for r in report.rounds:
        size = (
            f", {_mib(r.wire_bytes)} MiB on the wire ({_mib(r.raw_bytes)} MiB raw)"
            if r.wire_bytes
            else ""
        )
        lines.append(
            f"round {r.round}: {r.mode.value} from {r.source} to {len(r.targets)} nodes "
            f"in {r.seconds:.1f} s{size}"
        )
    counts = {a: sum(1 for n in report.nodes if n.action is a) for a in NodeAction}
    lines.append(
        f"{counts[NodeAction.loaded]} loaded, {counts[NodeAction.skipped]} skipped, "
        f"{counts[NodeAction.failed]} failed in {report.seconds:.1f} s"
    )
    return lines


FromTarOpt = Annotated[
    Path | None,
    typer.Option("--from-tar", help="stream this `docker save` archive (plain or gzip)"),
]
FromNodeOpt = Annotated[
    str | None,
    typer.Option("--from-node", help="a node that holds the image (e.g. after docker pull)"),
]


def _source(from_tar: Path | None, from_node: str | None) -> Source:
    if from_tar is not None and from_node is not None:
        raise ConfigError("--from-tar and --from-node exclude each other: name one source")
    if from_tar is not None:
        return Source(kind=SourceKind.tar, path=from_tar)
    if from_node is not None:
        return Source(kind=SourceKind.node, node=from_node)
    return Source()


@app.command("push")
def push(
    image: ImageArg,
    inventory: InventoryOpt = None,
    from_tar: FromTarOpt = None,
    from_node: FromNodeOpt = None,
    json_out: JsonOpt = False,
    compress: Annotated[
        CompressChoice,
        typer.Option("--compress", help="zstd on the wire: auto (when it pays), zstd, none"),
    ] = CompressChoice.auto,
    mode: Annotated[
        ModeChoice,
        typer.Option(
            "--mode", help="auto: chain when nodes reach each other over SSH, else fan-out"
        ),
    ] = ModeChoice.auto,
    streams: Annotated[
        int, typer.Option("--streams", min=1, help="parallel streams of a fan-out")
    ] = 4,
    connect_timeout: ConnectOpt = DEADLINES.connect_s,
    stall_timeout: StallOpt = 15.0,
    ready_timeout: ReadyOpt = DEFAULT_WINDOW_S,
    no_probe: Annotated[
        bool, typer.Option("--no-probe", help="skip the exec-readiness probe after loading")
    ] = False,
    probe_all: Annotated[
        bool,
        typer.Option("--probe-all", help="also probe the nodes that already held the image"),
    ] = False,
    digest: DigestOpt = None,
    platform: Annotated[
        str | None, typer.Option("--platform", help="expected platform, e.g. linux/arm64")
    ] = None,
) -> None:
    """Send IMAGE to every node that lacks it, node to node; verify; probe exec-readiness."""
    inv = open_inventory(inventory, quiet=json_out)
    source = _source(from_tar, from_node)
    options = PushOptions(
        compress=compress.value,
        mode=mode.value,
        fanout_streams=streams,
        connect=ConnectOptions(connect_timeout_s=connect_timeout),
        stall_timeout_s=stall_timeout,
        probe=not no_probe,
        probe_all=probe_all,
        ready_window_s=ready_timeout,
        expected_digest=digest,
        platform=platform,
    )
    if json_out:
        report = asyncio.run(push_image(inv, image, source=source, options=options))
        print_json(report)
    else:
        with PushDisplay() as display:
            report = asyncio.run(
                push_image(inv, image, source=source, options=options, on_event=display)
            )
        console.print(render_push(report))
        for line in _footer(report):
            err_console.print(line, soft_wrap=True)
    report.raise_for_failures()


def render_probe(report: ProbeReport) -> Table:
    table = Table(title=f"image probe {report.reference}", title_justify="left")
    for col in ("rank", "node", "present", "identity", "platform", "store", "exec-ready"):
        table.add_column(col, overflow="fold")
    for r in report.nodes:
        present = "yes" if r.present else "[red]no[/]"
        if not r.reachable:
            present = f"[red]{r.error}[/]"
        ident = r.identity or "-"
        if r.matches is False:
            ident = f"[red]{ident} (not the digest)[/]"
        table.add_row(
            str(r.rank),
            r.node,
            present,
            ident,
            r.platform or "-",
            f"{r.driver} ({r.store})" if r.driver else (r.store or "-"),
            _probe_cell(r.ready),
        )
    return table


@app.command("probe")
def probe(
    image: ImageArg,
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
    ready_timeout: ReadyOpt = DEFAULT_WINDOW_S,
    digest: DigestOpt = None,
    connect_timeout: ConnectOpt = DEADLINES.connect_s,
) -> None:
    """Does every node hold IMAGE, and can it start a container from it right now?"""
    inv = open_inventory(inventory, quiet=json_out)

    def run(on_result: Callable[[ExecReadiness], None] | None = None) -> ProbeReport:
        return asyncio.run(
            probe_image(
                inv,
                image,
                expected_digest=digest,
                window_s=ready_timeout,
                connect_timeout_s=connect_timeout,
                on_result=on_result,
            )
        )

    if json_out:
        report = run()
        print_json(report)
    else:

        def seen(r: ExecReadiness) -> None:
            err_console.print(plain(f"  {r.node}: {r.summary()}"), soft_wrap=True)

        with err_console.status(f"probing {image} on {len(inv.nodes)} nodes"):
            report = run(seen)
        console.print(render_probe(report))
    report.raise_for_failures()


def render_status(report: ImageStatusReport) -> Table:
    size = f", {_mib(report.bytes)} MiB" if report.bytes is not None else ""
    table = Table(
        title=f"image status {report.reference} ({report.identity}, {report.layers} layers{size},"
        f" from {report.source})",
        title_justify="left",
    )
    for col in ("rank", "node", "present", "layers missing", "MiB missing", "driver", "store"):
        table.add_column(col, overflow="fold")
    for r in report.nodes:
        if not r.reachable:
            table.add_row(str(r.rank), r.node, f"[red]{r.error}[/]", "-", "-", "-", "-")
            continue
        missing = "-" if r.layers_missing is None else f"{r.layers_missing} of {report.layers}"
        if r.partial is False and not r.present:
            missing += " (whole image)"
        table.add_row(
            str(r.rank),
            r.node,
            "yes" if r.present else "[yellow]no[/]",
            missing,
            _mib(r.bytes_missing),
            r.driver or "-",
            r.store or "-",
        )
    return table


@app.command("status")
def status(
    image: ImageArg,
    inventory: InventoryOpt = None,
    from_tar: FromTarOpt = None,
    from_node: FromNodeOpt = None,
    json_out: JsonOpt = False,
    connect_timeout: ConnectOpt = DEADLINES.connect_s,
) -> None:
    """Per node: does it hold IMAGE, which layers does it lack (count, bytes), which store."""
    inv = open_inventory(inventory, quiet=json_out)
    source = _source(from_tar, from_node)
    report = asyncio.run(image_status(inv, image, source=source, connect_timeout_s=connect_timeout))
    if json_out:
        print_json(report)
    else:
        console.print(render_status(report))
