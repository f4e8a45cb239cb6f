"""Which run store a command reads (the inventory's `cluster_runs_dir`, else the default) and
which run in it. Below every command module, so completion and the commands share it without
importing one another."""

from __future__ import annotations

from orchestrator.errors import RunStoreError
from orchestrator.inventory import load_inventory, resolve_inventory_path
from orchestrator.runstore import Run, RunStore


def store_for(inventory: str | None) -> RunStore:
    """The inventory's cluster_runs_dir, else the default under $XDG_STATE_HOME."""
    resolved, _note = resolve_inventory_path(inventory)
    return RunStore(load_inventory(resolved).runs_dir)


def pick_run(store: RunStore, ref: str | None) -> Run:
    if ref:
        return store.open(ref)
    run = store.latest()
    if run is None:
        raise RunStoreError(
            "no runs yet", where=str(store.root), hint="start one with `cluster boot RECIPE`"
        )
    return run
