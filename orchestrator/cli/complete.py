"""Shell completion (typer's): recipe names and run ids, besides the commands and options that
typer completes by itself. `cluster --install-completion` installs it for the current shell.

Each function runs at every TAB press in a fresh `cluster` process, so each reads only what it
needs (a folder listing, the inventory for its runs folder) and never fails loudly: a problem
completes nothing.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from orchestrator.errors import ClusterError
from orchestrator.paths import builtin_recipes_dir


def recipe_choices(incomplete: str) -> list[str]:
    """Built-in recipe names starting with `incomplete`; a path-like start completes .yaml
    files instead (a recipe may be a path)."""
    if "/" in incomplete or incomplete.startswith("."):
        folder = Path(incomplete).parent if "/" in incomplete else Path(".")
        try:
            files = sorted(folder.iterdir())
        except OSError:
            return []
        return [
            str(p) + ("/" if p.is_dir() else "")
            for p in files
            if str(p).startswith(incomplete.removeprefix("./")) or f"./{p}".startswith(incomplete)
            if p.is_dir() or p.suffix in (".yaml", ".yml")
        ]
    try:
        names = sorted(p.stem for p in builtin_recipes_dir().glob("*.yaml"))
    except OSError:
        return []
    return [n for n in names if n.startswith(incomplete)]


def complete_recipe(incomplete: str) -> list[str]:
    return recipe_choices(incomplete)


def run_choices(inventory: str | None, incomplete: str) -> list[tuple[str, str]]:
    """(run id, its outcome or "no verdict") for the inventory's runs, newest first."""
    from orchestrator.cli.stores import store_for

    try:
        runs = store_for(inventory).runs()
    except (ClusterError, OSError):
        return []
    out: list[tuple[str, str]] = []
    for run in runs:
        if not run.id.startswith(incomplete):
            continue
        outcome = "no verdict"
        with contextlib.suppress(ClusterError, OSError):
            if (verdict := run.verdict()) is not None:
                outcome = verdict.outcome.value
        out.append((run.id, outcome))
    return out


def complete_run(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    inventory = ctx.params.get("inventory")
    return run_choices(inventory if isinstance(inventory, str) else None, incomplete)
