"""`cluster boot RECIPE`: boot every rank and watch it load, rank by rank, keeping every log."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.live import Live
from rich.text import Text

from orchestrator.cli.boot_screen import LiveUI, print_outcome
from orchestrator.cli.inventory import open_inventory
from orchestrator.cli.options import AcceptKeysOpt, InventoryOpt, RecipeArg, WideOpt
from orchestrator.cli.output import (
    console,
    err_console,
    live_terminal,
    plain,
    print_json,
)
from orchestrator.errors import BootFailed, ClusterError, ExitCode
from orchestrator.models.run import Outcome
from orchestrator.run.boot import BootOptions, boot
from orchestrator.runstore import Run
from orchestrator.transport import ConnectOptions


def boot_cmd(
    recipe: RecipeArg,
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
    accept_new_host_keys: AcceptKeysOpt = False,
    no_push: Annotated[
        bool, typer.Option("--no-push", help="do not push the image; it must be on every node")
    ] = False,
    simulate: Annotated[
        bool,
        typer.Option(
            "--simulate",
            help="rehearse on real nodes: run the recipe's simulated twin in containers "
            "(docs/simulator.md); the built-in simulated cluster always does",
        ),
    ] = False,
    sim_image: Annotated[
        str | None, typer.Option("--sim-image", help="with --simulate: the small image to use")
    ] = None,
    sim_docker_opt: Annotated[
        list[str] | None,
        typer.Option(
            "--sim-docker-opt",
            help="with --simulate: an extra `docker run` flag for every rank (repeatable), "
            "e.g. '--sim-docker-opt=--memory=256m' for an OOM drill with 'hog=512MB'",
        ),
    ] = None,
    detach: Annotated[
        bool,
        typer.Option("--detach", help="supervise in the background; follow with `cluster status`"),
    ] = False,
    wide: WideOpt = False,
    smoke: Annotated[
        bool,
        typer.Option(
            "--smoke/--no-smoke",
            help="after READY, send one chat request and check the answer and the served model "
            "name (a failure is SMOKE_FAILED; smoke.json keeps the answer)",
        ),
    ] = True,
    serving_watch: Annotated[
        bool,
        typer.Option(
            "--watch/--no-watch",
            help="after READY, hand over to a detached serving watch (deaths, wedges, memory; "
            "docs/operating.md); --no-watch ends at READY",
        ),
    ] = True,
    resume_run: Annotated[
        str | None,
        typer.Option(
            "--resume", metavar="RUN", help="supervise RUN again (as `cluster supervise`)"
        ),
    ] = None,
) -> None:
    """Boot RECIPE on every node: preflight, image, ranks, live per-rank progress, verdict."""
    if resume_run:
        from orchestrator.cli.operate import supervise

        supervise(resume_run, inventory)
        return
    if detach:
        passthrough = [
            *(["--simulate"] if simulate else []),
            *(["--sim-image", sim_image] if sim_image else []),
            *(f"--sim-docker-opt={opt}" for opt in sim_docker_opt or ()),
            *([] if smoke else ["--no-smoke"]),
            *([] if serving_watch else ["--no-watch"]),
        ]
        start_detached(
            recipe, inventory, scale, sim_fault, accept_new_host_keys, no_push, passthrough
        )
        return
    inv = open_inventory(inventory, quiet=json_out)
    from orchestrator.simulator.faults import ENV_FAULT

    options = BootOptions(
        connect=ConnectOptions(accept_new_host_keys=accept_new_host_keys),
        sim_scale=scale,
        sim_env={ENV_FAULT: sim_fault} if sim_fault else {},
        push_image=not no_push,
        simulate=simulate,
        sim_image=sim_image,
        sim_docker_extra=tuple(sim_docker_opt or ()),
        smoke=smoke,
    )
    runs: list[Run] = []
    notify = os.environ.pop(DETACH_NOTIFY_ENV, None)

    def on_run(run: Run) -> None:
        runs.append(run)
        if notify:  # detached: our output goes with the run; tell the parent which run
            fd = os.open(run.dir / "controller.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
            Path(notify).write_text(f"{run.id}\n{run.dir}\n")

    show_live = live_terminal() and not json_out
    with (
        Live(Text("starting…"), console=console, refresh_per_second=4, transient=True)
        if (show_live)
        else _Null() as live
    ):
        ui = LiveUI(live if show_live else None, wide=wide)
        try:
            result = asyncio.run(boot(recipe, inv, options=options, ui=ui, on_run=on_run))
        except KeyboardInterrupt:
            where = f" — the ranks keep running; run directory {runs[0].dir}" if runs else ""
            err_console.print(f"interrupted{where}; `cluster status` shows them")
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
        except ClusterError as exc:
            if runs and exc.run_dir is None:
                exc.run_dir = str(runs[0].dir)
            raise
    result.last_view = ui.last
    if not json_out:
        print_outcome(result, wide=wide)
    outcome_now = result.verdict.outcome
    watcher: int | None = None
    if serving_watch and outcome_now is not None and outcome_now.serving:
        from orchestrator.run.watch import WATCH_LOG, start_watcher

        watcher = start_watcher(result.run, inventory)
        if not json_out:
            console.print(
                plain(f"serving watch: pid {watcher}, its output {result.run.dir / WATCH_LOG}"),
                soft_wrap=True,
            )
            console.print(f"follow it:  cluster status --watch --run {result.run.id}")
    if json_out:
        verdict = result.run.verdict()
        document = verdict.document() if verdict else {"outcome": result.verdict.outcome}
        print_json(
            {
                **document,
                "run_dir": str(result.run.dir),
                "endpoint": result.endpoint,
                "watcher_pid": watcher,  # the detached serving watch; null when none was started
            }
        )
    if not result.ok:
        outcome = result.verdict.outcome or Outcome.RANK_EXITED
        err = BootFailed(
            f"{outcome.value}: {result.verdict.message}",
            where=f"run {result.run.id}",
            hint=f"`cluster postmortem {result.run.id}` for the full diagnosis",
            run_dir=str(result.run.dir),
        )
        err.exit_code = outcome.exit_code
        raise err


DETACH_NOTIFY_ENV = "CLUSTER_DETACH_NOTIFY"


def start_detached(
    recipe: str,
    inventory: str | None,
    scale: str,
    sim_fault: str | None,
    accept_new_host_keys: bool,
    no_push: bool,
    passthrough: list[str],
) -> None:
    """Run this same boot in its own session (surviving the terminal); print how to follow it."""
    argv = [sys.executable, "-m", "orchestrator.cli", "boot", recipe, "--scale", scale]
    if inventory:
        argv += ["-i", inventory]
    if sim_fault:
        argv += ["--sim-fault", sim_fault]
    if accept_new_host_keys:
        argv.append("--accept-new-host-keys")
    if no_push:
        argv.append("--no-push")
    argv += passthrough
    with tempfile.TemporaryDirectory() as tmp:
        notify = Path(tmp) / "run"
        log_path = Path(tmp) / "boot.log"
        with log_path.open("wb") as log_fh:
            proc = subprocess.Popen(
                argv,
                env={**os.environ, DETACH_NOTIFY_ENV: str(notify), "COLUMNS": "160"},
                stdin=subprocess.DEVNULL,
                stdout=log_fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        for _ in range(600):
            if notify.exists() and notify.read_text().count("\n") >= 2:
                break
            if proc.poll() is not None:
                raise BootFailed(
                    f"the background boot exited ({proc.returncode}) before creating its run: "
                    + log_path.read_text()[-400:].strip(),
                    where=recipe,
                )
            time.sleep(0.1)
        run_id, run_dir = notify.read_text().split("\n")[:2]
    inv = f" -i {inventory}" if inventory else ""
    console.print(f"run {run_id}: supervised in the background (pid {proc.pid})")
    console.print(plain(f"its output: {run_dir}/controller.log"), soft_wrap=True)
    console.print(f"follow it:  cluster status --watch --run {run_id}{inv}")


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
