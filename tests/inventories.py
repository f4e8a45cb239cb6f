"""Inventories for unit tests that hand their nodes to the code directly: no file is read."""

from __future__ import annotations

from pathlib import Path

from orchestrator.models.inventory import Inventory, Node


def inventory_of(*nodes: Node, path: Path = Path("i.yaml")) -> Inventory:
    """An SSH inventory of `nodes`, with no known_hosts file and the default runs directory."""
    return Inventory(
        path=path,
        sha256="",
        name="c",
        connection="ssh",
        known_hosts=None,
        runs_dir=None,
        nodes=nodes,
    )
