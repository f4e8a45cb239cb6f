"""Reading weights really fills the node's page cache, as on a GB10 where it counts as used."""

from __future__ import annotations

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


def evict(directory: Path) -> None:
    """Drop these files (only these) from the page cache, as make-weights leaves them."""
    for path in directory.glob("*.safetensors"):
        with open(path, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def one_read(tmp_path: Path, weights: Path, attempt: int) -> tuple[int, dict[str, int], str]:
    cluster = Cluster(tmp_path / f"attempt{attempt}", weights)
    cluster.tmp.mkdir()
    try:
        before = meminfo()["Cached"]
        ranks, _ = cluster.start("sglang", 1, extra={0: ["--sim-read-rate", "unlimited"]})
        rank = ranks[0]
        rank.wait_for("Load weight begin.")
        child = rank.child_pid()
        line = rank.wait_for("Load weight end.", 30)
        after = meminfo()["Cached"]
        return after - before, proc_io(child), line
    finally:
        cluster.stop_all()


def test_the_page_cache_grows_by_about_the_bytes_a_rank_reads(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    make_weights(fresh, SIZE, 13)  # written, fsynced and dropped from the cache (fadvise)
    # The page cache is this whole machine's: other work can shrink it while we read. Two tries,
    # and a generous bound.
    grown, io, line = one_read(tmp_path, fresh, 1)
    if grown < 0.5 * SIZE:
        evict(fresh)
        grown, io, line = one_read(tmp_path, fresh, 2)
    assert grown >= 0.5 * SIZE, f"Cached grew by {grown} bytes only, twice"
    # The twin loads by mmap, as the engines do by default: the reader child's page faults brought
    # most of its share from the disk (cold), and no read() counted it (rchar: imports only).
    assert io["read_bytes"] >= 0.5 * SIZE
    assert io["rchar"] < 0.1 * SIZE
    # GB10 semantics: the load line's "avail mem" is MemFree, which the cache ate into.
    avail_gb = float(line.split("avail mem=")[1].split(" GB")[0])
    assert abs(avail_gb * 2**30 - meminfo()["MemFree"]) < 2 * 2**30
