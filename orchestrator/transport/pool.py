"""One transport per node for a command's lifetime: opened together, closed together however
the command ends. Every command that talks to nodes takes its connections from here."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping

from orchestrator.models.inventory import Inventory
from orchestrator.transport import ConnectOptions, Transport, TransportFactory, transport_for


def open_transports(
    inventory: Inventory, options: ConnectOptions, factory: TransportFactory | None = None
) -> dict[str, Transport]:
    """One transport per node (not connected yet), by node name."""
    make = factory or (lambda n: transport_for(inventory, n, options))
    return {n.name: make(n) for n in inventory.nodes}


async def close_transports(transports: Mapping[str, Transport]) -> None:
    await asyncio.gather(*(t.close() for t in transports.values()), return_exceptions=True)


@contextlib.asynccontextmanager
async def node_transports(
    inventory: Inventory, options: ConnectOptions, factory: TransportFactory | None = None
) -> AsyncIterator[dict[str, Transport]]:
    """One transport per node for the block; all closed when it ends, however it ends."""
    transports = open_transports(inventory, options, factory)
    try:
        yield transports
    finally:
        await close_transports(transports)
