"""The built-in cluster's modelled node memory (simulator/nodeview.py): a leak lowers only its
own node's MemAvailable and MemFree, in /proc/meminfo's format, read back by the sampler."""

from __future__ import annotations

from orchestrator.probes.meminfo import parse_meminfo
from orchestrator.simulator.nodeview import node_view, read_node_view, write_node_view

BASE = """MemTotal:       24000000 kB
MemFree:         8000000 kB
MemAvailable:   16000000 kB
Buffers:           10240 kB
Cached:          7000000 kB
Dirty:              2048 kB
SwapTotal:             0 kB
SwapFree:              0 kB
HugePages_Total:       0
"""


def test_the_leaked_bytes_come_off_memavailable_and_memfree_only():
    text = node_view(BASE, 1024 * 1_000_000)  # 1,000,000 kB leaked
    m = parse_meminfo(text)
    before = parse_meminfo(BASE)
    assert before.mem_available is not None and m.mem_available is not None
    assert before.mem_available - m.mem_available == 1_000_000 * 1024
    assert m.mem_free == (8_000_000 - 1_000_000) * 1024
    assert m.cached == before.cached and m.mem_total == before.mem_total
    assert text.splitlines()[-1] == "HugePages_Total:       0"  # the rest as it was


def test_the_view_never_goes_below_zero_and_is_written_whole(tmp_path):
    (tmp_path / "node-meminfo.base").write_text(BASE)
    write_node_view(tmp_path, 10**12)
    text = read_node_view(tmp_path)
    assert text is not None
    m = parse_meminfo(text)
    assert m.mem_available == 0 and m.mem_free == 0
    assert not list(tmp_path.glob("*.tmp"))
    assert read_node_view(tmp_path / "nowhere") is None
