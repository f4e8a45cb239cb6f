"""Talking to nodes: one `Transport` per node, chosen by the inventory's `cluster_connection`."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.models.inventory import Connection, Inventory, Node
from orchestrator.transport.base import CommandResult, ConnectOptions, OutputLine, Stream, Transport

__all__ = [
    "CommandResult",
    "ConnectOptions",
    "OutputLine",
    "Stream",
    "Transport",
    "TransportFactory",
    "transport_for",
]

TransportFactory = Callable[[Node], Transport]
"""What makes a node's transport where a caller (a test, the simulated testbed) chooses it;
the entry points default to `transport_for`."""


def transport_for(inventory: Inventory, node: Node, options: ConnectOptions) -> Transport:
    """The transport the inventory asks for. asyncssh is imported only when SSH is used."""
    if inventory.connection is Connection.local:
        from orchestrator.transport.local import LocalTransport

        return LocalTransport(node)
    from orchestrator.transport.ssh import SshTransport

    return SshTransport(node, known_hosts=inventory.known_hosts, options=options)
