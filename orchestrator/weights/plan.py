"""Decide before any byte moves (pure): where the copy goes, what each node lacks, whether it has
the room, and which nodes can share one chain (the same files to receive)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence

from orchestrator.errors import ConfigError
from orchestrator.weights.manifest import FileEntry, Manifest, missing_on
from orchestrator.weights.model import Holding, WeightsOptions


def destination(
    dest: str | None, host_dir: str | None, root: str, model_name: str, *, where: str
) -> str:
    """--dest, else the recipe's model.host_dir, else ROOT/<model name>; always strictly under
    the inventory's allowed root (`cluster_weights_root`)."""
    chosen = dest or host_dir or posixpath.join(root, model_name)
    if not chosen.startswith("/"):
        raise ConfigError(f"destination {chosen!r} is not an absolute path", where=where)
    norm = posixpath.normpath(chosen)
    root_norm = posixpath.normpath(root)
    if norm == root_norm or not norm.startswith(root_norm.rstrip("/") + "/"):
        raise ConfigError(
            f"destination {chosen} is outside the allowed root {root_norm}",
            where=where,
            hint="choose a directory under it, or set cluster_weights_root in the inventory",
        )
    return norm


def needs(manifest: Manifest, holding: Holding) -> list[FileEntry]:
    return missing_on(manifest, holding.held)


def headroom(opts: WeightsOptions, nbytes: int) -> int:
    return max(opts.headroom_bytes, int(nbytes * opts.headroom_fraction))


def space_problem(holding: Holding, nbytes: int, opts: WeightsOptions) -> str | None:
    """Why `holding`'s disk cannot take `nbytes` more (plus headroom), or None."""
    if nbytes == 0 or holding.free_bytes is None:
        return None
    want = nbytes + headroom(opts, nbytes)
    if holding.free_bytes >= want:
        return None
    return (
        f"not enough free space at {holding.free_path}: {_gib(holding.free_bytes)} free, "
        f"{_gib(nbytes)} to write + {_gib(want - nbytes)} headroom; nothing was sent"
    )


def group_by_files(
    pending: Mapping[str, Sequence[str]], order: Sequence[str]
) -> list[tuple[list[str], list[str]]]:
    """Nodes that lack exactly the same files share one chain: [(nodes in order, paths)], the
    group of the first node in `order` first."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for name in order:
        if name in pending:
            groups.setdefault(tuple(pending[name]), []).append(name)
    return [(nodes, list(paths)) for paths, nodes in groups.items()]


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"
