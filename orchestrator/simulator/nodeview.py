"""A simulated node's own memory reading on the built-in cluster.

The built-in cluster runs its eight "nodes" as processes on one machine: they share one
/proc/meminfo. A leak made of real pages would lower all eight nodes' readings alike (and ride
on whatever else this machine is doing), where on a real cluster only the leaking node's falls.
So there, a `leak=` fault is modelled: the rank writes its node's reading into `node-meminfo`
beside its logs (the process runtime gives it the folder as CLUSTER_SIM_NODE_DIR), in
/proc/meminfo's own format: the machine's reading when the leak began, less the bytes leaked so
far (MemAvailable and MemFree). The process runtime's sampler reads that file for the node when
it exists (runtime/process.py), /proc/meminfo otherwise. On the netns testbed and on real nodes a
rank runs in a container of its own and the leak is real pages.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_NODE_DIR = "CLUSTER_SIM_NODE_DIR"
NODE_VIEW = "node-meminfo"
_SHRINKS = ("MemAvailable", "MemFree")


def node_view_dir() -> Path | None:
    """Where this rank's node reading goes (the built-in cluster), or None (a container)."""
    value = os.environ.get(ENV_NODE_DIR)
    return Path(value) if value else None


def _baseline(folder: Path) -> str:
    """The machine's /proc/meminfo when the leak began (kept beside the view)."""
    kept = folder / f"{NODE_VIEW}.base"
    if not kept.exists():
        text = Path("/proc/meminfo").read_text(encoding="ascii")
        tmp = kept.with_suffix(".tmp")
        tmp.write_text(text, encoding="ascii")
        os.replace(tmp, kept)
    return kept.read_text(encoding="ascii")


def node_view(baseline: str, leaked: int) -> str:
    """`baseline` (/proc/meminfo text) with `leaked` bytes less MemAvailable and MemFree."""
    out = []
    for line in baseline.splitlines():
        key, sep, rest = line.partition(":")
        words = rest.split()
        if sep and key in _SHRINKS and words and words[0].isdigit():
            kb = max(int(words[0]) - leaked // 1024, 0)
            line = f"{key}:{kb:>16} kB"
        out.append(line)
    return "\n".join(out) + "\n"


def write_node_view(folder: Path, leaked: int) -> None:
    """This node's reading now: atomically (the sampler never reads half a file)."""
    text = node_view(_baseline(folder), leaked)
    tmp = folder / f"{NODE_VIEW}.tmp"
    tmp.write_text(text, encoding="ascii")
    os.replace(tmp, folder / NODE_VIEW)


def read_node_view(folder: Path) -> str | None:
    """The modelled reading of the node whose rank writes into `folder`, if it has one."""
    try:
        return (folder / NODE_VIEW).read_text(encoding="ascii")
    except OSError:
        return None
