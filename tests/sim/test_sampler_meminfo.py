"""The page-cache watcher through the real sampling path: the node sampler script that runs on
every node (runtime/node_sampler.py, `python3 -c`), in a mount namespace whose /proc/meminfo the
test feeds (a bind mount over it), about a live process loading a weights file by mmap; its JSON
folded by the real reducer into the state the watchers judge. Root and unshare(1) needed."""

from __future__ import annotations

import json
import mmap
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.models.run import LogLine, RankStarted, Sample
from orchestrator.supervisor.state import initial_state, reduce
from orchestrator.supervisor.watchers import WatchConfig, watch
from tests.engine_lines import by_id

pytestmark = pytest.mark.sim

GIB = 2**30
SAMPLER = Path(__file__).resolve().parents[2] / "orchestrator" / "runtime" / "node_sampler.py"

# A GB10 mid-load with its page cache full of weights (seed 002's shape): MemFree under the floor.
STARVED = """MemTotal:       125489508 kB
MemFree:          2097152 kB
MemAvailable:   101711872 kB
Buffers:            10240 kB
Cached:          94371840 kB
SwapCached:             0 kB
Dirty:               2048 kB
SwapTotal:              0 kB
SwapFree:               0 kB
"""


def _need_root() -> None:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        message = "needs root and unshare(1): a mount namespace to feed /proc/meminfo"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def test_a_starved_node_seen_through_the_sampler_warns_with_numbers_never_drop_caches(
    tmp_path: Path,
) -> None:
    _need_root()
    weights = tmp_path / "model-00001-of-00001.safetensors"
    weights.write_bytes(os.urandom(16 * 2**20))
    fake = tmp_path / "meminfo"
    fake.write_text(STARVED)
    with weights.open("rb") as f:
        view = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            _ = bytes(view[: 8 * 2**20])  # this process is the rank: half its share is in
            script = 'mount --bind "$1" /proc/meminfo && exec "$2" -c "$(cat "$3")" "$4"'
            done = subprocess.run(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                 str(fake), sys.executable, str(SAMPLER), str(os.getpid())],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
        finally:
            view.close()
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["mem_free"] == 2097152 * 1024 and data["cached"] == 94371840 * 1024
    assert data["mapped"] >= 8 * 2**20  # the mmap load is seen
    state = initial_state(["spark-3"])
    state = reduce(state, RankStarted(ts=0, rank=0, container="c0"))
    begin = by_id("sglang-load-weight-begin").text
    state = reduce(state, LogLine(ts=1, rank=0, stream="stdout", text=begin))
    fields = ("mem_free", "mem_available", "cached", "dirty", "read_bytes")
    state = reduce(
        state,
        Sample(ts=2, rank=0, rchar=data["weight_bytes"], **{k: data[k] for k in fields}),
    )
    [warning] = [f for f in watch(state, 2, WatchConfig()) if f.watcher == "page-cache"]
    assert "MemFree 2.0 GiB is under the 8.0 GiB floor while Cached is 90.0 GiB" in warning.message
    assert "do NOT drop caches" in warning.advice
    assert state.rank(0).bytes_read >= 8 * 2**20
