"""The layer plan (pure): which of the image's layers each target lacks, by content, and which
layers the stream can leave out because every receiver of the round already holds them.

A layer is compared by its chain id (its diff id on top of the diff ids below it), computed from
what `docker image inspect` reports on any store: two daemons with different storage drivers, or
one graph driver and one containerd store, agree on it where their image Ids do not.

One stream feeds the whole chain, so it carries the union of what the round's targets lack; a
node that already holds some of those layers lets `docker load` skip them (no import, only the
bytes pass by). A target whose daemon cannot take a partial archive (the containerd image store:
Docker 26.1.5 refuses one, `failed to resolve layers: layer "<v1 id>/layer.tar" not found`; a
daemon whose layers could not be listed) counts as lacking every layer: the stream is then the
whole image, and the plan says so and why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.probes.image import HeldLayers, ImageStoreKind, chain_ids


class NodeLayers(StrictModel):
    """What one target lacks of the image."""

    node: str
    missing: tuple[int, ...] = Field(description="indexes into the image's layers, base first")
    partial: bool = Field(description="may this node be sent only what it lacks?")
    why_whole: str | None = None


class LayerPlan(StrictModel):
    """The layers of the image (diff ids, base first), each target's gaps, and the stream's cut."""

    layers: tuple[str, ...]
    nodes: tuple[NodeLayers, ...]
    drop: tuple[str, ...] = Field(description="diff ids the stream leaves out")

    @property
    def whole(self) -> bool:
        return not self.drop

    def missing_of(self, node: str) -> NodeLayers | None:
        return next((n for n in self.nodes if n.node == node), None)

    def summary(self) -> str:
        n = len(self.layers)
        sent = n - len(set(self.drop) & set(self.layers))
        whole = [x for x in self.nodes if not x.partial]
        if not self.nodes:
            return "no node needs a layer"
        if self.whole:
            why = f" ({whole[0].node}: {whole[0].why_whole})" if whole else ""
            return f"the whole image: {n} layers{why}"
        return f"{sent} of {n} layers: the rest is on every target already"


def whole_reason(store: ImageStoreKind, held: HeldLayers | None) -> str | None:
    """Why a node must get the whole image, or None when it may get only what it lacks."""
    if store is ImageStoreKind.containerd:
        return "the containerd image store: its docker load refuses a partial archive"
    if store is not ImageStoreKind.graphdriver:
        return "its image store is unknown"
    if held is None:
        return "its layers could not be listed"
    return None


def plan_layers(
    layers: Sequence[str],
    targets: Sequence[str],
    held: Mapping[str, HeldLayers | None],
    stores: Mapping[str, ImageStoreKind],
    *,
    whole_for: Sequence[str] = (),
) -> LayerPlan:
    """Each target's missing layers and the diff ids the round's stream may drop.

    `whole_for` names nodes that must get the whole image whatever they hold (a partial load
    failed there before). No layers known (an archive without diff ids): nothing is dropped."""
    chains = chain_ids(list(layers))
    nodes: list[NodeLayers] = []
    needed: set[int] = set()
    for t in targets:
        h = held.get(t)
        why = whole_reason(stores.get(t, ImageStoreKind.unknown), h)
        if t in whole_for:
            why = "a partial load failed there: it gets the whole image"
        if why is not None or h is None:
            missing = tuple(range(len(chains)))
            nodes.append(NodeLayers(node=t, missing=missing, partial=False, why_whole=why))
        else:
            missing = tuple(i for i, c in enumerate(chains) if not h.holds(c))
            nodes.append(NodeLayers(node=t, missing=missing, partial=True))
        needed.update(missing)
    keep = {layers[i] for i in needed}
    drop = tuple(sorted({d for d in layers if d not in keep})) if targets else ()
    return LayerPlan(layers=tuple(layers), nodes=tuple(nodes), drop=drop)


def failed_partial(evidence: str) -> bool:
    """Did a load fail because a layer it lacked was not in the partial archive?"""
    low = evidence.lower()
    return "no such file or directory" in low and ("layer.tar" in low or "blobs/sha256" in low)
