"""Where built-in data and per-user state live."""

from __future__ import annotations

import os
from pathlib import Path

_DATA = Path(__file__).resolve().parent / "_data"


def builtin_inventory_dir() -> Path:
    """The shipped inventories (`inventory/` in the source tree, package data when installed)."""
    return _DATA / "inventory"


def builtin_recipes_dir() -> Path:
    """The shipped recipes (`recipes/` in the source tree, package data when installed)."""
    return _DATA / "recipes"


def builtin_simulated_inventory() -> Path:
    return builtin_inventory_dir() / "sim-8x.yaml"


def state_dir() -> Path:
    """`$XDG_STATE_HOME/cluster`, else `~/.local/state/cluster`: every terminal finds them."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "cluster"
