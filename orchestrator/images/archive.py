"""Archives (pure over a file): what a `docker save` tarball holds, without unpacking layers."""

from __future__ import annotations

import hashlib
import json
import posixpath
import tarfile
from pathlib import Path
from typing import Any

from orchestrator.errors import ImageError
from orchestrator.images.model import Source, SourceImage, SourceKind
from orchestrator.probes.host import oci_arch
from orchestrator.probes.image import ImageIdentity, content_key


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
            sizes = _layer_sizes(tar, entry)
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
        layers=tuple(layers),
        layer_sizes=sizes if sizes is not None and len(sizes) == len(layers) else None,
    )


def _layer_sizes(tar: tarfile.TarFile, entry: dict[str, Any]) -> tuple[int, ...] | None:
    """The size of each layer file the manifest names (a symlinked duplicate: its target's)."""
    out = []
    for name in entry.get("Layers") or []:
        try:
            m = tar.getmember(str(name))
            for _ in range(8):  # a duplicate layer is a symlink to the first copy
                if not m.issym():
                    break
                m = tar.getmember(
                    posixpath.normpath(posixpath.join(posixpath.dirname(m.name), m.linkname))
                )
        except KeyError:
            return None
        out.append(m.size)
    return tuple(out)


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
