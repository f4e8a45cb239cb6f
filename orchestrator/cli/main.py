"""The `cluster` command: one Typer app; every `ClusterError` is caught here, once.

A known failure prints one line (what, where, what to do) and exits with its code. Anything
else is a bug: the traceback goes to a crash file whose path we print, never to the terminal.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from datetime import UTC, datetime
from typing import Annotated

import typer
from typer.exceptions import TyperException

from orchestrator import __version__
from orchestrator.cli.output import err_console
from orchestrator.errors import ClusterError, ExitCode
from orchestrator.logging import LogFormat, configure_logging
from orchestrator.paths import state_dir

# Every command: name -> (module under orchestrator.cli, attribute, a sub-app?). A command's
# module is imported only when that command runs (or for the full `--help`): importing all of
# them (asyncssh, the boot, the postmortem's signatures) took ~0.7 s before any work began,
# which `cluster status`, run every few seconds by people and scripts, paid every time.
COMMANDS: dict[str, tuple[str, str, bool]] = {
    "boot": ("boot", "boot_cmd", False),
    "inventory": ("inventory", "app", True),
    "image": ("image", "app", True),
    "recipes": ("recipes", "app", True),
    "sim": ("sim", "app", True),
    "preflight": ("preflight", "preflight", False),
    "nccl-check": ("nccl_check", "nccl_check", False),
    "runs": ("runs", "runs", False),
    "status": ("operate", "status", False),
    "supervise": ("operate", "supervise", False),
    "stop": ("operate", "stop", False),
    "prune": ("operate", "prune_cmd", False),
    "logs": ("runs", "logs", False),
    "postmortem": ("postmortem", "postmortem", False),
}
_ROOT_OPTIONS_WITH_VALUE = ("--log-format",)


def command_named(argv: list[str]) -> str | None:
    """The command `argv` runs, if it names one: root options come first, then the command."""
    args = iter(argv)
    for arg in args:
        if arg in _ROOT_OPTIONS_WITH_VALUE:
            next(args, None)
        elif not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def build_app(argv: list[str]) -> typer.Typer:
    """The Typer app with the command `argv` names, or every command (help, a typo)."""
    app = typer.Typer(
        name="cluster",
        help="Boot one model across a small cluster of DGX Sparks, rank by rank, keeping every "
        "log.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    wanted = command_named(argv)
    for name, (module, attribute, is_group) in COMMANDS.items():
        if wanted is not None and name != wanted:
            continue
        command = getattr(importlib.import_module(f"orchestrator.cli.{module}"), attribute)
        if is_group:
            app.add_typer(command, name=name)
        else:
            app.command(name)(command)
    return app


def _version(value: bool) -> None:
    if value:
        print(f"cluster {__version__}")
        raise typer.Exit()


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
        args = sys.argv[1:] if argv is None else argv
        build_app(args)(args=args, standalone_mode=False)
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
