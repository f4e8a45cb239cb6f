"""The node sampler sees an mmap load: a real mapping of a real file, faulted in by this process,
counted from /proc/self/smaps, and remembered after the file is unmapped (monotone)."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from orchestrator.runtime.node_sampler import mapped_weight_bytes, proc_io

MIB = 1 << 20


def test_mapped_weight_pages_are_counted_and_remembered_after_unmapping(tmp_path: Path) -> None:
    path = tmp_path / "model-00001-of-00001.safetensors"
    path.write_bytes(os.urandom(8 * MIB))
    other = tmp_path / "notes.txt"  # not a weight file: never counted
    other.write_bytes(os.urandom(2 * MIB))
    memory: dict[str, int] = {}
    before, _ = mapped_weight_bytes([os.getpid()], memory)
    rchar_before = proc_io([os.getpid()])[0]
    with path.open("rb") as f, other.open("rb") as g:
        weights = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        notes = mmap.mmap(g.fileno(), 0, access=mmap.ACCESS_READ)
        _ = bytes(weights[: 4 * MIB])  # fault in the first half
        _ = bytes(notes[:])
        half, _ = mapped_weight_bytes([os.getpid()], memory)
        _ = bytes(weights[4 * MIB :])
        full, _ = mapped_weight_bytes([os.getpid()], memory)
        weights.close()
        notes.close()
    after, _ = mapped_weight_bytes([os.getpid()], memory)
    # fault-around may map a few pages past what was touched; never the notes file
    assert 4 * MIB <= half - before <= 4 * MIB + 256 * 1024
    assert full - before == 8 * MIB
    assert after == full  # unmapped, yet remembered: progress never goes back
    assert proc_io([os.getpid()])[0] - rchar_before < 4 * MIB  # the 8 MiB came by no read()
