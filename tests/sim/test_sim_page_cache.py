"""Reading weights really fills the node's page cache, as on a GB10 where it counts as used."""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

import pytest

from orchestrator.simulator.weights import make_weights, meminfo
from tests.sim.conftest import Cluster

pytestmark = pytest.mark.sim

SIZE = 200 * 10**6


def proc_io(pid: int) -> dict[str, int]:
    pairs = (line.split(":") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return {key: int(value) for key, value in pairs}


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]


def resident_bytes(directory: Path) -> int:
    """How much of these weight files is in the page cache now, by mincore(2) over a private
    mapping (mapping touches no page; the answer is the files' own pages, whatever the rest of
    the machine caches or frees meanwhile). `fincore` (util-linux) reads the same."""
    total = 0
    for path in sorted(directory.glob("*.safetensors")):
        size = path.stat().st_size
        with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as mm:
            view = (ctypes.c_char * size).from_buffer(mm)
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = (ctypes.c_ubyte * pages)()
            failed = _LIBC.mincore(ctypes.addressof(view), size, vec)
            del view  # the mapping cannot close while a view of it lives
            if failed:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            total += sum(v & 1 for v in vec) * mmap.PAGESIZE
    return total


def evict(directory: Path) -> None:
    """Drop these files (only these) from the page cache, as make-weights leaves them."""
    for path in directory.glob("*.safetensors"):
        with open(path, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def one_read(tmp_path: Path, weights: Path, attempt: int) -> tuple[int, dict[str, int], str]:
    cluster = Cluster(tmp_path / f"attempt{attempt}", weights)
    cluster.tmp.mkdir()
    try:
        ranks, _ = cluster.start("sglang", 1, extra={0: ["--sim-read-rate", "unlimited"]})
        rank = ranks[0]
        rank.wait_for("Load weight begin.")
        child = rank.child_pid()
        line = rank.wait_for("Load weight end.", 30)
        return resident_bytes(weights), proc_io(child), line
    finally:
        cluster.stop_all()


def test_a_ranks_read_brings_its_weights_into_the_page_cache(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    make_weights(fresh, SIZE, 13)  # written, fsynced and dropped from the cache (fadvise)
    cold = resident_bytes(fresh)
    assert cold < 0.1 * SIZE, f"{cold} bytes of the fresh weights were already cached"
    # The files' own pages, not the machine's `Cached`: the CI runs other tiers beside this one
    # (netns nodes removing images free hundreds of MB of cache while we read: seen in CI,
    # Cached grew by 80 MB for a 200 MB read). Two tries against the kernel's own reclaim.
    cached, io, line = one_read(tmp_path, fresh, 1)
    if cached < 0.5 * SIZE:
        evict(fresh)
        cached, io, line = one_read(tmp_path, fresh, 2)
    assert cached >= 0.5 * SIZE, f"only {cached} of {SIZE} bytes cached after the read, twice"
    # The twin loads by mmap, as the engines do by default: the reader child's page faults brought
    # most of its share from the disk (cold), and no read() counted it (rchar: imports only).
    assert io["read_bytes"] >= 0.5 * SIZE
    assert io["rchar"] < 0.1 * SIZE
    # GB10 semantics: the load line's "avail mem" is MemFree, which the cache ate into.
    avail_gb = float(line.split("avail mem=")[1].split(" GB")[0])
    assert abs(avail_gb * 2**30 - meminfo()["MemFree"]) < 2 * 2**30
