"""Put one image on every node, fast, and prove each node can run it.

Pure core, thin edge:

* **plan** (`plan_push`, pure): who holds the image already (compared on what survives `docker
  save | docker load`, per node store: `probes/image.py`), who needs it, whether its platform
  fits the nodes (refused before any byte moves), the chain order, and whether zstd on the wire
  pays. `judge_round` (pure) reads what the chain said and names, per node, loaded / failed
  (with the evidence) / starved (an upstream hop broke); `next_round` (pure) picks what to
  re-send and from which node.
* **execute** (`push_image`, thin): a **pipelined chain**. The source (the controller's
  `docker save`, a tarball, or a node that holds the image) streams once into the first node;
  each node feeds its own `docker load` and forwards the same bytes to the next node while they
  arrive (`images_chain.sh`, over SSH node to node), so the last node's load starts a fraction
  of a second after the first's and the whole push costs about one copy over one link. When
  nodes cannot open SSH sessions on each other, it falls back to a bounded **fan-out** from the
  controller and says so. After every round each node is re-probed (`docker image inspect`):
  only a node holding the expected identity counts. Nodes starved by a broken hop are re-sent
  from a node that succeeded, and only those.
* **exec-readiness** (`probe_exec_ready`): the throwaway-container probe of
  `probes/exec_ready.py` on every node that loaded, retried through the lazy-unpack window.

`cluster boot` calls `push_image(inventory, recipe.image.reference, options=PushOptions(
expected_digest=recipe.image.digest, platform=recipe.image.platform, ready_window_s=recipe.
timeouts.exec_ready))` and then `report.raise_for_failures()`; `probe_exec_ready` alone when
nothing needs pushing.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import getpass
import hashlib
import hmac
import itertools
import json
import os
import re
import secrets
import tarfile
import time
from base64 import b64decode
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.errors import ClusterError, CommandTimeout, ImageError
from orchestrator.fanout import settle
from orchestrator.models.inventory import Connection, Inventory, Node
from orchestrator.probes.exec_ready import DEFAULT_WINDOW_S, ExecReadiness, wait_exec_ready
from orchestrator.probes.host import oci_arch
from orchestrator.probes.image import (
    CHAIN_TOOLS,
    ChainTools,
    ImageFacts,
    ImageIdentity,
    ImageStore,
    ImageStoreKind,
    content_key,
    identity_of,
    image_inspect_probe,
    image_store_probe,
    matches_digest,
    same_image,
)
from orchestrator.transport import ConnectOptions, Transport, transport_for
from orchestrator.transport.base import CommandResult, LineSplitter
from orchestrator.transport.local import LocalTransport
from orchestrator.transport.pipe import Pipe, PipeOptions, open_pipe

CHUNK = 1 << 20
PIPE_BYTES = 1 << 20  # F_SETPIPE_SZ for the controller's own pipes
SAMPLE_BYTES = 16 << 20
MIN_RATIO = 1.15  # zstd must shrink the stream by at least this much to be worth it
PROTOCOL = "@@cluster-image"
UNPACK_ERROR = "Error unpacking image"
MAX_KNOWN_HOSTS = 32 << 10  # the chain's command line must stay well under 128 KiB per argument


def chain_script() -> str:
    """The static shell script every node runs (package data)."""
    return resources.files("orchestrator").joinpath("images_chain.sh").read_text(encoding="utf-8")


def docker_argv(node: Node) -> tuple[str, ...]:
    """`docker`, aimed at the node's daemon when the inventory names one (as `launch.py`)."""
    return ("docker", "--host", node.docker_host) if node.docker_host else ("docker",)


async def run_bounded(transport: Transport, argv: Sequence[str], timeout_s: float) -> CommandResult:
    """`transport.run` with a deadline that also covers opening the session: on a connection
    whose link died, asyncssh would otherwise wait for its keepalive (a minute) first."""
    try:
        return await asyncio.wait_for(transport.run(argv, timeout_s=timeout_s), timeout_s + 2)
    except TimeoutError:
        raise CommandTimeout(
            node=transport.node.name, argv=list(argv), timeout_s=timeout_s
        ) from None


# ============================================================================================
# Models
# ============================================================================================


class SourceKind(StrEnum):
    controller = "controller"  # `docker save` of the controller's daemon
    tar = "tar"  # an archive on the controller (`docker save -o`, maybe gzip'd)
    node = "node"  # a node that holds the image (e.g. after `docker pull` on the head)


class Source(BaseModel):
    """Where the bytes come from, as the user asked."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: SourceKind = SourceKind.controller
    path: Path | None = None
    node: str | None = None

    def label(self) -> str:
        if self.kind is SourceKind.tar:
            return f"tarball {self.path}"
        if self.kind is SourceKind.node:
            return f"node {self.node}"
        return "the controller's docker"


class SourceImage(BaseModel):
    """What the source holds: the identity every node must end with, and its platform."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: Source
    reference: str
    identity: ImageIdentity
    os: str | None = None
    architecture: str | None = None
    size_bytes: int | None = Field(default=None, description="raw stream estimate (tar bytes)")
    has_zstd: bool = Field(default=False, description="can the source side compress?")

    @property
    def platform(self) -> str | None:
        return f"{self.os}/{self.architecture}" if self.os and self.architecture else None


class NodeState(BaseModel):
    """One node before (or after) a push: its store, the image it holds, its tools."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    rank: int
    reachable: bool
    error: str | None = None
    store: ImageStore | None = None
    image: ImageFacts | None = None
    tools: ChainTools | None = None

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


class Mode(StrEnum):
    chain = "chain"
    fanout = "fanout"


class Problem(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    evidence: str


class PushPlan(BaseModel):
    """What a push will do, decided before any byte moves."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reference: str
    source: SourceImage
    skipped: tuple[str, ...] = Field(description="nodes that already hold the image")
    targets: tuple[str, ...] = Field(description="nodes that need it, in chain order")
    unreachable: tuple[Problem, ...] = Field(description="nodes that could not be asked")
    compression: Compression
    compression_reason: str
    stores: dict[str, str] = Field(default_factory=dict, description="node -> image store kind")


# ============================================================================================
# Plan (pure)
# ============================================================================================


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
    by_name = {s.node: s for s in states}
    lacking_zstd = [t for t in targets if not _has_zstd(by_name[t])]
    compression, reason = decide_compression(
        compress, source_has_zstd=source.has_zstd, nodes_without_zstd=lacking_zstd
    )
    return PushPlan(
        reference=reference,
        source=source,
        skipped=tuple(skipped),
        targets=tuple(targets),
        unreachable=tuple(unreachable),
        compression=compression,
        compression_reason=reason,
        stores={s.node: s.store.kind.value for s in states if s.store is not None},
    )


def _has_zstd(state: NodeState) -> bool:
    return state.tools is not None and state.tools.zstd


def _same_platform(a: str, b: str) -> bool:
    """`linux/arm64` fits `linux/arm64/v8`; only os and architecture are compared."""
    return a.split("/")[:2] == b.split("/")[:2]


