"""Free disk where images and weights live, and the weights directory's size.

* `df_probe(paths)`: `df -P -k` per path (POSIX output: one line per filesystem, never wrapped),
  each section headed `== PATH`, so a missing path is reported for that path alone. Paths are the
  daemon's `DockerRootDir` (a `docker load` of a 35 GB image unpacks there) and the recipe's
  `model.host_dir`.
* `weights_probe(path)`: whether the weights directory exists on the node, how many files it has
  and the sum of their sizes (`find -L -printf '%s'`, GNU findutils as on DGX OS; symlinks are
  followed, as in a Hugging Face snapshot of links into blobs). Directory entries are not
  counted: their sizes differ between NFS and a local disk holding the same files.
  Every node must hold the same weights: a different size on one node means a partial copy or a
  stale mount, found now instead of as a load error 40 minutes in.

Both are constant scripts that take the paths as positional parameters ("$@", "$1"): no path is
ever interpolated into shell text.
"""

from __future__ import annotations

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.probes.base import Probe, excerpt, fail

NAME_DF = "df"
NAME_WEIGHTS = "weights_dir"

DF_SCRIPT = """for p do
  printf '== %s\\n' "$p"
  df -P -k -- "$p" 2>&1
done
exit 0
"""

WEIGHTS_SCRIPT = """d=$1
if [ ! -e "$d" ]; then echo missing; exit 0; fi
if [ ! -d "$d" ]; then echo notdir; exit 0; fi
find -L "$d" -type f -printf '%s\\n' 2>/dev/null |
  awk '{ n++; s += $1 } END { printf "files %.0f\\nbytes %.0f\\n", n, s }'
"""


class DiskUsage(StrictModel):
    """The filesystem holding one path."""

    path: str
    present: bool = Field(description="False: df could not see the path")
    filesystem: str | None = None
    mount: str | None = None
    total_bytes: int | None = None
    used_bytes: int | None = None
    available_bytes: int | None = None
    error: str | None = Field(default=None, description="df's complaint when not present")


class WeightsDir(StrictModel):
    """The weights directory on one node."""

    path: str
    exists: bool
    is_dir: bool = False
    files: int | None = None
    bytes: int | None = Field(default=None, description="total apparent size of its files")


def parse_df(stdout: str) -> tuple[DiskUsage, ...]:
    """The output of `DF_SCRIPT` -> one `DiskUsage` per `== PATH` section."""
    sections: list[tuple[str, list[str]]] = []
    for raw in stdout.splitlines():
        if raw.startswith("== "):
            sections.append((raw[3:], []))
        elif raw.strip():
            if not sections:
                raise fail(NAME_DF, f"output before the first path marker: {excerpt(raw)!r}")
            sections[-1][1].append(raw)
    usages = []
    for path, lines in sections:
        rows = [ln for ln in lines if not ln.startswith("Filesystem")]
        if len(rows) == 1 and not rows[0].startswith("df:"):
            words = rows[0].split()
            if len(words) < 6 or not all(w.isdigit() for w in words[1:4]):
                raise fail(NAME_DF, f"{path}: not a POSIX df line: {excerpt(rows[0])!r}")
            usages.append(
                DiskUsage(
                    path=path,
                    present=True,
                    filesystem=words[0],
                    total_bytes=int(words[1]) * 1024,
                    used_bytes=int(words[2]) * 1024,
                    available_bytes=int(words[3]) * 1024,
                    mount=" ".join(words[5:]),
                )
            )
        else:
            usages.append(
                DiskUsage(path=path, present=False, error=" ".join(rows).strip() or "no answer")
            )
    return tuple(usages)


def parse_weights_dir(path: str, stdout: str) -> WeightsDir:
    """The output of `WEIGHTS_SCRIPT` for `path` -> `WeightsDir`."""
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    if lines == ["missing"]:
        return WeightsDir(path=path, exists=False)
    if lines == ["notdir"]:
        return WeightsDir(path=path, exists=True, is_dir=False)
    values: dict[str, int] = {}
    for line in lines:
        key, _, value = line.partition(" ")
        if key not in ("files", "bytes"):
            raise fail(NAME_WEIGHTS, f"unexpected line {excerpt(line)!r}")
        if value.strip().isdigit():
            values[key] = int(value)
    if "files" not in values:
        raise fail(NAME_WEIGHTS, f"no file count in {excerpt(stdout)!r}")
    return WeightsDir(
        path=path, exists=True, is_dir=True, files=values["files"], bytes=values.get("bytes")
    )


def df_probe(paths: tuple[str, ...]) -> Probe[tuple[DiskUsage, ...]]:
    return Probe(name=NAME_DF, argv=("sh", "-c", DF_SCRIPT, "df-probe", *paths), parse=parse_df)


def weights_probe(path: str) -> Probe[WeightsDir]:
    return Probe(
        name=NAME_WEIGHTS,
        argv=("sh", "-c", WEIGHTS_SCRIPT, "weights-probe", path),
        parse=lambda stdout: parse_weights_dir(path, stdout),
    )


class CopyFacts(StrictModel):
    """What a node holds at a weights directory, as `cluster weights` staged it."""

    dest: str
    manifest_id: str | None = Field(default=None, description="None: never staged there")
    model: str | None = None
    complete: bool = False
    total_bytes: int | None = None
    off: dict[str, str] = Field(default_factory=dict, description="path -> missing|changed|…")
