"""A rank that exits while its node is sampled ends its sample quietly. CI caught the sampler
exiting 1 on `/proc/<pid>/cgroup` (the process had gone between the existence check and the
read): the supervisor took the failed sample for a lost node, and the failed boot's kernel
window was not collected from that node."""

from __future__ import annotations

import json
import subprocess
import sys

from orchestrator.runtime import node_sampler
from orchestrator.runtime.node_sampler import cgroup_dir, io_sums, rank_pids


def _gone_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid  # reaped: /proc/<pid> no longer exists (pids are not reused this fast)


def test_the_pieces_answer_nothing_for_a_process_that_is_gone() -> None:
    pid = _gone_pid()
    assert cgroup_dir(pid) is None
    assert rank_pids(pid) == [pid]  # itself, from the parent links: nothing to read there
    assert io_sums(pid) == (None, None, "none")


def test_the_sampler_prints_the_nodes_memory_when_its_process_went_between_check_and_read(
    monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    pid = _gone_pid()
    real_exists = node_sampler.os.path.exists
    # the race itself: /proc/<pid> still there when checked, gone when read
    monkeypatch.setattr(
        node_sampler.os.path,
        "exists",
        lambda p: True if p == f"/proc/{pid}" else real_exists(p),
    )
    monkeypatch.setattr(sys, "argv", ["node_sampler", str(pid)])
    node_sampler.main()
    doc = json.loads(capsys.readouterr().out)
    assert doc["mem_free"] is not None
    assert doc["rchar"] is None and doc["io_source"] == "none"