def decide_compression(
    mode: str, *, source_has_zstd: bool, nodes_without_zstd: Sequence[str]
) -> tuple[Compression, str]:
    """zstd on the wire when asked for or when it pays: `docker save` writes layers
    uncompressed and real content shrinks ~2.7x with `zstd -1` (TESTBED.md), far faster than a
    link moves it. It needs zstd at both ends of every hop."""
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
        return Compression.zstd, "zstd -1 on the wire (--compress zstd)"
    return Compression.zstd, "zstd -1 on the wire: docker save writes layers uncompressed"


def compression_pays(raw: int, compressed: int) -> tuple[bool, str]:
    """Judge a sample of the stream: below MIN_RATIO the CPU buys nothing (already-compressed
    archives, e.g. a .tar.gz)."""
    if raw <= 0 or compressed <= 0:
        return True, "no sample"
    ratio = raw / compressed
    if ratio < MIN_RATIO:
        return False, f"the stream compresses only {ratio:.2f}x: sending it as it is"
    return True, f"zstd -1 on the wire: a {raw >> 20} MiB sample compressed {ratio:.1f}x"


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


# ============================================================================================
# The chain's words (pure)
# ============================================================================================


@dataclass(frozen=True)
class ChainEvent:
    """One `@@cluster-image EVENT NODE ...` line."""

    event: str
    node: str
    fields: tuple[str, ...]
    text: str  # everything after NODE, verbatim


def parse_chain_line(line: str) -> ChainEvent | None:
    if not line.startswith(PROTOCOL + " "):
        return None
    rest = line[len(PROTOCOL) + 1 :]
    parts = rest.split(" ", 2)
    if len(parts) < 2:
        return None
    text = parts[2] if len(parts) > 2 else ""
    return ChainEvent(event=parts[0], node=parts[1], fields=tuple(text.split()), text=text)


class HopStatus(StrEnum):
    loaded = "loaded"
    failed = "failed"  # the node's own failure: load error, unpack error, unreachable
    starved = "starved"  # an upstream hop broke; the node never got the whole stream
    stalled = "stalled"  # the round made no progress at all and was stopped


