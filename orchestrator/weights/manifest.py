"""A model's identity by content (pure): the manifest (path, size, sha256 per file), its short
id, and what one node lacks of it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from orchestrator.models.base import StrictModel


class FileEntry(StrictModel):
    path: str = Field(description="relative to the model directory, '/' separated")
    size: int = Field(ge=0)
    sha256: str | None = Field(default=None, description="None: not known yet (hashed on send)")


class Manifest(StrictModel):
    """Every file of one model directory. Its id names the content, not where it lives."""

    model: str = Field(description="a name for people (the directory or the hub repo)")
    files: tuple[FileEntry, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def complete(self) -> bool:
        """Every sha256 known (a manifest whose id means something)."""
        return all(f.sha256 for f in self.files)

    def id(self) -> str:
        """sha256 of the sorted (path, size, sha256) list: equal ids, byte-identical models."""
        rows = sorted((f.path, f.size, f.sha256 or "") for f in self.files)
        blob = json.dumps(rows, separators=(",", ":")).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()

    def short_id(self) -> str:
        return self.id().removeprefix("sha256:")[:12]

    def by_path(self) -> dict[str, FileEntry]:
        return {f.path: f for f in self.files}

    def with_sums(self, sums: Mapping[str, str]) -> Manifest:
        """The same files, with the sums that were not known yet."""
        files = tuple(
            f.model_copy(update={"sha256": sums[f.path]}) if not f.sha256 and f.path in sums else f
            for f in self.files
        )
        return self.model_copy(update={"files": files})

    def as_json(self) -> dict[str, object]:
        return {"model": self.model, "files": [f.model_dump() for f in self.files]}


def missing_on(manifest: Manifest, held: Mapping[str, str]) -> list[FileEntry]:
    """The files a node must receive: those it does not hold verified with the same sha256
    (`held`: path -> sha256 of the files whose recorded stamp still matches the disk). A file
    whose sha256 is not known yet is sent (it is hashed on the way)."""
    return [f for f in manifest.files if f.sha256 is None or held.get(f.path) != f.sha256]


def manifest_of(doc: dict[str, Any] | None) -> Manifest | None:
    """A manifest as a node recorded it (JSON), or None when there is none or it is malformed."""
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        return None
    try:
        return Manifest(
            model=str(doc.get("model", "?")),
            files=tuple(FileEntry(**f) for f in doc["files"]),
        )
    except (TypeError, ValueError):
        return None
