"""The `cluster` command: one Typer app; every `ClusterError` is caught here, once.

A known failure prints one line (what, where, what to do) and exits with its code. Anything
else is a bug: the traceback goes to a crash file whose path we print, never to the terminal.
"""

from __future__ import annotations

import sys
import traceback
from datetime import UTC, datetime
from typing import Annotated

import typer
from typer.exceptions import TyperException

from orchestrator import __version__
from orchestrator.cli import boot as boot_cmd
from orchestrator.cli import image as image_cmd
from orchestrator.cli import inventory as inventory_cmd
from orchestrator.cli import nccl_check as nccl_check_cmd
from orchestrator.cli import operate as operate_cmd
from orchestrator.cli import postmortem as postmortem_cmd
from orchestrator.cli import preflight as preflight_cmd
from orchestrator.cli import recipes as recipes_cmd
from orchestrator.cli import runs as runs_cmd
from orchestrator.cli import sim as sim_cmd
from orchestrator.cli.output import err_console
from orchestrator.errors import ClusterError, ExitCode
from orchestrator.logging import LogFormat, configure_logging
from orchestrator.paths import state_dir

app = typer.Typer(
    name="cluster",
    help="Boot one model across a small cluster of DGX Sparks, rank by rank, keeping every log.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("boot")(boot_cmd.boot_cmd)
app.add_typer(inventory_cmd.app, name="inventory")
app.add_typer(image_cmd.app, name="image")
app.add_typer(recipes_cmd.app, name="recipes")
app.add_typer(sim_cmd.app, name="sim")
app.command("preflight")(preflight_cmd.preflight)
app.command("nccl-check")(nccl_check_cmd.nccl_check)
app.command("runs")(runs_cmd.runs)
app.command("status")(operate_cmd.status)
app.command("supervise")(operate_cmd.supervise)
app.command("stop")(operate_cmd.stop)
app.command("prune")(operate_cmd.prune_cmd)
app.command("logs")(runs_cmd.logs)
app.command("postmortem")(postmortem_cmd.postmortem)


def _version(value: bool) -> None:
    if value:
        print(f"cluster {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    log_format: Annotated[
        LogFormat, typer.Option("--log-format", help="console for people, json for machines")
    ] = LogFormat.console,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="debug logs")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print version")
    ] = False,
) -> None:
    configure_logging(log_format, verbose=verbose)


def write_crash_file(exc: BaseException) -> str:
    """Keep the traceback of an unexpected error where the on-call engineer can send it."""
    crash_dir = state_dir() / "crashes"
    crash_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = crash_dir / f"crash-{stamp}.txt"
    path.write_text(
        f"cluster {__version__}\nargv: {sys.argv!r}\n\n" + "".join(traceback.format_exception(exc)),
        encoding="utf-8",
    )
    return str(path)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point. Returns (and exits with) the process exit code."""
    try:
        app(args=argv, standalone_mode=False)
        code = 0
    except ClusterError as exc:
        for line in exc.lines():
            err_console.print(f"[bold red]error:[/] {line}", soft_wrap=True)
        run_dir = getattr(exc, "run_dir", None)
        if run_dir:
            err_console.print(f"run directory: {run_dir}", soft_wrap=True)
        code = int(exc.exit_code)
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        err_console.print("aborted")
        code = int(ExitCode.INTERRUPTED)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        code = int(ExitCode.INTERRUPTED)
    except TyperException as exc:  # usage errors: unknown option, missing argument, bad value
        exc.show()  # type: ignore[attr-defined]
        code = int(ExitCode.CONFIG)
    except Exception as exc:
        path = write_crash_file(exc)
        err_console.print(
            f"[bold red]internal error:[/] {type(exc).__name__}: {exc} — "
            f"this is a bug in cluster; the traceback is in {path}",
            soft_wrap=True,
        )
        code = int(ExitCode.INTERNAL)
    if argv is None:
        sys.exit(code)
    return code
