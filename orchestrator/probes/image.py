"""Which image a node holds, in terms that survive `docker save | docker load`, and its store.

`docker image inspect --format '{{json .}}' REF` gives the image's Id, RepoDigests, platform and
the diff ids of its layers. What identifies "the same image" across a save/load depends on the
daemon's image store (sparkrun#152):

* a **graph driver** store (overlay2, Docker's classic store; the testbed's Docker 20.10): the Id
  *is* the config digest, the sha256 of the image config JSON, which a save/load keeps byte for
  byte. RepoDigests do not survive a load (they are registry facts), so they never decide.
* the **containerd image store** (`docker info` DriverStatus `driver-type
  io.containerd.snapshotter.v1`, Docker 24+ opt-in, 29 default): the Id is the digest of the
  manifest (or index) instead, which differs from the config digest, and may differ after a
  re-export. There, the comparison falls back to a **content key**: the sha256 of the platform,
  the layers' diff ids and the runtime config (Entrypoint, Cmd, Env, WorkingDir, User, Labels,
  ...), which both stores report identically for the same image and which the archive's config
  JSON gives too.

`same_image` compares config digests when both sides know one, else content keys. The store of
each node comes from `docker info`, parsed by `probes/runtime.py` (one `docker info`, not two);
this module only adds the DriverStatus reading.

A missing image is an answer (`Error: No such image: REF` / `Error response from daemon: No
such image`, exit 1), not a failure (captured: `tests/fixtures/probes/image_inspect/`).
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import Any

from pydantic import Field

from orchestrator.dockercli import DockerCli
from orchestrator.errors import tail
from orchestrator.models.base import StrictModel
from orchestrator.probes.base import Probe, excerpt, fail, parse_json
from orchestrator.probes.host import oci_arch
from orchestrator.probes.runtime import docker_info_down, docker_info_probe, parse_docker_info

NAME = "image_inspect"
STORE_NAME = "image_store"
TOOLS_NAME = "chain_tools"

CONTAINERD_SNAPSHOTTER = "io.containerd.snapshotter.v1"

# The runtime config fields that make two images behave the same; both `docker image inspect`
# (.Config) and the image config JSON (.config) carry them under these names.
CONFIG_KEYS = (
    "Cmd",
    "Entrypoint",
    "Env",
    "WorkingDir",
    "User",
    "ExposedPorts",
    "Volumes",
    "Labels",
    "StopSignal",
)


def content_key(
    *, os: str | None, architecture: str | None, layers: list[str], config: dict[str, Any] | None
) -> str:
    """sha256 of what makes an image this image, in a form both stores and archives report.

    Empty values (`null`, `""`, `[]`, `{}`) are dropped: inspect prints `"Env": null` where the
    config JSON omits the key."""
    cfg = config or {}
    runtime = {k: cfg[k] for k in CONFIG_KEYS if cfg.get(k) not in (None, "", [], {})}
    doc = {
        "os": os or "",
        "architecture": oci_arch(architecture or ""),
        "layers": list(layers),
        "config": runtime,
    }
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()


class ImageFacts(StrictModel):
    """What one daemon says about one image reference."""

    reference: str
    present: bool
    id: str | None = Field(default=None, description="Id: config digest (graph driver) or manifest")
    repo_tags: tuple[str, ...] = ()
    repo_digests: tuple[str, ...] = ()
    os: str | None = None
    architecture: str | None = Field(default=None, description="OCI name: arm64, amd64")
    variant: str | None = None
    size: int | None = Field(default=None, description="bytes of the unpacked layers")
    layers: tuple[str, ...] = Field(default=(), description="RootFS diff ids, base first")
    content_key: str | None = None

    @property
    def platform(self) -> str | None:
        if not (self.os and self.architecture):
            return None
        return f"{self.os}/{self.architecture}" + (f"/{self.variant}" if self.variant else "")


def parse_image_inspect(reference: str, stdout: str) -> ImageFacts:
    """The JSON of `docker image inspect --format '{{json .}}' REF` -> `ImageFacts`."""
    doc = parse_json(NAME, stdout)
    if isinstance(doc, list):  # without --format docker prints a list of one
        doc = doc[0] if len(doc) == 1 else None
    if not isinstance(doc, dict) or not isinstance(doc.get("Id"), str) or not doc["Id"]:
        raise fail(NAME, f"no image Id in {excerpt(stdout)!r}")
    rootfs = doc.get("RootFS") if isinstance(doc.get("RootFS"), dict) else {}
    layers = [str(x) for x in (rootfs or {}).get("Layers") or []]
    config = doc.get("Config") if isinstance(doc.get("Config"), dict) else None
    size = doc.get("Size")
    arch = doc.get("Architecture") or None
    os_name = doc.get("Os") or None
    return ImageFacts(
        reference=reference,
        present=True,
        id=doc["Id"],
        repo_tags=tuple(str(t) for t in doc.get("RepoTags") or []),
        repo_digests=tuple(str(d) for d in doc.get("RepoDigests") or []),
        os=os_name,
        architecture=oci_arch(arch) if arch else None,
        variant=doc.get("Variant") or None,
        size=size if isinstance(size, int) and not isinstance(size, bool) else None,
        layers=tuple(layers),
        content_key=content_key(os=os_name, architecture=arch, layers=layers, config=config),
    )


def image_inspect_probe(reference: str, docker: DockerCli) -> Probe[ImageFacts]:
    """`docker image inspect` of one reference; `docker` is the client argv (`--host` added when
    the inventory names the node's daemon)."""

    def absent(exit_status: int | None, stdout: str, stderr: str) -> ImageFacts | None:
        if exit_status == 1 and "no such image" in tail(stderr, 3).lower():
            return ImageFacts(reference=reference, present=False)
        return None

    return Probe(
        name=NAME,
        argv=docker("image", "inspect", "--format", "{{json .}}", reference),
        parse=lambda stdout: parse_image_inspect(reference, stdout),
        on_failure=absent,
    )


# -- the image store ------------------------------------------------------------------------


class ImageStoreKind(StrEnum):
    graphdriver = "graphdriver"  # overlay2 & co: Id == config digest
    containerd = "containerd"  # containerd snapshotter: Id == manifest digest
    unknown = "unknown"  # the daemon did not answer


class ImageStore(StrictModel):
    """A node's daemon: which store its images live in, and its platform."""

    reachable: bool
    error: str | None = None
    driver: str | None = Field(default=None, description="docker info Driver: overlay2, overlayfs")
    kind: ImageStoreKind = ImageStoreKind.unknown
    architecture: str | None = Field(default=None, description="OCI name: arm64, amd64")
    os_type: str | None = None

    @property
    def platform(self) -> str | None:
        if not self.architecture:
            return None
        return f"{self.os_type or 'linux'}/{self.architecture}"


def store_kind(driver: str | None, driver_status: list[Any]) -> ImageStoreKind:
    """The containerd store says so in DriverStatus (`driver-type io.containerd.snapshotter.v1`);
    any other answering daemon uses a graph driver."""
    for pair in driver_status:
        if isinstance(pair, list) and len(pair) == 2 and CONTAINERD_SNAPSHOTTER in str(pair[1]):
            return ImageStoreKind.containerd
    return ImageStoreKind.graphdriver if driver else ImageStoreKind.unknown


def parse_image_store(stdout: str, stderr: str = "") -> ImageStore:
    """`docker info --format '{{json .}}'` (the runtime probe's command and parser) -> store."""
    info = parse_docker_info(stdout, stderr)
    if not info.reachable:
        return ImageStore(reachable=False, error=info.error)
    doc = json.loads(stdout)  # parse_docker_info has accepted it as a JSON object
    status = doc.get("DriverStatus") if isinstance(doc.get("DriverStatus"), list) else []
    os_type = doc.get("OSType") if isinstance(doc.get("OSType"), str) else None
    return ImageStore(
        reachable=True,
        driver=info.driver,
        kind=store_kind(info.driver, status or []),
        architecture=oci_arch(info.architecture) if info.architecture else None,
        os_type=os_type or None,
    )


def _store_on_failure(exit_status: int | None, stdout: str, stderr: str) -> ImageStore | None:
    info = docker_info_down(exit_status, stdout, stderr)
    if info is None:
        return None
    return ImageStore(reachable=False, error=info.error)


def image_store_probe(docker: DockerCli) -> Probe[ImageStore]:
    """The runtime probe's `docker info`, read for the image store and platform."""
    return Probe(
        name=STORE_NAME,
        argv=docker_info_probe(docker).argv,
        parse=parse_image_store,
        on_failure=_store_on_failure,
    )


# -- the tools a chain hop needs --------------------------------------------------------------

TOOLS_SCRIPT = (
    "for t in zstd ssh mkfifo dd tee sed; do "
    'command -v "$t" >/dev/null 2>&1 && printf "%s " "$t"; done; '
    'tee -p </dev/null >/dev/null 2>&1 && printf "tee-p "; '
    '[ -r /proc/self/io ] && printf "proc-io"; echo'
)
CHAIN_NEEDS = ("ssh", "mkfifo", "dd", "tee", "sed")


class ChainTools(StrictModel):
    """What a node offers the chain script: zstd (compression), ssh (forwarding), GNU tee -p
    (a dead hop does not stop the local load), /proc/PID/io (progress)."""

    found: tuple[str, ...]

    @property
    def zstd(self) -> bool:
        return "zstd" in self.found

    @property
    def tee_p(self) -> bool:
        return "tee-p" in self.found

    @property
    def proc_io(self) -> bool:
        return "proc-io" in self.found

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(t for t in CHAIN_NEEDS if t not in self.found)


def parse_chain_tools(stdout: str) -> ChainTools:
    words = stdout.split()
    known = {*CHAIN_NEEDS, "zstd", "tee-p", "proc-io"}
    strange = [w for w in words if w not in known]
    if strange:
        raise fail(TOOLS_NAME, f"unexpected words {excerpt(' '.join(strange))!r}")
    return ChainTools(found=tuple(words))


CHAIN_TOOLS: Probe[ChainTools] = Probe(
    name=TOOLS_NAME,
    argv=("sh", "-c", TOOLS_SCRIPT),
    parse=parse_chain_tools,
)


# -- identity --------------------------------------------------------------------------------


class ImageIdentity(StrictModel):
    """How to recognise an image after `docker save | docker load`, whatever the store."""

    config_digest: str | None = Field(default=None, description="sha256 of the config JSON")
    manifest_digest: str | None = Field(default=None, description="the Id on a containerd store")
    content_key: str | None = None
    repo_digests: tuple[str, ...] = ()

    def short(self) -> str:
        d = self.config_digest or self.manifest_digest or self.content_key or "?"
        return d.removeprefix("sha256:")[:12]


def identity_of(facts: ImageFacts, store: ImageStoreKind) -> ImageIdentity:
    """The Id is the config digest only on a graph driver store; on the containerd store it is
    the manifest's digest and the config digest is not reported."""
    if not facts.present:
        return ImageIdentity()
    graph = store is ImageStoreKind.graphdriver
    return ImageIdentity(
        config_digest=facts.id if graph else None,
        manifest_digest=None if graph else facts.id,
        content_key=facts.content_key,
        repo_digests=facts.repo_digests,
    )


def same_image(a: ImageIdentity, b: ImageIdentity) -> bool:
    """Config digests when both sides know one; else the content keys. Unknown is not a match."""
    if a.config_digest and b.config_digest:
        return a.config_digest == b.config_digest
    if a.content_key and b.content_key:
        return a.content_key == b.content_key
    return False


def matches_digest(identity: ImageIdentity, digest: str) -> bool:
    """Is this the image a recipe's `digest` names? Its config digest, its manifest digest, or
    one of its repo digests (a registry's manifest digest, before any save/load)."""
    if digest in (identity.config_digest, identity.manifest_digest):
        return True
    return any(d.endswith("@" + digest) for d in identity.repo_digests)


# -- layers held, by content -------------------------------------------------------------------

LAYERS_NAME = "image_layers"
# Every image the daemon holds (intermediate ones too), as its diff ids. Images may vanish
# between the listing and the inspect (a prune): what inspect could still print is the answer.
LAYERS_SCRIPT = (
    'ids=$("$@" image ls -aq --no-trunc) || exit $?; '
    '[ -n "$ids" ] || exit 0; '
    '"$@" image inspect --format "{{json .RootFS.Layers}}" $(printf "%s\\n" $ids | sort -u); '
    "exit 0"
)


def chain_ids(diff_ids: list[str] | tuple[str, ...]) -> list[str]:
    """The chain id of every prefix of a layer list (Docker's formula: the first layer's is its
    diff id, then sha256("<parent chain> <diff id>")). A layer is only usable on top of the very
    layers below it, so "holds layer k" means "holds the chain up to k", whatever the store."""
    out: list[str] = []
    for d in diff_ids:
        if not out:
            out.append(d)
        else:
            out.append("sha256:" + hashlib.sha256(f"{out[-1]} {d}".encode()).hexdigest())
    return out


class HeldLayers(StrictModel):
    """The layer chains a daemon holds (chain ids of every prefix of every image it has)."""

    chains: frozenset[str] = frozenset()
    images: int = 0

    def holds(self, chain: str) -> bool:
        return chain in self.chains


def parse_image_layers(stdout: str) -> HeldLayers:
    """One JSON list of diff ids per line (`docker image inspect --format '{{json
    .RootFS.Layers}}'`), one line per image -> every chain held."""
    chains: set[str] = set()
    images = 0
    for line in stdout.splitlines():
        line = line.strip()
        if not line or line == "null":
            continue
        doc = parse_json(LAYERS_NAME, line)
        if not isinstance(doc, list) or not all(isinstance(x, str) for x in doc):
            raise fail(LAYERS_NAME, f"not a list of diff ids: {excerpt(line)!r}")
        images += 1
        chains.update(chain_ids(doc))
    return HeldLayers(chains=frozenset(chains), images=images)


def image_layers_probe(docker: DockerCli) -> Probe[HeldLayers]:
    """Which layers a node holds, by content: the diff ids of all its images."""
    return Probe(
        name=LAYERS_NAME,
        argv=("sh", "-c", LAYERS_SCRIPT, "image-layers", *docker.base),
        parse=parse_image_layers,
    )


HISTORY_NAME = "image_history"


def parse_layer_sizes(stdout: str, layers: int) -> tuple[int, ...] | None:
    """`docker history --human=false --no-trunc --format '{{.Size}}'` (newest first, one line per
    history entry, empty ones included) -> each layer's size, base first; None when the entries
    cannot be matched to the layers one to one."""
    try:
        sizes = [int(x) for x in stdout.split()][::-1]
    except ValueError as exc:
        raise fail(HISTORY_NAME, f"not a list of sizes: {excerpt(stdout)!r}") from exc
    if len(sizes) == layers:
        return tuple(sizes)
    nonzero = [s for s in sizes if s > 0]
    return tuple(nonzero) if len(nonzero) == layers else None


def layer_sizes_probe(
    reference: str, docker: DockerCli, layers: int
) -> Probe[tuple[int, ...] | None]:
    """Each layer's size (unpacked bytes, about what `docker save` sends of it), base first."""
    return Probe(
        name=HISTORY_NAME,
        argv=docker("history", "--human=false", "--no-trunc", "--format", "{{.Size}}", reference),
        parse=lambda stdout: parse_layer_sizes(stdout, layers),
    )
