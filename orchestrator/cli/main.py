"""The `cluster` command: one Typer app; every `ClusterError` is caught here, once.

A known failure prints one line (what, where, what to do) and exits with its code. Anything
else is a bug: the traceback goes to a crash file whose path we print, never to the terminal.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup
from typer.exceptions import TyperException

from orchestrator import __version__
from orchestrator.cli.output import err_console, plain, styled
from orchestrator.errors import ClusterError, ExitCode
from orchestrator.logging import LogFormat, configure_logging
from orchestrator.paths import state_dir

# Every command: name -> (module under orchestrator.cli, attribute, a sub-app?, its summary). A
# command's module is imported only when that command runs: importing all of them (asyncssh,
# the boot, the postmortem's signatures) took ~0.7 s before any work began, which `cluster
# status`, run every few seconds by people and scripts, paid every time. The root `--help`
# lists the summaries from here (a test holds each equal to its command's own help).
COMMANDS: dict[str, tuple[str, str, bool, str]] = {
    "boot": (
        "boot",
        "boot_cmd",
        False,
        "Boot RECIPE on every node: preflight, image, ranks, live per-rank progress, verdict.",
    ),
    "preflight": (
        "preflight",
        "preflight",
        False,
        "Check every node against the recipe before any weight is read; exit 4 on errors.",
    ),
    "nccl-check": (
        "nccl_check",
        "nccl_check",
        False,
        "Run a tiny torch.distributed all-reduce across every rank, exactly as the boot would "
        "meet.",
    ),
    "runs": (
        "runs",
        "runs",
        False,
        "The run directories, newest first: recipe, start, outcome, duration, serving restarts.",
    ),
    "status": (
        "operate",
        "status",
        False,
        "One row per rank: phase, load, ETA, rate, memory, barrier slack, fitted to the terminal.",
    ),
    "supervise": (
        "operate",
        "supervise",
        False,
        "Supervise a run again after its controller died: resume every rank's log where the "
        "preserved copy ends, and carry on to READY or a verdict; a serving run (READY) is "
        "watched until an incident or `cluster stop` (the serving watch, docs/operating.md).",
    ),
    "stop": (
        "operate",
        "stop",
        False,
        "Save every rank's complete log and inspect output into the run directory, then stop "
        "and remove that run's containers (only those: matched by the run's labels).",
    ),
    "prune": (
        "operate",
        "prune_cmd",
        False,
        "Remove containers earlier runs left behind (a failed boot keeps them as evidence), "
        "after saving their logs and inspect output into their runs.",
    ),
    "logs": (
        "runs",
        "logs",
        False,
        "Preserved rank logs from the run directory (both streams, in time order).",
    ),
    "postmortem": (
        "postmortem",
        "postmortem",
        False,
        "From a boot's preserved logs: which rank failed first, why, and what to change.",
    ),
    "bench": (
        "bench",
        "bench",
        False,
        "Smoke-test and measure a serving run's endpoint: output tok/s, req/s, TTFT, TPOT, ITL "
        "and E2E per depth and concurrency; kept in the run (bench.json, bench.png).",
    ),
    "inventory": ("inventory", "app", True, "Read and check the inventory of nodes."),
    "image": (
        "image",
        "app",
        True,
        "Distribute the serving image to every node and probe that each can run it.",
    ),
    "weights": (
        "weights",
        "app",
        True,
        "Stage a model's weights on every node's own disk, verified, node to node.",
    ),
    "recipes": (
        "recipes",
        "app",
        True,
        "The recipes: what to serve, with which engine, image, flags and timeouts.",
    ),
    "sim": (
        "sim",
        "app",
        True,
        "The built-in engine simulator: make weights, show a recipe's twin, rehearse a boot.",
    ),
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


def load_command(name: str) -> TyperCommand | TyperGroup:
    """The click command behind `name`, importing its module now."""
    module, attribute, is_group, _summary = COMMANDS[name]
    command = getattr(importlib.import_module(f"orchestrator.cli.{module}"), attribute)
    if is_group:
        group = typer.main.get_group(command)
        group.name = name
        return group
    single = typer.Typer(add_completion=False)
    single.command(name)(command)
    loaded = typer.main.get_command(single)
    assert isinstance(loaded, TyperCommand)
    return loaded


class _Listed(TyperCommand):
    """A command known by its name and summary, for the root `--help` and for suggestions on a
    typo. If it ever runs (a command line `command_named` did not read), it loads the real
    command then and hands over."""

    def __init__(self, name: str, summary: str) -> None:
        super().__init__(name, help=summary)

    def make_context(
        self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any
    ) -> Any:
        assert self.name is not None
        return load_command(self.name).make_context(info_name, args, parent=parent, **extra)


def build_app(argv: list[str]) -> TyperGroup:
    """The command group: the command `argv` names, loaded; every other one only listed."""
    app = typer.Typer(
        name="cluster",
        help="Boot one model across a small cluster of DGX Sparks, rank by rank, keeping every "
        "log.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    group = typer.main.get_group(app)
    # typer's --install-completion / --show-completion (orchestrator/cli/complete.py completes
    # recipe names and run ids; typer completes commands and options).
    group.params += list(typer.main.get_install_completion_arguments())
    wanted = command_named(argv)
    for name, (*_where, summary) in COMMANDS.items():
        group.add_command(load_command(name) if name == wanted else _Listed(name, summary), name)
    return group


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
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    text = f"cluster {__version__}\nargv: {sys.argv!r}\n\n" + "".join(
        traceback.format_exception(exc)
    )
    # Two crashes in one instant (two terminals, a script in a loop) each keep their traceback:
    # the pid tells the processes apart, O_EXCL and a counter the rest.
    for n in range(100):
        path = crash_dir / f"crash-{stamp}-{os.getpid()}{f'-{n}' if n else ''}.txt"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        return str(path)
    raise FileExistsError(str(path))


def _short(text: str, limit: int = 300) -> str:
    """An exception's text for one terminal line: the crash file has all of it."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point. Returns (and exits with) the process exit code."""
    try:
        args = sys.argv[1:] if argv is None else argv
        build_app(args).main(args=args, prog_name="cluster", standalone_mode=False)
        code = 0
    except ClusterError as exc:
        # Error lines carry user text (paths, host and recipe names, log lines): never markup.
        for line in exc.lines():
            err_console.print(styled("bold red", "error: ", _short(line, 2000)), soft_wrap=True)
        if exc.run_dir:
            err_console.print(plain(f"run directory: {exc.run_dir}"), soft_wrap=True)
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
            styled(
                "bold red",
                "internal error: ",
                f"{type(exc).__name__}: {_short(str(exc))} — "
                f"this is a bug in cluster; the traceback is in {path}",
            ),
            soft_wrap=True,
        )
        code = int(ExitCode.INTERNAL)
    if argv is None:
        sys.exit(code)
    return code
