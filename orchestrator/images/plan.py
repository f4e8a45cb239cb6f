"""The plan (pure): who holds the image, who needs it, whether its platform fits, the chain
order, whether zstd on the wire pays, and chain or fan-out."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.errors import ImageError
from orchestrator.images.layers import plan_layers
from orchestrator.images.model import (
    ZSTD_WIRE_LEVEL,
    Compression,
    NodeState,
    Problem,
    PushPlan,
    SourceImage,
    SourceKind,
)
from orchestrator.models.push import Mode
from orchestrator.probes.image import ImageStoreKind, matches_digest, same_image

MIN_RATIO = 1.15  # zstd must shrink the stream by at least this much to be worth it


def _platform_of(os_name: str | None, arch: str | None) -> str | None:
    return f"{os_name}/{arch}" if os_name and arch else None


def plan_push(
    reference: str,
    source: SourceImage,
    states: Sequence[NodeState],
    *,
    expected_digest: str | None = None,
    platform: str | None = None,
    compress: str = "auto",
) -> PushPlan:
    """Who holds the image, who needs it, in which order, with which wire format.

    Raises `ImageError` (nothing has moved yet) when the source is not the recipe's digest,
    when its platform does not fit the recipe or the nodes, or when zstd is demanded and a
    node lacks it. `states` are in rank order; the chain follows it (the source node, when
    there is one, is skipped)."""
    if expected_digest is not None and not matches_digest(source.identity, expected_digest):
        raise ImageError(
            f"{source.source.label()} holds {reference} as {source.identity.short()}, not the "
            f"recipe's digest {expected_digest}",
            where=reference,
            hint="pull or build the image the recipe names, or correct its digest",
        )
    src_platform = source.platform
    if platform and src_platform and not _same_platform(src_platform, platform):
        raise ImageError(
            f"{reference} from {source.source.label()} is {src_platform}; the recipe runs "
            f"{platform}",
            where=reference,
            hint=f"pull or build the {platform} variant (`docker pull --platform {platform} "
            f"{reference}`) and push that",
        )
    wrong = [
        f"{s.node} ({s.store.platform})"
        for s in states
        if s.reachable
        and s.store is not None
        and s.store.platform
        and src_platform
        and not _same_platform(src_platform, s.store.platform)
    ]
    if wrong:
        raise ImageError(
            f"{reference} from {source.source.label()} is {src_platform}, which "
            f"{'this node' if len(wrong) == 1 else 'these nodes'} cannot run: {', '.join(wrong)}",
            where=reference,
            hint="Sparks are linux/arm64: pull or build that variant (`docker pull --platform "
            f"linux/arm64 {reference}`); nothing was sent",
        )
    skipped, targets, unreachable = _sort_nodes(source, states)
    by_name = {s.node: s for s in states}
    lacking_zstd = [t for t in targets if not _has_zstd(by_name[t])]
    compression, reason = decide_compression(
        compress, source_has_zstd=source.has_zstd, nodes_without_zstd=lacking_zstd
    )
    layer_plan = None
    if source.layers:
        layer_plan = plan_layers(
            source.layers,
            targets,
            {s.node: s.held for s in states},
            {s.node: s.store.kind if s.store else ImageStoreKind.unknown for s in states},
        )
    return PushPlan(
        reference=reference,
        source=source,
        layers=layer_plan,
        skipped=skipped,
        targets=targets,
        unreachable=unreachable,
        compression=compression,
        compression_reason=reason,
        stores={s.node: s.store.kind.value for s in states if s.store is not None},
    )


def _sort_nodes(
    source: SourceImage, states: Sequence[NodeState]
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[Problem, ...]]:
    """Who is skipped (the source node, and those that hold the same image), who needs the
    image (in rank order), and who could not be asked."""
    skipped: list[str] = []
    targets: list[str] = []
    unreachable: list[Problem] = []
    for s in states:
        if source.source.kind is SourceKind.node and s.node == source.source.node:
            skipped.append(s.node)
        elif not s.reachable:
            unreachable.append(Problem(node=s.node, evidence=s.error or "not reachable"))
        elif s.holds_image and same_image(s.identity, source.identity):
            skipped.append(s.node)
        else:
            targets.append(s.node)
    return tuple(skipped), tuple(targets), tuple(unreachable)


def _has_zstd(state: NodeState) -> bool:
    return state.tools is not None and state.tools.zstd


def _same_platform(a: str, b: str) -> bool:
    """`linux/arm64` fits `linux/arm64/v8`; only os and architecture are compared."""
    return a.split("/")[:2] == b.split("/")[:2]


def decide_compression(
    mode: str, *, source_has_zstd: bool, nodes_without_zstd: Sequence[str]
) -> tuple[Compression, str]:
    """zstd on the wire when asked for or when it pays: `docker save` writes layers
    uncompressed and real content shrinks ~2.5-2.7x with `zstd -3` (docs/images.md), far faster
    than a link moves it. It needs zstd at both ends of every hop."""
    if mode == "none":
        return Compression.none, "compression off (--compress none)"
    missing = ([] if source_has_zstd else ["the source"]) + list(nodes_without_zstd)
    if missing:
        if mode == "zstd":
            raise ImageError(
                f"--compress zstd, but zstd is missing on {', '.join(missing)}",
                hint="install zstd there (`apt install zstd`) or use --compress auto",
            )
        return Compression.none, f"no zstd on {', '.join(missing)}: sending uncompressed"
    if mode == "zstd":
        return Compression.zstd, f"zstd -{ZSTD_WIRE_LEVEL} on the wire (--compress zstd)"
    return (
        Compression.zstd,
        f"zstd -{ZSTD_WIRE_LEVEL} on the wire: docker save writes layers uncompressed",
    )


def compression_pays(raw: int, compressed: int) -> tuple[bool, str]:
    """Judge a sample of the stream: below MIN_RATIO the CPU buys nothing (already-compressed
    archives, e.g. a .tar.gz)."""
    if raw <= 0 or compressed <= 0:
        return True, "no sample"
    ratio = raw / compressed
    if ratio < MIN_RATIO:
        return False, f"the stream compresses only {ratio:.2f}x: sending it as it is"
    return True, (
        f"zstd -{ZSTD_WIRE_LEVEL} on the wire: a {raw >> 20} MiB sample compressed {ratio:.1f}x"
    )


def choose_mode(
    requested: str, *, local: bool, broken_hops: Sequence[tuple[str, str, str]]
) -> tuple[Mode, str]:
    """Chain when every hop works; else a bounded fan-out from the controller, with why."""
    if requested == "fanout":
        return Mode.fanout, "fan-out from the controller (--mode fanout)"
    if local:
        return Mode.fanout, "fan-out: the simulated cluster's nodes have no SSH between them"
    if broken_hops:
        a, b, why = broken_hops[0]
        more = f" (and {len(broken_hops) - 1} more hops)" if len(broken_hops) > 1 else ""
        if requested == "chain":
            raise ImageError(
                f"--mode chain, but {a} cannot open an SSH session on {b}: {why}{more}",
                hint="give the nodes keys for each other (and known_hosts), or use --mode auto",
            )
        return (
            Mode.fanout,
            f"fan-out from the controller: {a} cannot reach {b} over SSH: {why}{more}",
        )
    return Mode.chain, "pipelined chain: every node forwards the stream to the next while loading"
