"""What a push talks about: the source, each node's state, the plan, a hop's outcome, the report,
the options and the progress events (pydantic and frozen dataclasses; no I/O). What the weights
push reports alike (a node as asked, a round, a node's row, the mode) is in `models/push.py`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from pydantic import Field

from orchestrator.errors import ImageError
from orchestrator.images.layers import LayerPlan
from orchestrator.models.base import StrictModel
from orchestrator.models.inventory import Node
from orchestrator.models.push import AskedNode, Mode, PushedNode, PushRound
from orchestrator.probes.exec_ready import DEFAULT_WINDOW_S, ExecReadiness
from orchestrator.probes.image import (
    ChainTools,
    HeldLayers,
    ImageFacts,
    ImageIdentity,
    ImageStore,
    ImageStoreKind,
    identity_of,
)
from orchestrator.transport import ConnectOptions, Transport


class SourceKind(StrEnum):
    controller = "controller"  # `docker save` of the controller's daemon
    tar = "tar"  # an archive on the controller (`docker save -o`, maybe gzip'd)
    node = "node"  # a node that holds the image (e.g. after `docker pull` on the head)


#: The wire's zstd level (controller and node sources alike; the nodes' `zstd -d` reads any).
#: -3, not -1: 9% fewer bytes on the bench's shared libraries (115 vs 127 MB of 314 MB) for
#: 1.7x the CPU of -1, which `-T0` spreads over the source's cores; on a link-bound chain the
#: bytes are the time. `--adapt=min=1,max=9` was tried and lost (docs/images.md).
ZSTD_WIRE_LEVEL = 3


class Source(StrictModel):
    """Where the bytes come from, as the user asked."""

    kind: SourceKind = SourceKind.controller
    path: Path | None = None
    node: str | None = None

    def label(self) -> str:
        if self.kind is SourceKind.tar:
            return f"tarball {self.path}"
        if self.kind is SourceKind.node:
            return f"node {self.node}"
        return "the controller's docker"


class SourceImage(StrictModel):
    """What the source holds: the identity every node must end with, and its platform."""

    source: Source
    reference: str
    identity: ImageIdentity
    os: str | None = None
    architecture: str | None = None
    size_bytes: int | None = Field(default=None, description="raw stream estimate (tar bytes)")
    has_zstd: bool = Field(default=False, description="can the source side compress?")
    layers: tuple[str, ...] = Field(default=(), description="diff ids, base first")
    layer_sizes: tuple[int, ...] | None = Field(default=None, description="bytes, base first")

    @property
    def platform(self) -> str | None:
        return f"{self.os}/{self.architecture}" if self.os and self.architecture else None


class NodeState(AskedNode):
    """One node before (or after) a push: its store, the image it holds, its tools."""

    store: ImageStore | None = None
    image: ImageFacts | None = None
    tools: ChainTools | None = None
    held: HeldLayers | None = Field(default=None, description="layer chains held; None: unknown")

    @property
    def identity(self) -> ImageIdentity:
        if self.image is None or not self.image.present:
            return ImageIdentity()
        kind = self.store.kind if self.store else ImageStoreKind.unknown
        return identity_of(self.image, kind)

    @property
    def holds_image(self) -> bool:
        return self.image is not None and self.image.present


class Compression(StrEnum):
    zstd = "zstd"
    none = "none"


class Problem(StrictModel):
    node: str
    evidence: str


class PushPlan(StrictModel):
    """What a push will do, decided before any byte moves."""

    reference: str
    source: SourceImage
    skipped: tuple[str, ...] = Field(description="nodes that already hold the image")
    targets: tuple[str, ...] = Field(description="nodes that need it, in chain order")
    unreachable: tuple[Problem, ...] = Field(description="nodes that could not be asked")
    compression: Compression
    compression_reason: str
    stores: dict[str, str] = Field(default_factory=dict, description="node -> image store kind")
    layers: LayerPlan | None = Field(default=None, description="what each target lacks")


class HopStatus(StrEnum):
    loaded = "loaded"
    failed = "failed"  # the node's own failure: load error, unpack error, unreachable
    starved = "starved"  # an upstream hop broke; the node never got the whole stream
    stalled = "stalled"  # the round made no progress at all and was stopped


class HopOutcome(StrictModel):
    node: str
    status: HopStatus
    evidence: str = ""
    received: int | None = None
    ended: bool = False  # the node's script said `end` (nothing left running there)
    load_at: float | None = Field(default=None, description="s since the push began")


class NodeAction(StrEnum):
    skipped = "skipped"
    loaded = "loaded"
    failed = "failed"


class NodeResult(PushedNode):
    """One row of the summary."""

    action: NodeAction
    verified: bool | None = None
    identity: str | None = None
    store: str | None = None
    probe: ExecReadiness | None = None
    error: str | None = None
    note: str | None = None
    image_id: str | None = Field(default=None, description="the node's Id for the image")
    config_digest: str | None = Field(default=None, description="None: the store hides it")
    layers_missing: int | None = Field(default=None, description="layers it lacked at the plan")
    partial: bool | None = Field(default=None, description="sent only what it lacked?")
    first_byte_s: float | None = Field(
        default=None, description="push start to its first byte received (1 s resolution)"
    )
    last_byte_s: float | None = Field(
        default=None, description="push start to its last byte received (1 s resolution)"
    )


class RoundReport(PushRound):
    raw_bytes: int | None = None
    layers_sent: int | None = Field(default=None, description="None: the whole archive")
    layers_dropped: int | None = None
    dropped_bytes: int | None = Field(default=None, description="raw bytes left out")


class PushReport(StrictModel):
    reference: str
    source: str
    identity: str
    compression: Compression
    compression_reason: str
    mode: Mode | None = Field(default=None, description="the first round's mode; None: no send")
    mode_reason: str | None = None
    rounds: tuple[RoundReport, ...] = ()
    nodes: tuple[NodeResult, ...]
    layer_plan: str | None = Field(default=None, description="what the first round sent")
    phases: dict[str, float] = Field(
        default_factory=dict,
        description="seconds from the start at which each step ended: probed, planned, "
        "hops_checked, source_open (round 1), round_N, verified_N, ready",
    )
    seconds: float

    @property
    def failed(self) -> list[NodeResult]:
        return [
            n
            for n in self.nodes
            if n.action is NodeAction.failed or (n.probe is not None and not n.probe.ready)
        ]

    @property
    def ok(self) -> bool:
        return not self.failed

    def raise_for_failures(self) -> None:
        bad = self.failed
        if not bad:
            return
        lines = []
        for n in bad:
            if n.action is NodeAction.failed:
                lines.append(f"{n.node}: {n.error or 'failed'}")
            elif n.probe is not None:
                lines.append(f"{n.node}: not ready to exec the image: {n.probe.summary()}")
        names = ", ".join(n.node for n in bad)
        probe_only = all(n.action is not NodeAction.failed for n in bad)
        raise ImageError(
            (
                f"{len(bad)} of {len(self.nodes)} nodes cannot run {self.reference}: {names}"
                if probe_only
                else f"{self.reference} did not reach {len(bad)} of {len(self.nodes)} nodes: "
                f"{names}"
            ),
            hint=(
                "the exec-readiness probe kept failing there; `cluster image probe "
                f"{self.reference}` retries it"
                if probe_only
                else "fix the nodes named (link, disk, daemon) and push again: nodes that "
                "hold the image are skipped"
            ),
            more=tuple(lines),
        )


@dataclass(frozen=True)
class PushOptions:
    compress: str = "auto"  # auto | zstd | none
    mode: str = "auto"  # auto | chain | fanout
    fanout_streams: int = 4
    # How the push reaches the nodes: the caller's whole ConnectOptions (host-key policy,
    # keepalives, channel budget), not a timeout the push would rebuild them from.
    connect: ConnectOptions = field(default_factory=ConnectOptions)
    stall_timeout_s: float = 15.0  # a hop that moves nothing this long is dead
    max_rounds: int = 3
    probe: bool = True  # exec-readiness on every node that loaded
    probe_all: bool = False  # ... and on the nodes that already held it (what boot wants)
    ready_window_s: float = DEFAULT_WINDOW_S
    ready_command: tuple[str, ...] = ("/bin/sh", "-c", "true")
    expected_digest: str | None = None
    platform: str | None = None

    @property
    def connect_timeout_s(self) -> float:
        return self.connect.connect_timeout_s


@dataclass(frozen=True)
class PushEvent:
    """What the push is doing, for a progress display. `kind` is one of: plan, round,
    progress (node, wire bytes), source (wire and raw bytes sent, raw total estimate), loaded
    (node, ok), verify (node, ok), probe (node, readiness), note (text)."""

    kind: str
    node: str | None = None
    round: int = 0
    wire_bytes: int | None = None
    raw_bytes: int | None = None
    total_estimate: int | None = None
    ok: bool | None = None
    text: str = ""
    plan: PushPlan | None = None
    readiness: ExecReadiness | None = None


EventSink = Callable[[PushEvent], None]


TransportFactory = Callable[[Node], Transport]
