"""Benchmark: per-rank load progress measured from outside, against the bytes really read.

    PYTHONPATH=$PWD .venv/bin/python bench/load_progress.py [--size 512MiB] [--shards 8]
        [--world 4] [--rate 100MB/s] [--dir DIR]

The twin's weight reader (orchestrator/simulator/weights.py) loads one rank's share of real
safetensors-named files, once by mmap (the engines' default) and once by read(), each with a cold
page cache (the files dropped with posix_fadvise DONTNEED after writing, those files only) and
then warm (the same files again). While it reads, the node sampler's own functions
(runtime/node_sampler.py: rchar from /proc/PID/io, the resident pages of the weight-file
mappings from /proc/PID/smaps) are sampled the moment the reader reports each shard finished,
and compared with the bytes it reports: error = measured / true - 1, per shard event. Cold and
warm are told apart by the same sample's `read_bytes` (storage reads, by read() or by page faults):
about the rank's share on a cold cache, near zero on a warm one (`majflt` is printed too: the
kernel's readahead makes most cold mmap faults minor, so it is no sign). DIR must be on a disk, not tmpfs (fadvise cannot drop tmpfs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.runtime.node_sampler import mapped_weight_bytes, proc_io
from orchestrator.simulator.faults import parse_rate, parse_size
from orchestrator.simulator.weights import ReaderChild, make_weights


class Watch:
    """The supervisor's view of one reader child: sampled every 50 ms (the shards here load in
    a fraction of a second; a real one takes minutes and the supervisor samples every second)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.memory: dict[str, int] = {}
        self.base = proc_io([pid])[0]
        self.latest = 0
        self.majflt = self.read_bytes = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> int:
        rchar, self.read_bytes, _ = proc_io([self.pid])
        mapped, self.majflt = mapped_weight_bytes([self.pid], self.memory)
        self.latest = max(self.latest, rchar - self.base, mapped)
        return self.latest

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            self.sample()


def measure(directory: Path, world: int, rate: float, loader: str) -> dict[str, float]:
    """Per shard the reader reports done: measured / true - 1."""
    errors: list[float] = []
    majflt = read_bytes = 0
    for rank in range(world):
        spec = {"dir": str(directory), "rank": rank, "world": world, "rate": rate}
        child = ReaderChild({**spec, "loader": loader})
        watch = Watch(child.pid)
        try:
            while (e := child.next_event(30)) is not None and e.kind != "ready":
                pass
            child.send("load")
            watch.thread.start()
            while (e := child.next_event(120)) is not None and e.kind == "shard":
                errors.append(watch.sample() / e.values[-1] - 1)
            majflt, read_bytes = watch.majflt, watch.read_bytes
        finally:
            watch.stop.set()
            child.stop()
    return {
        "max_abs_error": max(abs(x) for x in errors),
        "median_error": statistics.median(errors),
        "samples": len(errors),
        "majflt_last": majflt,
        "read_bytes_last": read_bytes,
    }


def drop(directory: Path) -> None:
    for path in directory.glob("*.safetensors"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="512MiB")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--rate", default="100MB/s")
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    root = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="load-progress-", dir="/var/tmp"))
    make_weights(root, parse_size(a.size), a.shards, force=True)
    rate = parse_rate(a.rate)
    print(f"{a.size} in {a.shards} shards, {a.world} ranks, {a.rate}, in {root}")
    print(
        f"{'loader':6} {'cache':5} {'max |err|':>10} {'median':>8} {'n':>3} {'majflt':>7} "
        f"{'read_bytes':>11}"
    )
    for loader in ("mmap", "read"):
        drop(root)
        for cache in ("cold", "warm"):
            m = measure(root, a.world, rate, loader)
            print(
                f"{loader:6} {cache:5} {m['max_abs_error']:>9.2%} {m['median_error']:>8.2%} "
                f"{m['samples']:>3} {m['majflt_last']:>7} {m['read_bytes_last']:>11}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
