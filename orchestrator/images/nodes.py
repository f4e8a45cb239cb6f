"""Asking the nodes: commands with a deadline that covers the session too, and every node's
state (the image it holds, its store, the chain's tools)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from orchestrator.deadlines import DEADLINES
from orchestrator.dockercli import DockerCli
from orchestrator.errors import ClusterError, CommandTimeout
from orchestrator.fanout import settle_each
from orchestrator.images.model import NodeState
from orchestrator.models.inventory import Inventory, Node
from orchestrator.probes.image import (
    CHAIN_TOOLS,
    HeldLayers,
    ImageIdentity,
    image_inspect_probe,
    image_layers_probe,
    image_store_probe,
    same_image,
)
from orchestrator.transport import Transport
from orchestrator.transport.base import CommandResult


async def run_bounded(transport: Transport, argv: Sequence[str], timeout_s: float) -> CommandResult:
    """`transport.run` with a deadline that also covers opening the session: on a connection
    whose link died, asyncssh would otherwise wait for its keepalive (a minute) first."""
    try:
        return await asyncio.wait_for(transport.run(argv, timeout_s=timeout_s), timeout_s + 2)
    except TimeoutError:
        raise CommandTimeout(
            node=transport.node.name, argv=list(argv), timeout_s=timeout_s
        ) from None


async def _ask_state(
    node: Node, transport: Transport, reference: str, timeout_s: float
) -> NodeState:
    docker = DockerCli.of(node)
    base: dict[str, Any] = {"node": node.name, "rank": node.rank}
    try:
        await transport.connect()
        inspect_p = image_inspect_probe(reference, docker)
        store_p = image_store_probe(docker)
        results = await asyncio.gather(
            run_bounded(transport, inspect_p.argv, timeout_s),
            run_bounded(transport, store_p.argv, timeout_s),
            run_bounded(transport, CHAIN_TOOLS.argv, timeout_s),
        )
        image = inspect_p.read(results[0])
        store = store_p.read(results[1])
        tools = CHAIN_TOOLS.read(results[2])
    except ClusterError as exc:
        return NodeState(**base, reachable=False, error=exc.line())
    if not store.reachable:
        return NodeState(
            **base,
            reachable=False,
            store=store,
            error=f"the docker daemon does not answer: {store.error or 'no server'}",
        )
    return NodeState(**base, reachable=True, store=store, image=image, tools=tools)


async def _held_layers(node: Node, transport: Transport, timeout_s: float) -> HeldLayers | None:
    """The layer chains a node holds; None when it cannot say (the node then gets the whole
    image: a missing answer must never make the push send less)."""
    probe = image_layers_probe(DockerCli.of(node))
    try:
        return probe.read(await run_bounded(transport, probe.argv, timeout_s))
    except ClusterError:
        return None


async def gather_states(
    inventory: Inventory,
    reference: str,
    transports: dict[str, Transport],
    *,
    nodes: Sequence[Node] | None = None,
    timeout_s: float = DEADLINES.probe_s,
) -> list[NodeState]:
    """Inspect the image, the store and the chain's tools on every node at once (rank order)."""
    chosen = list(nodes or inventory.nodes)

    def failed(n: Node, why: str) -> NodeState:
        return NodeState(node=n.name, rank=n.rank, reachable=False, error=why)

    return await settle_each(
        chosen, lambda n: _ask_state(n, transports[n.name], reference, timeout_s), failed
    )


async def with_held_layers(
    inventory: Inventory,
    states: Sequence[NodeState],
    transports: dict[str, Transport],
    want: ImageIdentity,
    *,
    timeout_s: float = DEADLINES.probe_s,
) -> list[NodeState]:
    """The states, with the layers held by every reachable node that lacks `want` (asked only
    there, all at once: a re-push where every node holds the image asks nothing more)."""
    need = [
        s for s in states if s.reachable and not (s.holds_image and same_image(s.identity, want))
    ]
    if not need:
        return list(states)
    held = await asyncio.gather(
        *(_held_layers(inventory.node(s.node), transports[s.node], timeout_s) for s in need)
    )
    got = {s.node: h for s, h in zip(need, held, strict=True)}
    return [s.model_copy(update={"held": got[s.node]}) if s.node in got else s for s in states]
