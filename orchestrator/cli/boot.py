"""`cluster boot RECIPE`: boot every rank and watch it load, rank by rank, keeping every log."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer
from rich.console import Group
from rich.live import Live
from rich.text import Text

from orchestrator.boot import BootOptions, BootResult, boot
from orchestrator.cli.inventory import InventoryOpt, open_inventory
from orchestrator.cli.output import console, err_console, print_json
from orchestrator.errors import BootFailed, ExitCode
from orchestrator.models.run import Outcome
from orchestrator.postmortem.report import render_rich
from orchestrator.runstore import Run
from orchestrator.supervisor.view import BootView, render_table
from orchestrator.transport import ConnectOptions


class LiveUI:
    """Steps scroll above; the per-rank table refreshes in place (the same renderer as
    `cluster status --watch`)."""

    def __init__(self, live: Live | None) -> None:
        self.live = live
        self.steps: list[str] = []
        self.last: BootView | None = None
        self.printed_warnings = 0

    def step(self, name: str, detail: str = "") -> None:
        line = f"[bold]{name}[/] {detail}".rstrip()
        if self.live is not None:
            self.live.console.print(line)
        else:
            err_console.print(line)

    def view(self, view: BootView) -> None:
        self.last = view
        for w in view.warnings[self.printed_warnings :]:
            text = f"[yellow]warning[/] {w.message}\n  [dim]→ {w.advice}[/]"
            (self.live.console if self.live else err_console).print(text)
        self.printed_warnings = len(view.warnings)
        if self.live is not None:
            self.live.update(render_table(view))


def _print_outcome(result: BootResult) -> None:
    v = result.verdict
    run = result.run
    if result.last_view is not None:
        console.print(render_table(result.last_view))
    if v.outcome is Outcome.READY:
        console.print(f"[bold green]READY[/] {v.message}")
        if result.endpoint:
            console.print(f"endpoint: {result.endpoint}/v1/chat/completions")
            host_port = result.endpoint.removeprefix("http://")
            port = host_port.rsplit(":", 1)[1]
            console.print(f"from a laptop: ssh -L {port}:{host_port} <user>@<head>")
        console.print(f"run directory: {run.dir}")
        return
    console.print(f"[bold red]{v.outcome.value if v.outcome else 'FAILED'}[/] {v.message}")
    if v.advice:
        console.print(f"  → {v.advice}")
    if result.diagnosis is not None:
        console.print(render_rich(result.diagnosis))


def boot_cmd(
    recipe: Annotated[str, typer.Argument(help="recipe name (`cluster recipes list`) or path")],
    inventory: InventoryOpt = None,
    scale: Annotated[
        str,
        typer.Option(
            "--scale",
            help="simulated cluster only: time scale of the twin (default ≈1 min, test ≈10 s, "
            "real, or a factor)",
        ),
    ] = "default",
    sim_fault: Annotated[
        str | None,
        typer.Option(
            "--sim-fault",
            help="simulated cluster only: inject faults for a drill (docs/simulator.md), "
            "e.g. 'rank=3:slow-read=2MB/s'",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the verdict as JSON")] = False,
    accept_new_host_keys: Annotated[
        bool, typer.Option("--accept-new-host-keys", help="record unknown nodes' host keys")
    ] = False,
    no_push: Annotated[
        bool, typer.Option("--no-push", help="do not push the image; it must be on every node")
    ] = False,
) -> None:
    """Boot RECIPE on every node: preflight, image, ranks, live per-rank progress, verdict."""
    inv = open_inventory(inventory, quiet=json_out)
    from orchestrator.simulator.faults import ENV_FAULT

    options = BootOptions(
        connect=ConnectOptions(accept_new_host_keys=accept_new_host_keys),
        sim_scale=scale,
        sim_env={ENV_FAULT: sim_fault} if sim_fault else {},
        push_image=not no_push,
    )
    runs: list[Run] = []
    show_live = console.is_terminal and not json_out
    with (
        Live(Text("starting…"), console=console, refresh_per_second=4, transient=True)
        if (show_live)
        else _Null() as live
    ):
        ui = LiveUI(live if show_live else None)
        try:
            result = asyncio.run(boot(recipe, inv, options=options, ui=ui, on_run=runs.append))
        except KeyboardInterrupt:
            where = f" — the ranks keep running; run directory {runs[0].dir}" if runs else ""
            err_console.print(f"interrupted{where}; `cluster status` shows them")
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
        except BaseException as exc:
            if runs and not hasattr(exc, "run_dir"):
                exc.run_dir = str(runs[0].dir)  # type: ignore[attr-defined]
            raise
    result.last_view = ui.last
    if json_out:
        verdict = json.loads((result.run.dir / "verdict.json").read_text())
        print_json({**verdict, "run_dir": str(result.run.dir), "endpoint": result.endpoint})
    else:
        _print_outcome(result)
    if not result.ok:
        outcome = result.verdict.outcome or Outcome.RANK_EXITED
        err = BootFailed(
            f"{outcome.value}: {result.verdict.message}",
            where=f"run {result.run.id}",
            hint=f"`cluster postmortem {result.run.id}` for the full diagnosis",
        )
        err.exit_code = outcome.exit_code
        err.run_dir = str(result.run.dir)  # type: ignore[attr-defined]
        raise err


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
