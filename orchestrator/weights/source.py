"""The source directory on the controller: walk it, refuse what cannot be sent (unreadable files,
symlinks out of the model), and know every sha256 that is already known: Hugging Face's own
for LFS files (a hub cache's blob name, or the etag a `--local-dir` download recorded), else
the controller's record of earlier sends."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.paths import state_dir
from orchestrator.weights.manifest import FileEntry, Manifest
from orchestrator.weights.node_program import META

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# Never part of a model: git's store (a git-lfs clone), our own state, huggingface-cli's
# `--local-dir` bookkeeping.
_SKIP_DIRS = frozenset({".git", META, ".cache"})


@dataclass(frozen=True)
class SourceModel:
    root: Path
    manifest: Manifest
    hub_repo: str | None = None  # "org/name" when the directory is a hub cache snapshot
    from_hub: int = 0  # files whose sha256 came from the hub cache
    from_record: int = 0  # ... from the controller's record of an earlier send

    @property
    def default_name(self) -> str:
        return self.hub_repo or self.root.name


def hub_repo_of(root: Path) -> str | None:
    """`org/name` when `root` is `.../models--org--name/snapshots/<revision>`."""
    snaps = root.parent
    repo = snaps.parent
    if snaps.name == "snapshots" and repo.name.startswith("models--") and (repo / "blobs").is_dir():
        return repo.name.removeprefix("models--").replace("--", "/", 1)
    return None


def local_dir_sha(root: Path, rel: str, mtime: float) -> str | None:
    """The sha256 `huggingface-cli download --local-dir` recorded for an LFS file: line 2 (the
    etag) of `.cache/huggingface/download/<path>.metadata`, trusted as huggingface_hub's own
    `read_download_metadata` does: only if the file is not newer than the record (1 s slack)."""
    meta = root / ".cache" / "huggingface" / "download" / f"{rel}.metadata"
    try:
        lines = meta.read_text(encoding="utf-8").splitlines()
        etag, stamp = lines[1].strip(), float(lines[2])
    except (OSError, ValueError, IndexError):
        return None
    return etag if _SHA256.match(etag) and mtime - 1 <= stamp else None


def _record_path() -> Path:
    return state_dir() / "weights" / "sums.json"


def read_record() -> dict[str, dict[str, object]]:
    try:
        data = json.loads(_record_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def remember_sums(root: Path, manifest: Manifest) -> None:
    """Record the sums computed while sending, keyed by the real file and its size and mtime,
    so the next push of an unchanged file does not read it again to know its identity."""
    record = read_record()
    for f in manifest.files:
        if not f.sha256:
            continue
        try:
            real = os.path.realpath(root / f.path)
            st = os.stat(real)
        except OSError:
            continue
        record[real] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": f.sha256}
    path = _record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def scan_source(model_dir: Path, *, name: str | None = None) -> SourceModel:
    """Every file of the model, with the sha256s already known. Raises ConfigError (one line
    per problem) for a missing directory, unreadable files, symlinks that lead out."""
    if not model_dir.exists():
        raise ConfigError(f"{model_dir}: no such directory", hint="give the model's directory")
    if not model_dir.is_dir():
        raise ConfigError(f"{model_dir}: not a directory", hint="give the model's directory")
    root = model_dir.resolve()
    repo = hub_repo_of(root)
    blobs = (root.parent.parent / "blobs").resolve() if repo else None
    record = read_record()
    problems: list[str] = []
    files: list[FileEntry] = []
    from_hub = from_record = 0
    for base, dirs, names in os.walk(root, onerror=lambda e: problems.append(_oserr(e))):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for d in list(dirs):
            if os.path.islink(os.path.join(base, d)):
                problems.append(f"{Path(base, d)}: a directory symlink (copy or flatten it)")
                dirs.remove(d)
        for n in sorted(names):
            path = Path(base, n)
            rel = path.relative_to(root).as_posix()
            real = Path(os.path.realpath(path))
            inside = real.is_relative_to(root) or (blobs is not None and real.is_relative_to(blobs))
            if path.is_symlink() and not inside:
                problems.append(f"{path}: a symlink that leads out of the model dir (to {real})")
                continue
            try:
                st = os.stat(real)
                if not stat.S_ISREG(st.st_mode):  # a FIFO or device: never opened (it may block)
                    problems.append(f"{path}: not a regular file")
                    continue
                with open(real, "rb") as f:
                    f.read(1)
            except OSError as exc:
                problems.append(f"{path}: cannot read it ({exc.strerror})")
                continue
            sha = None
            if blobs is not None and real.parent == blobs and _SHA256.match(real.name):
                sha, from_hub = real.name, from_hub + 1
            elif (sha := local_dir_sha(root, rel, st.st_mtime)) is not None:
                from_hub += 1
            else:
                rec = record.get(str(real))
                if (
                    isinstance(rec, dict)
                    and rec.get("size") == st.st_size
                    and rec.get("mtime_ns") == st.st_mtime_ns
                ):
                    sha, from_record = str(rec["sha256"]), from_record + 1
            files.append(FileEntry(path=rel, size=st.st_size, sha256=sha))
    if problems:
        raise ConfigError(
            problems[0],
            hint="fix the source directory; nothing was sent",
            more=tuple(problems[1:]),
        )
    if not files:
        raise ConfigError(f"{model_dir}: no files in it", hint="give the model's directory")
    manifest = Manifest(model=name or repo or root.name, files=tuple(files))
    return SourceModel(
        root=root, manifest=manifest, hub_repo=repo, from_hub=from_hub, from_record=from_record
    )


def _oserr(exc: OSError) -> str:
    return f"{exc.filename}: cannot list it ({exc.strerror})"