class HopOutcome(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    status: HopStatus
    evidence: str = ""
    received: int | None = None
    ended: bool = False  # the node's script said `end` (nothing left running there)
    load_at: float | None = Field(default=None, description="s since the push began")


@dataclass
class RoundLog:
    """What one round heard: the chain's events (with arrival times) and the first hop."""

    events: list[tuple[float, ChainEvent]] = field(default_factory=list)
    first_hop_rc: dict[str, int | None] = field(default_factory=dict)
    first_hop_stderr: dict[str, str] = field(default_factory=dict)
    stalled: bool = False
    source_error: str | None = None


def _safe_int(s: str) -> int | None:
    try:
        return int(s)
    except ValueError:
        return None


def judge_round(order: Sequence[str], log: RoundLog, *, upstream_label: str) -> list[HopOutcome]:
    """Per node of `order` (chain order), what happened, from the events alone.

    A node whose `load` succeeded (exit 0 and no `Error unpacking image`) loaded. A node whose
    load failed although the stream reached it whole failed on its own. A node that never
    reported, right after a hop that failed, is the broken hop's far end: failed, with the
    sender's evidence. Everyone after a break is starved: they lack the image through no fault
    of their own and may be re-sent."""
    per: dict[str, list[tuple[float, ChainEvent]]] = {n: [] for n in order}
    hop_fail: dict[str, str] = {}  # receiving node -> evidence
    hoperr: dict[str, list[str]] = {}
    for at, ev in log.events:
        if ev.node in per:
            per[ev.node].append((at, ev))
        if ev.event == "hoperr":
            hoperr.setdefault(ev.node, []).append(ev.text)
    for _at, ev in log.events:
        if ev.event == "hop" and len(ev.fields) >= 2:
            nxt, hop_rc = ev.fields[0], ev.fields[1]
            if hop_rc != "0":
                tail = "; ".join(hoperr.get(ev.node, [])[-3:])
                hop_fail[nxt] = f"ssh from {ev.node} to {nxt} failed (exit {hop_rc})" + (
                    f": {tail}" if tail else ""
                )
    if not log.stalled:
        for node, rc in log.first_hop_rc.items():
            if rc != 0:
                err = log.first_hop_stderr.get(node, "").strip()
                last = err.splitlines()[-1] if err else ""
                hop_fail.setdefault(
                    node,
                    f"stream from {upstream_label} to {node} failed (exit {rc})"
                    + (f": {last}" if last else ""),
                )
    out: list[HopOutcome] = []
    broke_at: str | None = None
    sent_bytes = _source_bytes(log)
    for node in order:
        evs = [e for _, e in per[node]]
        load = next((e for e in evs if e.event == "load"), None)
        load_at = next((at for at, e in per[node] if e.event == "load"), None)
        recv = next((_safe_int(e.fields[0]) for e in evs if e.event == "recv" and e.fields), None)
        ended = any(e.event == "end" for e in evs)
        loadout = [e.text for e in evs if e.event == "loadout"]
        errors = [e.text for e in evs if e.event == "error"]
        unpack = [line for line in loadout if UNPACK_ERROR in line]
        if load is not None and load.fields and load.fields[0] == "0" and not unpack:
            out.append(
                HopOutcome(
                    node=node,
                    status=HopStatus.loaded,
                    received=recv,
                    ended=ended,
                    load_at=load_at,
                )
            )
            continue
        whole = recv is not None and sent_bytes is not None and recv >= sent_bytes
        if load is not None and (unpack or broke_at is None or whole):
            load_rc = load.fields[0] if load.fields else "?"
            what = unpack[-1] if unpack else (loadout[-1] if loadout else f"exit {load_rc}")
            out.append(
                HopOutcome(
                    node=node,
                    status=HopStatus.failed,
                    evidence=f"docker load exited {load_rc}: {what}"
                    if not unpack
                    else f"docker load printed `{what}` (exit {load_rc})",
                    received=recv,
                    ended=ended,
                    load_at=load_at,
                )
            )
            continue
        if errors:
            out.append(
                HopOutcome(node=node, status=HopStatus.failed, evidence=errors[-1], ended=ended)
            )
            broke_at = broke_at or node
            continue
        if node in hop_fail and broke_at is None:
            broke_at = node
            out.append(
                HopOutcome(
                    node=node, status=HopStatus.failed, evidence=hop_fail[node], received=recv
                )
            )
            continue
        if log.stalled and broke_at is None:
            out.append(
                HopOutcome(
                    node=node,
                    status=HopStatus.stalled,
                    evidence="no byte moved anywhere for the stall window; the round was stopped",
                    received=recv,
                    ended=ended,
                )
            )
            continue
        if log.source_error:
            out.append(
                HopOutcome(
                    node=node,
                    status=HopStatus.failed,
                    evidence=log.source_error,
                    received=recv,
                    ended=ended,
                )
            )
            continue
        cause = broke_at or "an earlier hop"
        if broke_at is None:
            broke_at = node
        out.append(
            HopOutcome(
                node=node,
                status=HopStatus.starved,
                evidence=f"the stream stopped upstream ({cause})"
                if cause != node
                else "the stream never arrived whole and no hop reported why",
                received=recv,
                ended=ended,
            )
        )
    return out


def _source_bytes(log: RoundLog) -> int | None:
    for _, ev in log.events:
        if ev.event == "sent" and ev.fields:
            return _safe_int(ev.fields[0])
    return None


def next_round(
    order: Sequence[str],
    verified: set[str],
    starved: Sequence[str],
) -> tuple[str | None, list[str]]:
    """Which node re-sends, and to whom: the starved nodes, from the nearest node upstream of
    the first of them that holds the verified image (any verified node if none is upstream;
    None: the original source)."""
    todo = [n for n in order if n in set(starved)]
    if not todo:
        return None, []
    first = order.index(todo[0])
    upstream = [n for n in order[:first] if n in verified]
    if upstream:
        return upstream[-1], todo
    anywhere = [n for n in order if n in verified]
    return (anywhere[0] if anywhere else None), todo


def filter_known_hosts(text: str, hosts: Iterable[tuple[str, int]]) -> str:
    """The known_hosts lines that can vouch for `hosts` (address, port): plain, wildcard and
    hashed (`|1|salt|hmac`) patterns, and @cert-authority / @revoked markers."""
    names = [h if p == 22 else f"[{h}]:{p}" for h, p in hosts]
    kept: list[str] = []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        words = s.split()
        patterns = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        if any(_host_matches(pat, name) for pat in patterns.split(",") for name in names):
            kept.append(s)
    return "\n".join(kept)


def _host_matches(pattern: str, name: str) -> bool:
    if pattern.startswith("|1|"):
        try:
            _, _, salt, digest = pattern.split("|", 3)
            mac = hmac.new(b64decode(salt), name.encode(), hashlib.sha1).digest()
            return hmac.compare_digest(mac, b64decode(digest))
        except (ValueError, TypeError):
            return False
    if pattern.startswith("!"):
        return False
    # OpenSSH patterns know only * and ?; brackets are literal (`[host]:port`).
    regex = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    return re.fullmatch(regex, name) is not None


# ============================================================================================
# Archives (pure over a file)
# ============================================================================================


def _familiar(ref: str) -> str:
    """`docker.io/library/ubuntu` -> `ubuntu:latest`, the way RepoTags spell names."""
    name = ref
    for prefix in ("docker.io/library/", "index.docker.io/library/", "docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    if "@" not in name and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name


def read_archive(path: Path, reference: str) -> SourceImage:
    """The identity and platform of `reference` inside a `docker save` archive (plain or
    compressed tar), from its manifest.json and the image config, without unpacking layers."""
    try:
        with tarfile.open(path, "r:*") as tar:
            manifest_member = tar.extractfile("manifest.json")
            if manifest_member is None:
                raise KeyError("manifest.json")
            manifest = json.loads(manifest_member.read())
            entry = _pick_manifest(manifest, reference, path)
            config_member = tar.extractfile(str(entry["Config"]))
            if config_member is None:
                raise KeyError(str(entry["Config"]))
            config_bytes = config_member.read()
    except (OSError, tarfile.TarError, KeyError, json.JSONDecodeError) as exc:
        raise ImageError(
            f"{path} is not a readable `docker save` archive: {exc}",
            where=str(path),
            hint="make it with `docker save -o FILE IMAGE` (gzip is fine)",
        ) from exc
    config = json.loads(config_bytes)
    layers = [str(x) for x in (config.get("rootfs") or {}).get("diff_ids") or []]
    arch = config.get("architecture") or None
    os_name = config.get("os") or None
    return SourceImage(
        source=Source(kind=SourceKind.tar, path=path),
        reference=reference,
        identity=ImageIdentity(
            config_digest="sha256:" + hashlib.sha256(config_bytes).hexdigest(),
            content_key=content_key(
                os=os_name, architecture=arch, layers=layers, config=config.get("config")
            ),
        ),
        os=os_name,
        architecture=_oci(arch),
        size_bytes=path.stat().st_size,
    )


def _oci(arch: str | None) -> str | None:
    return oci_arch(arch) if arch else None


def _pick_manifest(manifest: Any, reference: str, path: Path) -> dict[str, Any]:
    if not isinstance(manifest, list) or not manifest:
        raise KeyError("manifest.json lists no image")
    want = _familiar(reference)
    for entry in manifest:
        if isinstance(entry, dict) and want in [_familiar(t) for t in entry.get("RepoTags") or []]:
            return entry
    tags = [t for e in manifest if isinstance(e, dict) for t in e.get("RepoTags") or []]
    raise ImageError(
        f"{path} does not hold {reference}; it holds {', '.join(tags) or 'untagged images'}",
        where=str(path),
        hint="push one of those names, or re-save the archive with the image you mean",
    )


# ============================================================================================
# Reports
# ============================================================================================


class NodeAction(StrEnum):
    skipped = "skipped"
    loaded = "loaded"
    failed = "failed"


class NodeResult(BaseModel):
    """One row of the summary."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    rank: int
    action: NodeAction
    seconds: float | None = Field(default=None, description="push start to this node's load")
    received_bytes: int | None = None
    sends: int = Field(default=0, description="how many times the stream was sent to it")
    sent_from: str | None = None
    verified: bool | None = None
    identity: str | None = None
    store: str | None = None
    probe: ExecReadiness | None = None
    error: str | None = None
    note: str | None = None


class RoundReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    round: int
    source: str
    mode: Mode
    mode_reason: str
    targets: tuple[str, ...]
    seconds: float
    wire_bytes: int | None = None
    raw_bytes: int | None = None


class PushReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    reference: str
    source: str
    identity: str
    compression: Compression
    compression_reason: str
    mode: Mode | None = Field(default=None, description="the first round's mode; None: no send")
    mode_reason: str | None = None
    rounds: tuple[RoundReport, ...] = ()
    nodes: tuple[NodeResult, ...]
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


# ============================================================================================
# Execute (thin)
# ============================================================================================


@dataclass(frozen=True)
class PushOptions:
    compress: str = "auto"  # auto | zstd | none
    mode: str = "auto"  # auto | chain | fanout
    fanout_streams: int = 4
    connect_timeout_s: float = 10.0
    stall_timeout_s: float = 15.0  # a hop that moves nothing this long is dead
    max_rounds: int = 3
    probe: bool = True  # exec-readiness on every node that loaded
    probe_all: bool = False  # ... and on the nodes that already held it (what boot wants)
    ready_window_s: float = DEFAULT_WINDOW_S
    ready_command: tuple[str, ...] = ("/bin/sh", "-c", "true")
    expected_digest: str | None = None
    platform: str | None = None


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


def _controller_node() -> Node:
    return Node(
        name="controller",
        address="localhost",
        user=getpass.getuser(),
        rank=0,
        fabric_iface="lo",
    )


async def _ask_state(
    node: Node, transport: Transport, reference: str, timeout_s: float
) -> NodeState:
    docker = docker_argv(node)
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


async def gather_states(
    inventory: Inventory,
    reference: str,
    transports: dict[str, Transport],
    *,
    nodes: Sequence[Node] | None = None,
    timeout_s: float = 20.0,
) -> list[NodeState]:
    """Inspect the image, the store and the chain's tools on every node at once (rank order)."""
    chosen = list(nodes or inventory.nodes)
    outcomes = await settle(
        chosen, lambda n: _ask_state(n, transports[n.name], reference, timeout_s)
    )
    states = []
    for o in outcomes:
        if o.value is not None:
            states.append(o.value)
        else:
            states.append(
                NodeState(
                    node=o.node.name,
                    rank=o.node.rank,
                    reachable=False,
                    error=f"{type(o.error).__name__}: {o.error}",
                )
            )
    return states


async def _which(tool: str) -> bool:
    proc = await asyncio.create_subprocess_exec(
        "sh",
        "-c",
        'command -v "$1" >/dev/null 2>&1',
        "which",
        tool,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    return await proc.wait() == 0


async def resolve_source(
    inventory: Inventory,
    reference: str,
    source: Source,
    states: Sequence[NodeState],
    *,
    timeout_s: float = 60.0,
) -> SourceImage:
    """What the source holds. Raises ImageError when it does not hold `reference`."""
    if source.kind is SourceKind.tar:
        assert source.path is not None
        if not source.path.is_file():
            raise ImageError(f"{source.path}: no such file", where=str(source.path))
        img = await asyncio.to_thread(read_archive, source.path, reference)
        return img.model_copy(update={"has_zstd": await _which("zstd")})
    if source.kind is SourceKind.node:
        state = next((s for s in states if s.node == source.node), None)
        if state is None:
            raise ImageError(
                f"--from-node {source.node}: no such node in {inventory.path}",
                hint="name a host of the inventory (`cluster inventory show`)",
            )
        if not state.reachable:
            raise ImageError(
                f"--from-node {source.node} cannot be asked: {state.error}",
                where=f"node {source.node}",
            )
        if not state.holds_image or state.image is None:
            raise ImageError(
                f"--from-node {source.node} does not hold {reference}",
                where=f"node {source.node}",
                hint=f"`docker pull {reference}` there first, or push from the controller",
            )
        return SourceImage(
            source=source,
            reference=reference,
            identity=state.identity,
            os=state.image.os,
            architecture=state.image.architecture,
            size_bytes=state.image.size,
            has_zstd=bool(state.tools and state.tools.zstd),
        )
    local = LocalTransport(_controller_node())
    inspect_p = image_inspect_probe(reference)
    store_p = image_store_probe()
    try:
        inspect_r, store_r = await asyncio.gather(
            local.run(inspect_p.argv, timeout_s=timeout_s),
            local.run(store_p.argv, timeout_s=timeout_s),
        )
        store = store_p.read(store_r)
        if not store.reachable:
            raise ImageError(
                f"the controller's docker does not answer: {store.error}",
                hint="start it, or push from a tarball (--from-tar) or a node (--from-node)",
            )
        facts = inspect_p.read(inspect_r)
    except ClusterError as exc:
        if isinstance(exc, ImageError):
            raise
        raise ImageError(
            f"cannot ask the controller's docker about {reference}: {exc.line()}",
            hint="push from a tarball (--from-tar FILE) or a node (--from-node NODE)",
        ) from exc
    if not facts.present:
        raise ImageError(
            f"the controller's docker has no image {reference}",
            hint=f"`docker pull {reference}` here, or --from-tar / --from-node",
        )
    return SourceImage(
        source=source,
        reference=reference,
        identity=identity_of(facts, store.kind),
        os=facts.os,
        architecture=facts.architecture,
        size_bytes=facts.size,
        has_zstd=await _which("zstd"),
    )


def _has_ssh(state: NodeState) -> bool:
    return state.tools is None or "ssh" in state.tools.found


def _quint(node: Node) -> list[str]:
    return [node.name, node.user, node.address, str(node.port), node.docker_host or "-"]


@dataclass
class _Ctx:
    inventory: Inventory
    reference: str
    options: PushOptions
    transports: dict[str, Transport]
    emit: EventSink
    started: float
    script: str
    tag_base: str
    known_hosts_text: str

    def node(self, name: str) -> Node:
        return self.inventory.node(name)

    def pipe_options(self) -> PipeOptions:
        ai, ac = _alive(self.options.stall_timeout_s)
        return PipeOptions(
            connect_timeout_s=self.options.connect_timeout_s, alive_interval_s=ai, alive_count=ac
        )

    def common(self, tag: str, compression: Compression, image: str = "-") -> list[str]:
        ai, ac = _alive(self.options.stall_timeout_s)
        return [
            tag,
            compression.value,
            str(max(1, round(self.options.connect_timeout_s))),
            str(ai),
            str(ac),
            self.known_hosts_text,
            image,
        ]

    def argv(self, mode: str, args: Sequence[str]) -> list[str]:
        return ["sh", "-c", self.script, "cluster-image", self.script, mode, *args]


def _alive(stall_s: float) -> tuple[int, int]:
    """ServerAliveInterval/CountMax whose product is about the stall timeout."""
    count = 3
    return max(1, round(stall_s / count)), count


async def _hop_check(ctx: _Ctx, pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """Can each sender open an SSH session on its receiver? Returns the broken hops."""
    tag = f"{ctx.tag_base}-hc"

    async def one(pair: tuple[str, str]) -> tuple[str, str, str] | None:
        a, b = pair
        args = [*ctx.common(tag, Compression.none), *_quint(ctx.node(a)), *_quint(ctx.node(b))]
        try:
            r = await run_bounded(
                ctx.transports[a], ctx.argv("hopcheck", args), ctx.options.connect_timeout_s + 20
            )
        except ClusterError as exc:
            return a, b, exc.line()
        events = [e for e in map(parse_chain_line, r.stdout.splitlines()) if e is not None]
        check = next((e for e in events if e.event == "hopcheck"), None)
        if check is not None and check.fields[-1:] == ("0",):
            return None
        errs = [e.text for e in events if e.event in ("hoperr", "error")]
        return a, b, (errs[-1] if errs else f"exit {r.exit_status}: {r.stderr.strip()[-200:]}")

    results = await asyncio.gather(*(one(p) for p in pairs))
    return [r for r in results if r is not None]


class _Progress:
    """Byte counters of one round, and when anything last moved."""

    def __init__(self) -> None:
        self.raw = 0
        self.wire = 0
        self.last_move = time.monotonic()
        self.node_bytes: dict[str, int] = {}

    def moved(self) -> None:
        self.last_move = time.monotonic()


async def _read_events(
    ctx: _Ctx,
    pipe: Pipe,
    log: RoundLog,
    prog: _Progress,
    rnd: int,
) -> None:
    """Read one pipe's stdout (the chain's words) and stderr (the first hop's own evidence)."""

    async def out() -> None:
        splitter = LineSplitter()
        while chunk := await pipe.stdout.read(65536):
            for line, _end in splitter.feed(chunk):
                _on_line(ctx, line, log, prog, rnd)
        for line, _end in splitter.close():
            _on_line(ctx, line, log, prog, rnd)

    async def err() -> None:
        buf = bytearray()
        while chunk := await pipe.stderr.read(65536):
            buf.extend(chunk)
            del buf[:-8192]
        log.first_hop_stderr[pipe.node.name] = buf.decode(errors="replace")

    await asyncio.gather(out(), err())
    log.first_hop_rc[pipe.node.name] = await pipe.wait()


def _on_line(ctx: _Ctx, line: str, log: RoundLog, prog: _Progress, rnd: int) -> None:
    ev = parse_chain_line(line)
    if ev is None:
        return
    log.events.append((time.monotonic() - ctx.started, ev))
    if ev.event == "progress" and ev.fields:
        n = _safe_int(ev.fields[0])
        if n is not None:
            if n != prog.node_bytes.get(ev.node):
                prog.moved()
            prog.node_bytes[ev.node] = n
            ctx.emit(PushEvent("progress", node=ev.node, round=rnd, wire_bytes=n))
    elif ev.event in ("sending", "sent") and len(ev.fields) >= 2:  # a node source: wire, raw
        wire, raw = _safe_int(ev.fields[0]), _safe_int(ev.fields[1])
        if wire is not None and raw is not None:
            if wire != prog.wire:
                prog.moved()
            prog.raw, prog.wire = raw, wire
            ctx.emit(PushEvent("source", round=rnd, wire_bytes=wire, raw_bytes=raw))
    elif ev.event == "load" and ev.fields:
        ok = ev.fields[0] == "0" and not any(
            UNPACK_ERROR in e.text
            for _, e in log.events
            if e.event == "loadout" and e.node == ev.node
        )
        ctx.emit(PushEvent("loaded", node=ev.node, round=rnd, ok=ok))
    elif ev.event == "recv" and ev.fields:
        n = _safe_int(ev.fields[0])
        if n is not None:
            ctx.emit(PushEvent("progress", node=ev.node, round=rnd, wire_bytes=n))
    elif ev.event == "hop" and len(ev.fields) >= 2 and ev.fields[1] != "0":
        ctx.emit(PushEvent("note", node=ev.fields[0], round=rnd, text=f"hop from {ev.node} failed"))


@dataclass
class _Stream:
    """The raw `docker save` stream of a source: a blocking pipe fd we own, and its process."""

    fd: int
    proc: asyncio.subprocess.Process
    head: bytes = b""  # bytes already read off `fd` (the compression sample), sent first

    def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _os_pipe() -> tuple[int, int]:
    r, w = os.pipe()
    for fd in (r, w):  # fewer, larger wakeups for a bulk stream (Linux; best effort)
        with contextlib.suppress(OSError, AttributeError):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    return r, w


async def _open_source(ctx: _Ctx, source: Source) -> _Stream:
    """Start what produces the raw stream: `cat` of the archive, the controller's `docker save`,
    or `docker save` on a node over SSH (a fan-out from a node source)."""
    r, w = _os_pipe()
    try:
        if source.kind is SourceKind.node:
            assert source.node is not None
            node = ctx.node(source.node)
            pipe = await open_pipe(
                ctx.inventory,
                node,
                [*docker_argv(node), "save", ctx.reference],
                options=ctx.pipe_options(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=w,
            )
            proc = pipe.proc
        else:
            argv = (
                ["cat", "--", str(source.path)]
                if source.kind is SourceKind.tar
                else ["docker", "save", ctx.reference]
            )
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=w, stderr=asyncio.subprocess.PIPE
            )
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    return _Stream(fd=r, proc=proc)


def _read_upto(fd: int, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, min(CHUNK, n - len(buf)))
        if not chunk:
            break
        buf.extend(chunk)
    return bytes(buf)


async def _zstd_size(data: bytes) -> int:
    proc = await asyncio.create_subprocess_exec(
        "zstd",
        "-1",
        "-q",
        "-c",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await proc.communicate(data)
    return len(out) if proc.returncode == 0 else 0


async def _start_zstd() -> tuple[asyncio.subprocess.Process, int, int]:
    """`zstd -1 -T0` between two pipes we own: returns it, the fd to feed, the fd to read."""
    in_r, in_w = _os_pipe()
    out_r, out_w = _os_pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            "zstd", "-1", "-T0", "-q", "-c", stdin=in_r, stdout=out_w
        )
    except BaseException:
        for fd in (in_w, out_r):
            os.close(fd)
        raise
    finally:
        os.close(in_r)
        os.close(out_w)
    return proc, in_w, out_r


def _move(src: int, dst: int, head: bytes, count: Callable[[int], None]) -> None:
    """Copy `head`, then everything from `src` to `dst` until EOF (blocking; run in a thread).
    `os.splice` moves pipe pages without copying them through Python where the OS has it."""
    if head:
        view = memoryview(head)
        while view:
            n = os.write(dst, view)
            view = view[n:]
            count(n)
    splice = getattr(os, "splice", None)
    while True:
        if splice is not None:
            try:
                n = splice(src, dst, CHUNK)
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.ENOSYS):
                    raise
                splice = None
                continue
        else:
            chunk = os.read(src, CHUNK)
            n = len(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(dst, view) :]
        if n == 0:
            return
        count(n)


async def _source_error(stream: _Stream, label: str) -> str | None:
    """A clean end of the source, or the line that says why not."""
    rc = await stream.proc.wait()
    if rc == 0:
        return None
    err = b""
    if stream.proc.stderr is not None:
        with contextlib.suppress(Exception):
            err = await asyncio.wait_for(stream.proc.stderr.read(), 2)
    last = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {rc}"]
    return f"the source ({label}) failed: {last[0]}"


async def _pump_direct(
    ctx: _Ctx,
    source: Source,
    stream: _Stream,
    sink_w: int,
    compression: Compression,
    prog: _Progress,
    report: Callable[[], None],
    helpers: list[asyncio.subprocess.Process],
) -> str | None:
    """One stream (the chain): source -> [zstd] -> the first hop, moved by the kernel in two
    threads; Python only counts. Returns the source's error, if any."""

    def raw(n: int) -> None:
        prog.raw += n
        if compression is Compression.none:
            prog.wire += n
            prog.moved()

    def wire(n: int) -> None:
        prog.wire += n
        prog.moved()

    async def ticker() -> None:
        while True:
            await asyncio.sleep(0.5)
            report()

    tick = asyncio.ensure_future(ticker())
    broken = False
    try:
        if compression is Compression.zstd:
            zproc, z_in, z_out = await _start_zstd()
            helpers.append(zproc)

            def feed() -> None:
                try:
                    _move(stream.fd, z_in, stream.head, raw)
                except OSError:
                    pass
                finally:
                    os.close(z_in)

            def drain() -> None:
                nonlocal broken
                try:
                    _move(z_out, sink_w, b"", wire)
                except OSError:  # the first hop went away: stop the rest of the line
                    broken = True
                    stream.kill()
                    if zproc.returncode is None:
                        with contextlib.suppress(ProcessLookupError):
                            zproc.kill()
                finally:
                    os.close(z_out)

            await asyncio.gather(asyncio.to_thread(feed), asyncio.to_thread(drain))
            await zproc.wait()
        else:

            def send() -> None:
                nonlocal broken
                try:
                    _move(stream.fd, sink_w, stream.head, raw)
                except OSError:
                    broken = True
                    stream.kill()

            await asyncio.to_thread(send)
    finally:
        tick.cancel()
        with contextlib.suppress(OSError):
            os.close(sink_w)
        stream.close()
    report()
    if broken:
        stream.kill()
        await stream.proc.wait()
        return None
    return await _source_error(stream, source.label())


async def _pump_copy(
    source: Source,
    stream: _Stream,
    sinks: list[Pipe],
    compression: Compression,
    prog: _Progress,
    report: Callable[[], None],
    helpers: list[asyncio.subprocess.Process],
) -> str | None:
    """Several streams (the fan-out): every chunk written to every live sink. Returns the
    source's error, if any."""
    live = list(sinks)
    last = 0.0

    def tick() -> None:
        nonlocal last
        now = time.monotonic()
        if now - last > 0.5:
            last = now
            report()

    async def out(chunk: bytes) -> None:
        nonlocal live
        live = await _write_all(live, chunk)
        prog.wire += len(chunk)
        prog.moved()
        tick()

    try:
        if compression is Compression.zstd:
            zproc, z_in, z_out = await _start_zstd()
            helpers.append(zproc)

            def feed() -> None:
                try:
                    _move(
                        stream.fd, z_in, stream.head, lambda n: setattr(prog, "raw", prog.raw + n)
                    )
                except OSError:
                    pass
                finally:
                    os.close(z_in)

            async def drain() -> None:
                try:
                    while live and (chunk := await asyncio.to_thread(os.read, z_out, CHUNK)):
                        await out(chunk)
                finally:
                    os.close(z_out)
                    if not live:
                        stream.kill()
                        if zproc.returncode is None:
                            with contextlib.suppress(ProcessLookupError):
                                zproc.kill()

            await asyncio.gather(asyncio.to_thread(feed), drain())
            await zproc.wait()
        else:
            if stream.head:
                prog.raw += len(stream.head)
                await out(stream.head)
            while live and (chunk := await asyncio.to_thread(os.read, stream.fd, CHUNK)):
                prog.raw += len(chunk)
                await out(chunk)
            if not live:
                stream.kill()
    finally:
        stream.close()
        for s in sinks:
            await s.close_stdin()
    report()
    if not live:
        await stream.proc.wait()
        return None
    return await _source_error(stream, source.label())


async def _write_all(sinks: list[Pipe], chunk: bytes) -> list[Pipe]:
    """Write to every live sink at once; the ones that stopped reading drop out."""
    results = await asyncio.gather(*(s.write(chunk) for s in sinks), return_exceptions=True)
    return [s for s, r in zip(sinks, results, strict=True) if not isinstance(r, BaseException)]


async def _run_round(
    ctx: _Ctx,
    rnd: int,
    source: Source,
    targets: list[str],
    mode: Mode,
    compression: Compression,
    total_estimate: int | None,
    stream: _Stream | None,
) -> tuple[RoundLog, _Progress]:
    """One round: chain (or fan-out waves) from `source` to `targets`; the words it heard."""
    tag = f"{ctx.tag_base}-r{rnd}"
    log = RoundLog()
    prog = _Progress()
    popts = ctx.pipe_options()
    common = ctx.common(tag, compression, ctx.reference)
    stall_s = ctx.options.stall_timeout_s * 2 + 10
    helpers: list[asyncio.subprocess.Process] = []

    def report() -> None:
        ctx.emit(
            PushEvent(
                "source",
                round=rnd,
                wire_bytes=prog.wire,
                raw_bytes=prog.raw,
                total_estimate=total_estimate,
            )
        )

    async def watchdog(pipes: list[Pipe], work: asyncio.Future[Any]) -> None:
        while not work.done():
            await asyncio.sleep(0.5)
            if time.monotonic() - prog.last_move > stall_s:
                log.stalled = True
                for p in pipes:
                    p.kill()
                if stream is not None:
                    stream.kill()
                for h in helpers:
                    if h.returncode is None:
                        with contextlib.suppress(ProcessLookupError):
                            h.kill()
                return

    async def supervise(pipes: list[Pipe], work: asyncio.Future[Any]) -> None:
        dog = asyncio.ensure_future(watchdog(pipes, work))
        try:
            await work
        finally:
            dog.cancel()

    if source.kind is SourceKind.node and mode is Mode.chain:
        assert source.node is not None
        quints = [q for name in [source.node, *targets] for q in _quint(ctx.node(name))]
        pipe = await open_pipe(
            ctx.inventory,
            ctx.node(source.node),
            ctx.argv("source", [*common, *quints]),
            options=popts,
            stdin=asyncio.subprocess.DEVNULL,
        )
        await supervise([pipe], asyncio.ensure_future(_read_events(ctx, pipe, log, prog, rnd)))
        log.source_error = _node_source_error(source.node, log)
        return log, prog

    assert stream is not None
    if mode is Mode.chain:
        waves = [targets]
    else:
        k = max(1, ctx.options.fanout_streams)
        waves = [targets[i : i + k] for i in range(0, len(targets), k)]
    for i, wave in enumerate(waves):
        if i > 0:  # another wave reads the source again
            stream = await _open_source(ctx, source)
        if mode is Mode.chain:
            quints = [q for name in wave for q in _quint(ctx.node(name))]
            sink_r, sink_w = _os_pipe()
            try:
                first = await open_pipe(
                    ctx.inventory,
                    ctx.node(wave[0]),
                    ctx.argv("chain", [*common, *quints]),
                    options=popts,
                    stdin=sink_r,
                )
            finally:
                os.close(sink_r)
            sinks = [first]
            pump = _pump_direct(ctx, source, stream, sink_w, compression, prog, report, helpers)
        else:
            sinks = [
                await open_pipe(
                    ctx.inventory,
                    ctx.node(name),
                    ctx.argv("chain", [*common, *_quint(ctx.node(name))]),
                    options=popts,
                )
                for name in wave
            ]
            pump = _pump_copy(source, stream, sinks, compression, prog, report, helpers)
        readers = [_read_events(ctx, s, log, prog, rnd) for s in sinks]

        async def both(pump: Any = pump, readers: list[Any] = readers) -> None:
            err, *_ = await asyncio.gather(pump, *readers)
            if err:
                log.source_error = err

        await supervise(sinks, asyncio.ensure_future(both()))
        if log.stalled:
            break
    log.events.append(
        (
            time.monotonic() - ctx.started,
            ChainEvent("sent", "controller", (str(prog.wire), str(prog.raw)), ""),
        )
    )
    return log, prog


def _node_source_error(name: str, log: RoundLog) -> str | None:
    """Why a node source sent nothing usable: its `docker save` failed, or it was never
    reached (the controller's session to it failed before it said anything)."""
    mine = [e for _, e in log.events if e.node == name]
    save = next((e for e in mine if e.event == "save"), None)
    if save is not None and save.fields[:1] != ("0",):
        errs = [e.text for e in mine if e.event == "saveerr"]
        return f"docker save on {name} exited {save.fields[0]}" + (f": {errs[-1]}" if errs else "")
    if not mine and not log.stalled:
        err = log.first_hop_stderr.get(name, "").strip().splitlines()[-1:]
        rc = log.first_hop_rc.get(name)
        return f"the source node {name} could not be reached (exit {rc})" + (
            f": {err[0]}" if err else ""
        )
    return None


async def _cleanup(ctx: _Ctx, tag: str, names: Sequence[str]) -> None:
    """Stop what a round left running on nodes that never said `end` (after a broken hop)."""

    async def one(name: str) -> None:
        with contextlib.suppress(ClusterError):
            await run_bounded(
                ctx.transports[name],
                ctx.argv("cleanup", [tag, name]),
                ctx.options.connect_timeout_s,
            )

    await asyncio.gather(*(one(n) for n in names))


async def _verify(
    ctx: _Ctx, names: Sequence[str], want: ImageIdentity, stores: dict[str, ImageStoreKind]
) -> dict[str, tuple[bool, str, str | None]]:
    """Re-probe: node -> (holds the expected identity, evidence, short identity)."""
    timeout = max(5.0, ctx.options.connect_timeout_s * 2)

    async def one(name: str) -> tuple[bool, str, str | None]:
        node = ctx.node(name)
        probe = image_inspect_probe(ctx.reference, docker_argv(node))
        try:
            facts = probe.read(await run_bounded(ctx.transports[name], probe.argv, timeout))
        except ClusterError as exc:
            return False, f"cannot re-probe: {exc.line()}", None
        if not facts.present:
            return False, f"{ctx.reference} is not there after the load", None
        got = identity_of(facts, stores.get(name, ImageStoreKind.unknown))
        if same_image(got, want):
            return True, "", got.short()
        return False, f"holds {got.short()}, expected {want.short()}", got.short()

    results = await asyncio.gather(*(one(n) for n in names))
    out = dict(zip(names, results, strict=True))
    for name, (ok, _, _) in out.items():
        ctx.emit(PushEvent("verify", node=name, ok=ok))
    return out


async def push_image(
    inventory: Inventory,
    reference: str,
    *,
    source: Source | None = None,
    options: PushOptions | None = None,
    on_event: EventSink | None = None,
    factory: TransportFactory | None = None,
) -> PushReport:
    """Put `reference` on every node of the inventory; see the module doc for how.

    Raises `ImageError` before any byte moves (no such image at the source, platform or digest
    mismatch); afterwards every node's fate is in the returned report (`raise_for_failures`)."""
    source = source or Source()
    options = options or PushOptions()
    emit: EventSink = on_event or (lambda _e: None)
    started = time.monotonic()
    copts = ConnectOptions(connect_timeout_s=options.connect_timeout_s)
    make = factory or (lambda n: transport_for(inventory, n, copts))
    transports = {n.name: make(n) for n in inventory.nodes}
    try:
        return await _push(inventory, reference, source, options, emit, started, transports)
    finally:
        await asyncio.gather(*(t.close() for t in transports.values()), return_exceptions=True)


async def _push(
    inventory: Inventory,
    reference: str,
    source: Source,
    options: PushOptions,
    emit: EventSink,
    started: float,
    transports: dict[str, Transport],
) -> PushReport:
    states = await gather_states(
        inventory, reference, transports, timeout_s=max(10.0, options.connect_timeout_s * 2)
    )
    src = await resolve_source(inventory, reference, source, states)
    plan = plan_push(
        reference,
        src,
        states,
        expected_digest=options.expected_digest,
        platform=options.platform,
        compress=options.compress,
    )
    emit(PushEvent("plan", plan=plan))
    by_state = {s.node: s for s in states}
    stores = {s.node: (s.store.kind if s.store else ImageStoreKind.unknown) for s in states}
    rows: dict[str, dict[str, Any]] = {}
    for s in states:
        rows[s.node] = {
            "node": s.node,
            "rank": s.rank,
            "store": s.store.driver if s.store else None,
            "identity": s.identity.short() if s.holds_image else None,
        }
    for name in plan.skipped:
        note = "the source" if source.kind is SourceKind.node and name == source.node else None
        rows[name].update(action=NodeAction.skipped, verified=True, note=note)
    for p in plan.unreachable:
        rows[p.node].update(action=NodeAction.failed, error=p.evidence)
    known = ""
    if inventory.known_hosts is not None and inventory.known_hosts.is_file():
        text = inventory.known_hosts.read_text(encoding="utf-8", errors="replace")
        known = filter_known_hosts(text, [(n.address, n.port) for n in inventory.nodes])
        if len(known) > MAX_KNOWN_HOSTS:
            known = ""
    ctx = _Ctx(
        inventory=inventory,
        reference=reference,
        options=options,
        transports=transports,
        emit=emit,
        started=started,
        script=chain_script(),
        tag_base=secrets.token_hex(6),
        known_hosts_text=known,
    )
    rounds: list[RoundReport] = []
    compression = plan.compression
    compression_reason = plan.compression_reason
    first_mode: tuple[Mode, str] | None = None
    targets = list(plan.targets)
    round_source = source
    verified: set[str] = set(plan.skipped)
    sends: dict[str, int] = {}
    for rnd in range(1, options.max_rounds + 1):
        if not targets:
            break
        t0 = time.monotonic()
        chain_nodes = [*([round_source.node] if round_source.node else []), *targets]
        pairs = list(itertools.pairwise(chain_nodes))
        local = inventory.connection is Connection.local
        needs_check = options.mode != "fanout" and not local and pairs
        broken = await _hop_check(ctx, pairs) if needs_check else []
        missing_ssh = [(a, b, "no ssh client there") for a, b in pairs if not _has_ssh(by_state[a])]
        mode, why = choose_mode(options.mode, local=local, broken_hops=broken + missing_ssh)
        if mode is Mode.chain and len(targets) == 1 and round_source.kind is not SourceKind.node:
            why = "one node: a single stream from the controller"
        first_mode = first_mode or (mode, why)
        emit(
            PushEvent(
                "round", round=rnd, text=f"{round_source.label()} -> {', '.join(targets)}: {why}"
            )
        )
        stream: _Stream | None = None
        total = src.size_bytes
        if not (round_source.kind is SourceKind.node and mode is Mode.chain):
            stream = await _open_source(ctx, round_source)
            if rnd == 1 and compression is Compression.zstd and options.compress == "auto":
                stream.head = await asyncio.to_thread(_read_upto, stream.fd, SAMPLE_BYTES)
                pays, reason = compression_pays(len(stream.head), await _zstd_size(stream.head))
                if not pays:
                    compression, compression_reason = Compression.none, reason
                else:
                    compression_reason = reason
        for t in targets:
            sends[t] = sends.get(t, 0) + 1
        log, prog = await _run_round(
            ctx, rnd, round_source, targets, mode, compression, total, stream
        )
        outcomes = judge_round(targets, log, upstream_label=round_source.label())
        unfinished = [o.node for o in outcomes if not o.ended]
        tag = f"{ctx.tag_base}-r{rnd}"
        _, checks = await asyncio.gather(
            _cleanup(ctx, tag, unfinished),
            _verify(ctx, targets, src.identity, stores),
        )
        rounds.append(
            RoundReport(
                round=rnd,
                source=round_source.label(),
                mode=mode,
                mode_reason=why,
                targets=tuple(targets),
                seconds=round(time.monotonic() - t0, 3),
                wire_bytes=prog.wire or None,
                raw_bytes=prog.raw or None,
            )
        )
        starved: list[str] = []
        for o in outcomes:
            ok, evidence, short = checks[o.node]
            row = rows[o.node]
            row.update(
                sends=sends[o.node],
                sent_from=round_source.label(),
                received_bytes=o.received,
            )
            if ok and o.status is HopStatus.loaded:
                verified.add(o.node)
                row.update(
                    action=NodeAction.loaded,
                    verified=True,
                    identity=short,
                    seconds=round(o.load_at, 3) if o.load_at is not None else None,
                    error=None,
                )
            elif ok:  # loaded after all (e.g. the report was lost with a hop): the probe says so
                verified.add(o.node)
                row.update(action=NodeAction.loaded, verified=True, identity=short, error=None)
            else:
                evidence_all = o.evidence + (f"; re-probe: {evidence}" if evidence else "")
                row.update(action=NodeAction.failed, verified=False, error=evidence_all)
                reprobe_reached = not evidence.startswith("cannot re-probe")
                if o.status is HopStatus.starved or (
                    o.status is HopStatus.failed and "ssh from" in o.evidence and reprobe_reached
                ):
                    starved.append(o.node)
        if log.source_error:
            break  # the source itself is broken: re-sending from it helps nobody
        order = [n.name for n in inventory.nodes]
        resend_from, targets = next_round(order, verified, starved)
        round_source = (
            Source(kind=SourceKind.node, node=resend_from) if resend_from is not None else source
        )
        if targets:
            emit(
                PushEvent(
                    "note",
                    text=f"re-sending to {', '.join(targets)} from {round_source.label()}",
                )
            )
    # Exec-readiness on every node that loaded in this push.
    wanted = (NodeAction.loaded, NodeAction.skipped) if options.probe_all else (NodeAction.loaded,)
    loaded = [name for name, r in rows.items() if r.get("action") in wanted]
    if options.probe and loaded:
        results = await probe_exec_ready(
            inventory,
            reference,
            names=loaded,
            window_s=options.ready_window_s,
            command=options.ready_command,
            transports=transports,
            on_result=lambda r: emit(PushEvent("probe", node=r.node, ok=r.ready, readiness=r)),
        )
        for readiness in results:
            rows[readiness.node]["probe"] = readiness
    results_rows = []
    for node in inventory.nodes:
        row = rows[node.name]
        if "action" not in row:
            row.update(action=NodeAction.failed, error="not sent: the push stopped before it")
        results_rows.append(NodeResult(**row))
    report_mode: Mode | None = first_mode[0] if first_mode else None
    mode_reason = first_mode[1] if first_mode else None
    return PushReport(
        reference=reference,
        source=source.label(),
        identity=src.identity.short(),
        compression=compression,
        compression_reason=compression_reason,
        mode=report_mode,
        mode_reason=mode_reason,
        rounds=tuple(rounds),
        nodes=tuple(results_rows),
        seconds=round(time.monotonic() - started, 3),
    )


# ============================================================================================
# Exec-readiness and `cluster image probe`
# ============================================================================================


async def probe_exec_ready(
    inventory: Inventory,
    reference: str,
    *,
    names: Sequence[str] | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    command: Sequence[str] = ("/bin/sh", "-c", "true"),
    transports: dict[str, Transport] | None = None,
    connect_timeout_s: float = 10.0,
    on_result: Callable[[ExecReadiness], None] | None = None,
) -> list[ExecReadiness]:
    """The exec-readiness probe on every node named (default: all), at once; one answer per
    node in inventory order. A node that cannot be asked is not ready, with that error."""
    chosen = [n for n in inventory.nodes if names is None or n.name in set(names)]
    own = transports is None
    copts = ConnectOptions(connect_timeout_s=connect_timeout_s)
    tmap = transports or {n.name: transport_for(inventory, n, copts) for n in chosen}

    async def one(node: Node) -> ExecReadiness:
        started = time.monotonic()
        try:
            result = await wait_exec_ready(
                tmap[node.name],
                reference,
                window_s=window_s,
                docker=docker_argv(node),
                command=command,
            )
        except ClusterError as exc:
            result = ExecReadiness(
                node=node.name,
                image=reference,
                ready=False,
                tries=0,
                seconds=round(time.monotonic() - started, 3),
                last_error=exc.line(),
                gave_up="fatal",
            )
        if on_result is not None:
            on_result(result)
        return result

    try:
        outcomes = await settle(chosen, one)
    finally:
        if own:
            await asyncio.gather(*(t.close() for t in tmap.values()), return_exceptions=True)
    out = []
    for o in outcomes:
        if o.value is not None:
            out.append(o.value)
        else:
            out.append(
                ExecReadiness(
                    node=o.node.name,
                    image=reference,
                    ready=False,
                    tries=0,
                    seconds=0.0,
                    last_error=f"{type(o.error).__name__}: {o.error}",
                    gave_up="fatal",
                )
            )
    return out


class ProbeRow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    rank: int
    reachable: bool
    present: bool
    identity: str | None = None
    platform: str | None = None
    store: str | None = None
    driver: str | None = None
    matches: bool | None = Field(default=None, description="the expected digest, when given")
    ready: ExecReadiness | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return (
            self.reachable
            and self.present
            and self.matches is not False
            and self.ready is not None
            and self.ready.ready
        )


class ProbeReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    reference: str
    nodes: tuple[ProbeRow, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.nodes)

    def raise_for_failures(self) -> None:
        bad = [r for r in self.nodes if not r.ok]
        if not bad:
            return
        lines = []
        for r in bad:
            if not r.reachable:
                lines.append(f"{r.node}: {r.error}")
            elif not r.present:
                lines.append(f"{r.node}: {self.reference} is not there")
            elif r.matches is False:
                lines.append(f"{r.node}: holds {r.identity}, not the expected digest")
            elif r.ready is not None:
                lines.append(f"{r.node}: {r.ready.summary()}")
        raise ImageError(
            f"{len(bad)} of {len(self.nodes)} nodes cannot run {self.reference}: "
            + ", ".join(r.node for r in bad),
            hint=f"`cluster image push {self.reference}` puts it where it is missing",
            more=tuple(lines),
        )


async def probe_image(
    inventory: Inventory,
    reference: str,
    *,
    expected_digest: str | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    command: Sequence[str] = ("/bin/sh", "-c", "true"),
    connect_timeout_s: float = 10.0,
    factory: TransportFactory | None = None,
    on_result: Callable[[ExecReadiness], None] | None = None,
) -> ProbeReport:
    """`cluster image probe`: who holds the image (identity, store) and can exec it."""
    started = time.monotonic()
    copts = ConnectOptions(connect_timeout_s=connect_timeout_s)
    make = factory or (lambda n: transport_for(inventory, n, copts))
    transports = {n.name: make(n) for n in inventory.nodes}
    try:
        states = await gather_states(
            inventory, reference, transports, timeout_s=max(10.0, connect_timeout_s * 2)
        )
        holders = [s.node for s in states if s.reachable and s.holds_image]
        ready = await probe_exec_ready(
            inventory,
            reference,
            names=holders,
            window_s=window_s,
            command=command,
            transports=transports,
            on_result=on_result,
        )
    finally:
        await asyncio.gather(*(t.close() for t in transports.values()), return_exceptions=True)
    by_node = {r.node: r for r in ready}
    rows = []
    for s in states:
        ident = s.identity
        rows.append(
            ProbeRow(
                node=s.node,
                rank=s.rank,
                reachable=s.reachable,
                present=s.holds_image,
                identity=ident.short() if s.holds_image else None,
                platform=s.image.platform if s.image else None,
                store=s.store.kind.value if s.store else None,
                driver=s.store.driver if s.store else None,
                matches=(
                    matches_digest(ident, expected_digest)
                    if expected_digest and s.holds_image
                    else None
                ),
                ready=by_node.get(s.node),
                error=s.error,
            )
        )
    return ProbeReport(
        reference=reference, nodes=tuple(rows), seconds=round(time.monotonic() - started, 3)
    )
