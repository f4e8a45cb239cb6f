"""Checks of each node's resources: Docker, the image, GPUs, weights, memory, containers, disk,
clock, and SSH between peers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from orchestrator.models.inventory import Node
from orchestrator.models.recipe import Recipe
from orchestrator.preflight.model import Severity, gib

if TYPE_CHECKING:
    from orchestrator.preflight.checks.context import Judge
    from orchestrator.probes.peers import PeerResult

# -- the checks, one function each -----------------------------------------------------------


def _check_docker(j: Judge) -> None:
    for node, f in j.reachable():
        if f.docker is not None and not f.docker.reachable:
            j.add(
                "docker",
                Severity.error,
                node,
                f"the Docker daemon on {node.name} does not answer",
                f.docker.error or "docker info: no server",
                f"`sudo systemctl start docker` on {node.name} (and `systemctl status docker` for "
                "why it stopped)",
            )


def _check_image(j: Judge) -> None:
    ref = j.recipe.image.reference
    want = j.recipe.image.digest
    for node, f in j.reachable():
        image = f.image
        if image is None:
            continue
        if not image.present:
            pushed = j.image_will_be_pushed
            j.add(
                "image-missing",
                Severity.warning if pushed else Severity.error,
                node,
                f"image {ref} is not on {node.name}"
                + (" (it will be pushed before any rank starts)" if pushed else ""),
                f"docker image inspect {ref} on {node.name}: No such image",
                f"`cluster image push {ref} -i {j.inventory.path}` (or `docker load` on "
                f"{node.name})",
            )
            continue
        if want is not None and not _holds_digest(image.id, image.repo_digests, want):
            j.add(
                "image-digest",
                Severity.error,
                node,
                f"{node.name} holds a different {ref} than the recipe's digest",
                f"Id {image.id}, RepoDigests {', '.join(image.repo_digests) or 'none'}; recipe "
                f"digest {want}",
                f"push the recipe's image again: `cluster image push {ref}`",
            )
        node_platform = f.host.platform if f.host else None
        if image.platform and node_platform and image.platform != node_platform:
            j.add(
                "image-platform",
                Severity.error,
                node,
                f"{ref} on {node.name} is {image.platform}, the node is {node_platform}",
                f"image {image.platform}; uname: {f.host.arch if f.host else '?'}",
                f"build or pull the {node_platform} variant (`docker pull --platform "
                f"{node_platform} …`)",
            )
        if j.image_ready is not None and j.image_ready.get(node.name) is False:
            j.add(
                "image-not-ready",
                Severity.error,
                node,
                f"{node.name} holds {ref} but could not run it (exec-readiness probe failed)",
                "the exec-readiness probe's last error is in the run's events",
                f"`cluster image probe {ref}` shows the error; re-push if the image is damaged",
            )


def _holds_digest(image_id: str | None, repo_digests: Sequence[str], digest: str) -> bool:
    """Is this the image `digest` names: its Id (the config digest on overlay2) or one of its
    repo digests (`repo@sha256:...`)?"""
    return image_id == digest or any(d.endswith("@" + digest) for d in repo_digests)


def _needs_gpu(recipe: Recipe) -> tuple[bool, bool]:
    """(asks for GPUs, names the nvidia runtime explicitly)."""
    runtime = any(
        x.partition("=")[2] == "nvidia" for x in recipe.docker.extra if x.startswith("--runtime")
    )
    return recipe.docker.gpus is not None, runtime


def _check_gpu(j: Judge) -> None:
    gpus, runtime = _needs_gpu(j.recipe)
    if not (gpus or runtime):
        return
    for node, f in j.reachable():
        if gpus and f.gpu is not None and not f.gpu.present:
            j.add(
                "gpu-missing",
                Severity.error,
                node,
                f"the recipe runs with --gpus {j.recipe.docker.gpus} but {node.name} shows no GPU",
                f.gpu.reason or "nvidia-smi found no GPU",
                f"check `nvidia-smi` on {node.name} (driver loaded? reboot after a driver update)",
            )
        if f.docker is not None and f.docker.reachable and not f.docker.nvidia_runtime:
            j.add(
                "gpu-runtime",
                Severity.error if runtime else Severity.warning,
                node,
                f"the Docker daemon on {node.name} has no nvidia runtime"
                + ("" if runtime else ": --gpus needs the NVIDIA Container Toolkit"),
                f"docker info runtimes: {', '.join(f.docker.runtimes) or 'none'}",
                "install the NVIDIA Container Toolkit, then `sudo nvidia-ctk runtime configure "
                "--runtime=docker && sudo systemctl restart docker`",
            )


def _check_weights(j: Judge) -> None:
    path = j.recipe.model.host_dir
    if path is None:
        return
    seen: dict[str, tuple[Node, int | None, int | None]] = {}
    for node, f in j.reachable():
        w = f.weights
        if w is None:
            continue
        if not w.exists or not w.is_dir:
            j.add(
                "weights-missing",
                Severity.error,
                node,
                f"the weights directory {path} "
                + ("does not exist" if not w.exists else "is not a directory")
                + f" on {node.name}",
                f"{path} on {node.name}: " + ("missing" if not w.exists else "not a directory"),
                f"copy or mount the weights at {path} on {node.name}: every node reads its own "
                "copy (or the same NFS export)",
            )
            continue
        seen[node.name] = (node, w.files, w.bytes)
    if len(seen) < 2:
        return
    counts = Counter((files, size) for _, files, size in seen.values())
    (ref_files, ref_bytes), _ = counts.most_common(1)[0]
    for name, (node, files, size) in seen.items():
        if (files, size) != (ref_files, ref_bytes):
            j.add(
                "weights-size",
                Severity.error,
                node,
                f"{node.name} holds a different {path}: {files} files, {size} bytes; most nodes "
                f"hold {ref_files} files, {ref_bytes} bytes",
                ", ".join(f"{n} {fl} files {sz} B" for n, (_, fl, sz) in seen.items()),
                f"re-sync {path} on {name} from a node with the full copy (`rsync -a --checksum`), "
                "or fix its mount",
            )


def _check_memory(j: Judge) -> None:
    per_rank = j.recipe.model.expected_bytes_per_rank
    need = int(per_rank * j.limits.mem_headroom) if per_rank else j.limits.min_mem_available
    basis = (
        f"the rank reads {gib(per_rank)} of weights (x{j.limits.mem_headroom:g})"
        if per_rank
        else f"the floor of {gib(j.limits.min_mem_available)}"
    )
    for node, f in j.reachable():
        m = f.memory
        if m is None:
            continue
        evidence = (
            f"MemTotal {gib(m.mem_total)}, MemAvailable {gib(m.mem_available)}, MemFree "
            f"{gib(m.mem_free)}, Cached {gib(m.cached)}"
        )
        if m.mem_available < need:
            j.add(
                "memory-low",
                Severity.error,
                node,
                f"too little memory on {node.name}: MemAvailable {gib(m.mem_available)}, a rank "
                f"needs about {gib(need)} ({basis})",
                evidence,
                f"stop what holds memory on {node.name} (other containers, an earlier run: see "
                "the container problems) and run preflight again",
            )
        elif m.mem_free < j.limits.memfree_floor:
            j.add(
                "memory-free-low",
                Severity.warning,
                node,
                f"MemFree on {node.name} is {gib(m.mem_free)}, under {gib(j.limits.memfree_floor)}:"
                " on a GB10 the GPU's free memory is MemFree, and page cache counts as used",
                evidence,
                "usually harmless before a load (the kernel reclaims cache); if the engine "
                "refuses at startup for free memory, stop other memory users. Never drop caches "
                "mid-load (seed 002 boot 4: a 40 min load became 3.5 h)",
            )


def _check_containers(j: Judge) -> None:
    for node, f in j.reachable():
        for c in f.containers or ():
            if c.cluster_run is not None and c.cluster_run != j.run_id:
                j.add(
                    "containers-earlier-run",
                    Severity.error,
                    node,
                    f"container {c.name} of run {c.cluster_run} still runs on {node.name} "
                    f"(rank {c.labels.get('cluster.rank', '?')}, {gib(c.memory_bytes)})",
                    f"{c.name} {c.image} {c.status}",
                    f"`cluster stop {c.cluster_run}`, or `docker rm -f {c.name}` on {node.name}",
                )
            elif (
                c.cluster_run is None
                and c.memory_bytes is not None
                and c.memory_bytes >= j.limits.container_memory
            ):
                j.add(
                    "containers-memory",
                    Severity.error,
                    node,
                    f"container {c.name} holds {gib(c.memory_bytes)} on {node.name}: on a GB10 "
                    "that memory is the GPU's too",
                    f"{c.name} ({c.image}) {c.status}, {gib(c.memory_bytes)}",
                    f"`docker stop {c.name}` on {node.name} if it can go (seed 001: another model "
                    "had to be stopped first)",
                )


def _check_disk(j: Judge) -> None:
    for node, f in j.reachable():
        root = f.docker.root_dir if f.docker is not None else None
        usage = f.disk(root) if root else None
        if usage is None or usage.available_bytes is None:
            continue
        missing = f.image is not None and not f.image.present
        evidence = (
            f"{root} on {usage.filesystem} ({usage.mount}): {gib(usage.available_bytes)} free of "
            f"{gib(usage.total_bytes)}"
        )
        size = j.recipe.image.size_bytes
        # The archive streams into `docker load`, which writes the layers next to their
        # unpacked copies: twice the image, as the engines' Spark images are one or two layers.
        need = 2 * size if size is not None else j.limits.image_free
        if missing and usage.available_bytes < need:
            j.add(
                "disk-image",
                Severity.error,
                node,
                f"{node.name} must still load the image but has {gib(usage.available_bytes)} free "
                f"on the Docker data root (needs {gib(need)}"
                + (f": twice the image's {gib(size)})" if size is not None else ")"),
                evidence,
                f"free space on {node.name}: `docker image prune`, `docker system df` shows what "
                "is held",
            )
        elif usage.available_bytes < j.limits.docker_free_floor:
            j.add(
                "disk-low",
                Severity.warning,
                node,
                f"only {gib(usage.available_bytes)} free on {node.name}'s Docker data root: the "
                "rank's log and writable layer live there",
                evidence,
                f"free space on {node.name} (`docker system df`)",
            )


def _check_clock(j: Judge) -> None:
    bound = j.limits.clock_skew_s
    for node, f in j.reachable():
        c = f.clock
        if c is None:
            continue
        if abs(c.offset_s) - c.uncertainty_s > bound:
            j.add(
                "clock",
                Severity.warning,
                node,
                f"{node.name}'s clock is {c.offset_s:+.2f} s off the controller's (bound "
                f"{bound:g} s): merged logs and barrier timings would lie",
                f"offset {c.offset_s:+.3f} s ± {c.uncertainty_s:.3f} s",
                f"enable time sync on {node.name}: `sudo timedatectl set-ntp true` (chrony or "
                "systemd-timesyncd)",
            )


def _check_peers(j: Judge) -> None:
    severity = Severity.error if j.need_peer_ssh else Severity.warning
    for node, f in j.reachable():
        bad = [p for p in f.peers or () if not p.ok]
        if not bad:
            continue
        j.add(
            "peer-ssh",
            severity,
            node,
            f"{node.name} cannot SSH to {_targets(bad)}, the next node in the image chain"
            + (": the chain needs it" if j.need_peer_ssh else ""),
            "; ".join(f"{p.target}: exit {p.exit_status} {p.message}".strip() for p in bad),
            f"from {node.name}: `ssh-copy-id` {_targets(bad)} and accept its host key once (or "
            "run ansible/ prepare, which distributes keys and known_hosts)",
        )


def _targets(results: list[PeerResult]) -> str:
    return ", ".join(p.target for p in results)
