"""`cluster image status` (thin over the push's own questions): per node, does it hold the image,
which of its layers does it lack (count and bytes), on which storage driver and image store."""

from __future__ import annotations

import asyncio

from pydantic import Field

from orchestrator.deadlines import DEADLINES
from orchestrator.dockercli import DockerCli
from orchestrator.errors import ClusterError
from orchestrator.images.layers import plan_layers
from orchestrator.images.model import NodeState, Source, SourceImage, SourceKind
from orchestrator.images.nodes import gather_states, run_bounded, with_held_layers
from orchestrator.images.source import _controller_node, resolve_source
from orchestrator.models.base import StrictModel
from orchestrator.models.inventory import Inventory
from orchestrator.probes.image import ImageStoreKind, layer_sizes_probe, same_image
from orchestrator.transport import ConnectOptions, Transport
from orchestrator.transport.local import LocalTransport
from orchestrator.transport.pool import node_transports


class NodeImageStatus(StrictModel):
    node: str
    rank: int
    reachable: bool
    error: str | None = None
    present: bool = False
    image_id: str | None = None
    config_digest: str | None = Field(default=None, description="None: the store hides it")
    driver: str | None = Field(default=None, description="docker info Driver: overlay2, vfs, ...")
    store: str | None = Field(default=None, description="graphdriver | containerd | unknown")
    layers_missing: int | None = Field(default=None, description="None: unknown")
    bytes_missing: int | None = Field(default=None, description="None: layer sizes unknown")
    partial: bool | None = Field(default=None, description="may a push send only what it lacks?")
    note: str | None = None


class ImageStatusReport(StrictModel):
    reference: str
    source: str
    identity: str
    layers: int
    bytes: int | None
    nodes: tuple[NodeImageStatus, ...]


def status_rows(src: SourceImage, states: list[NodeState]) -> list[NodeImageStatus]:
    """Pure: each node against the source's image."""
    stores = {s.node: s.store.kind if s.store else ImageStoreKind.unknown for s in states}
    sizes = src.layer_sizes
    out = []
    for s in states:
        if not s.reachable:
            out.append(NodeImageStatus(node=s.node, rank=s.rank, reachable=False, error=s.error))
            continue
        present = s.holds_image and same_image(s.identity, src.identity)
        gaps = plan_layers(src.layers, [s.node], {s.node: s.held}, stores).nodes[0]
        missing = () if present else gaps.missing
        out.append(
            NodeImageStatus(
                node=s.node,
                rank=s.rank,
                reachable=True,
                present=present,
                image_id=s.image.id if s.holds_image and s.image else None,
                config_digest=s.identity.config_digest if s.holds_image else None,
                driver=s.store.driver if s.store else None,
                store=stores[s.node].value,
                layers_missing=len(missing) if src.layers else None,
                bytes_missing=sum(sizes[i] for i in missing) if sizes else None,
                partial=gaps.partial,
                note=None if gaps.partial else gaps.why_whole,
            )
        )
    return out


async def _sizes(
    inventory: Inventory, src: SourceImage, transports: dict[str, Transport]
) -> tuple[int, ...] | None:
    if src.layer_sizes is not None or not src.layers:
        return src.layer_sizes
    if src.source.kind is SourceKind.node:
        assert src.source.node is not None
        node = inventory.node(src.source.node)
        transport: Transport = transports[node.name]
        docker = DockerCli.of(node)
    else:
        transport = LocalTransport(_controller_node())
        docker = DockerCli()
    probe = layer_sizes_probe(src.reference, docker, len(src.layers))
    try:
        return probe.read(await run_bounded(transport, probe.argv, 30.0))
    except ClusterError:
        return None


async def image_status(
    inventory: Inventory,
    reference: str,
    *,
    source: Source | None = None,
    connect_timeout_s: float = DEADLINES.connect_s,
) -> ImageStatusReport:
    """Ask every node at once; the source (controller, archive or node) says what the image is."""
    source = source or Source()
    copts = ConnectOptions(connect_timeout_s=connect_timeout_s)
    async with node_transports(inventory, copts) as transports:
        states = await gather_states(
            inventory, reference, transports, timeout_s=max(10.0, connect_timeout_s * 2)
        )
        src = await resolve_source(inventory, reference, source, states)
        states = await with_held_layers(inventory, states, transports, src.identity)
        sizes = await _sizes(inventory, src, transports)
    src = src.model_copy(update={"layer_sizes": sizes})
    rows = await asyncio.to_thread(status_rows, src, states)
    return ImageStatusReport(
        reference=reference,
        source=source.label(),
        identity=src.identity.short(),
        layers=len(src.layers),
        bytes=sum(sizes) if sizes else None,
        nodes=tuple(rows),
    )
