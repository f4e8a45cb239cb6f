"""The source: what it holds (the identity every node must end with, its platform), and the raw
stream it produces (`cat` of an archive, `docker save` here or on a node), with a sample of it."""

from __future__ import annotations

import asyncio
import getpass
import os
import sys
from collections.abc import Sequence

from orchestrator.dockercli import DockerCli
from orchestrator.errors import ClusterError, ImageError
from orchestrator.images import layer_filter
from orchestrator.images.archive import read_archive
from orchestrator.images.context import ChainContext
from orchestrator.images.model import ZSTD_WIRE_LEVEL, NodeState, Source, SourceImage, SourceKind
from orchestrator.images.pump import CHUNK, SourceStream, _open_stream, spawn_stream
from orchestrator.models.inventory import Inventory, Node
from orchestrator.probes.image import identity_of, image_inspect_probe, image_store_probe
from orchestrator.transport.local import LocalTransport
from orchestrator.transport.pipe import open_pipe


def _controller_node() -> Node:
    return Node(
        name="controller",
        address="localhost",
        user=getpass.getuser(),
        rank=0,
        fabric_iface="lo",
    )


async def _local(argv: Sequence[str], data: bytes = b"") -> tuple[int | None, bytes]:
    """A helper command on the controller, fed `data`: its exit status and stdout."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await proc.communicate(data)
    return proc.returncode, out


async def _which(tool: str) -> bool:
    rc, _ = await _local(["sh", "-c", 'command -v "$1" >/dev/null 2>&1', "which", tool])
    return rc == 0


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
        img = await asyncio.to_thread(read_archive, source.path, reference)  # layers included
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
            layers=state.image.layers,
        )
    local = LocalTransport(_controller_node())
    controller = DockerCli()  # the controller's own daemon (its DOCKER_HOST, if set)
    inspect_p = image_inspect_probe(reference, controller)
    store_p = image_store_probe(controller)
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
        layers=facts.layers,
    )


async def _open_source(ctx: ChainContext, source: Source) -> SourceStream:
    """Start what produces the raw stream: `cat` of the archive, the controller's `docker save`,
    or `docker save` on a node over SSH (a fan-out from a node source)."""
    if source.kind is SourceKind.node:
        assert source.node is not None
        node = ctx.node(source.node)

        async def save_on_node(w: int) -> asyncio.subprocess.Process:
            pipe = await open_pipe(
                ctx.inventory,
                node,
                list(DockerCli.of(node)("save", ctx.reference)),
                options=ctx.pipe_options(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=w,
            )
            return pipe.proc

        return await _open_stream(save_on_node)
    if source.kind is SourceKind.tar:
        argv = ["cat", "--", str(source.path)]
    else:
        argv = list(DockerCli()("save", ctx.reference))
    return await spawn_stream(_filtered(ctx, argv))


def _filtered(ctx: ChainContext, argv: list[str]) -> list[str]:
    """`argv` wrapped by the layer filter when the plan drops layers (the source is still read
    once, whole; only what some receiver lacks goes on)."""
    if not ctx.drop:
        return argv
    report = ["--report", str(ctx.filter_report)] if ctx.filter_report else []
    return [sys.executable, layer_filter.__file__, *report, "--drop", *ctx.drop, "--", *argv]


def _read_upto(fd: int, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, min(CHUNK, n - len(buf)))
        if not chunk:
            break
        buf.extend(chunk)
    return bytes(buf)


async def _zstd_size(data: bytes) -> int:
    rc, out = await _local(["zstd", f"-{ZSTD_WIRE_LEVEL}", "-q", "-c"], data)
    return len(out) if rc == 0 else 0
