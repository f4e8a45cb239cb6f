"""`cluster postmortem`: which rank failed first, why, and what to change, from logs alone.

    cluster postmortem                      the newest run in the run store
    cluster postmortem RUN_ID | RUN_DIR     one run (a copied run directory works too)
    cluster postmortem --logs FILE [FILE…]  loose rank logs; the rank comes from the file name
                                            (rank-3.log, rank3, tp3) or else the order given
        [--kernel-log RANK=FILE]            a node's `journalctl -k` / `dmesg` beside them (a
                                            kernel log among FILEs is also told by its form)

Read-only. `--json` prints the diagnosis document (docs/postmortem.md has its schema),
`--format md` Markdown for a ticket. Problems are `ClusterError`s, printed once by `cli.main`:
a run that does not exist is a `RunStoreError` (exit 8), a log file that does not exist a
`ConfigError` (exit 2).
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.complete import complete_run
from orchestrator.cli.options import InventoryOpt, JsonOpt
from orchestrator.cli.output import console, print_json
from orchestrator.errors import ConfigError, RunStoreError
from orchestrator.postmortem import postmortem_logs, postmortem_run
from orchestrator.postmortem.model import Diagnosis
from orchestrator.postmortem.report import render_markdown, render_rich
from orchestrator.runstore import RunStore


class Format(StrEnum):
    rich = "rich"
    md = "md"
    json = "json"


def postmortem(
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="RUN_ID|RUN_DIR|FILE...",
            help="a run id or run directory (default: the newest run); with --logs, log files",
            show_default=False,
            autocompletion=complete_run,
        ),
    ] = None,
    logs: Annotated[
        bool,
        typer.Option("--logs", help="diagnose loose log files, one per rank (rank-3.log, tp3...)"),
    ] = False,
    kernel_log: Annotated[
        list[str] | None,
        typer.Option(
            "--kernel-log",
            metavar="RANK=FILE",
            help="with --logs: the kernel log (journalctl -k, dmesg) of the node rank RANK ran on",
        ),
    ] = None,
    as_json: JsonOpt = False,
    fmt: Annotated[
        Format, typer.Option("--format", help="rich for a terminal, md for a ticket, json")
    ] = Format.rich,
    runs_dir: Annotated[
        Path | None,
        typer.Option(
            "--runs-dir",
            help="the run store to look in (default: the inventory's cluster_runs_dir, else "
            "the user's run store)",
        ),
    ] = None,
    inventory: InventoryOpt = None,
) -> None:
    """From a boot's preserved logs: which rank failed first, why, and what to change."""
    paths = list(targets or [])
    if logs:
        if not paths:
            raise ConfigError(
                "--logs needs at least one log file",
                where="cluster postmortem",
                hint="cluster postmortem --logs rank-0.log rank-1.log ...",
            )
        from orchestrator.postmortem.kernel_pasted import postmortem_logs_with_kernel

        diagnosis = postmortem_logs_with_kernel([Path(p) for p in paths], kernel_log or ())
    else:
        if kernel_log:
            raise ConfigError(
                "--kernel-log goes with --logs",
                where="cluster postmortem",
                hint="a run directory's nodes/*/kernel.log are read already; for loose files: "
                "cluster postmortem --logs rank-0.log ... --kernel-log 0=dmesg.txt",
            )
        if len(paths) > 1:
            raise ConfigError(
                f"one run at a time, got {len(paths)}: {' '.join(paths)}",
                where="cluster postmortem",
                hint="to read loose log files, add --logs",
            )
        target = paths[0] if paths else None
        if target is not None and Path(target).is_file():
            diagnosis = postmortem_logs([Path(target)])  # a single log file: no --logs needed
        else:
            store = RunStore(runs_dir) if runs_dir else _inventory_store(inventory)
            if target is None:
                run = store.latest()
                if run is None:
                    raise RunStoreError(
                        "no runs yet",
                        where=str(store.root),
                        hint="give a run directory, or --logs FILE... for loose logs",
                    )
            else:
                run = store.open(target)
            diagnosis = postmortem_run(run)
    _show(diagnosis, Format.json if as_json else fmt)


def _inventory_store(inventory: str | None) -> RunStore:
    """Where every other command looks: `-i`'s (or $CLUSTER_INVENTORY's) cluster_runs_dir."""
    from orchestrator.cli.stores import store_for

    return store_for(inventory)


def _show(diagnosis: Diagnosis, fmt: Format) -> None:
    if fmt is Format.json:
        print_json(diagnosis.as_json())
    elif fmt is Format.md:
        sys.stdout.write(render_markdown(diagnosis))
    else:
        console.print(render_rich(diagnosis))
