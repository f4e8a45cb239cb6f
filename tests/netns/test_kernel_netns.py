"""The node speaks too (issue 28), on eight real sshd + dockerd nodes.

- A rank killed by a real cgroup OOM (its container limited to 256 MB, the simulator allocating
  512 MB): the kernel's OOM-killer lines are in `nodes/<node>/kernel.log` (read through the
  real `dmesg`/journal of this machine, which every netns "node" shares), and the postmortem
  names that rank out-of-memory with the kernel's line, given to it by the container id the
  line's cgroup names, not to the seven other nodes whose logs hold the same line.
- A fixture Xid 79 on node 5 while rank 5 hangs in its load: the postmortem blames node 5 with
  gpu-fault (the others only report the barrier that expired).
- A fixture link-down on node 3 while rank 3 hangs in rendezvous names node 3.

The fixture lines reach the nodes through `CLUSTER_KERNEL_LOG` (`orchestrator/kernel/command.py`:
every node then reads `<dir>/<node>.log`), fed while the boot runs; each is a real kernel
message from the corpus (tests/fixtures/engine-lines/kernel-node.yaml) behind the journal
prefix a node would print now.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.kernel.command import ENV_FILE
from orchestrator.kernel.read import parse_line
from orchestrator.testbed import Testbed
from tests.engine_lines import by_id
from tests.netns.test_boot_netns import (  # noqa: F401 (fixtures)
    CLUSTER,
    BootProc,
    boots,
    cli_env,
    rank_loading,
    read_json,
    state_home,
    wait_for,
)

pytestmark = [pytest.mark.netns, pytest.mark.timeout(420)]


def postmortem(state: Path, run: Path) -> dict[str, Any]:
    done = subprocess.run(
        [*CLUSTER, "postmortem", str(run), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(state),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def journal_line(node: str, entry_id: str) -> str:
    """A real kernel message behind the prefix `journalctl -k -o short-iso-precise` writes now."""
    message = parse_line(1, by_id(entry_id).text).message
    return f"{datetime.now(UTC).isoformat(timespec='microseconds')} {node} kernel: {message}\n"


@pytest.fixture
def fixture_kernels(
    testbed: Testbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[int, str], str]:
    """Every node's kernel log is an (empty) file of this test; returns feed(rank, corpus id)."""
    folder = tmp_path / "kernel"
    folder.mkdir()
    for nd in testbed.nodes:
        (folder / f"{nd.name}.log").write_bytes(b"")
    monkeypatch.setenv(ENV_FILE, str(folder / "{node}.log"))

    def feed(rank: int, entry_id: str) -> str:
        name = testbed.node(rank).name
        line = journal_line(name, entry_id)
        with (folder / f"{name}.log").open("a") as fh:
            fh.write(line)
        return line

    return feed


def test_a_cgroup_oom_kill_is_in_the_nodes_kernel_log_and_names_the_rank_it_killed(
    testbed: Testbed,
    boots: Callable[..., BootProc],  # noqa: F811
    state_home: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV_FILE, raising=False)  # the machine's own kernel
    hog = 4
    flags = testbed.docker_run_limit_flags(hog, memory="256m")
    opts = [f"--sim-docker-opt={flags[i]}={flags[i + 1]}" for i in range(0, len(flags), 2)]
    boot = boots("--json", *opts, "--sim-fault", f"rank={hog}:hog=512MB")
    verdict = boot.wait()
    assert verdict.get("outcome") == "RANK_EXITED" and verdict["rank"] == hog, verdict
    node = testbed.node(hog).name
    # the failed boot's run directory holds every node's kernel window
    for nd in testbed.nodes:
        assert (boot.run / "nodes" / nd.name / "kernel.log").is_file(), nd.name
        assert read_json(boot.run / "nodes" / nd.name / "kernel.json")["error"] is None
    window = read_json(boot.run / "nodes" / node / "kernel.json")
    assert window["position"]["source"] in ("journal", "dmesg"), window  # root: readable
    text = (boot.run / "nodes" / node / "kernel.log").read_text(errors="replace")
    inspect = read_json(boot.run / f"rank-{hog}" / "inspect.json")
    container = (inspect[0] if isinstance(inspect, list) else inspect)["Id"]
    oom = [ln for ln in text.splitlines() if "oom-kill:" in ln and container in ln]
    assert oom, f"no oom-kill line naming {container[:12]} in {node}'s kernel.log:\n{text[-3000:]}"
    assert any("out of memory: Killed process" in ln for ln in text.splitlines()), text[-3000:]
    # one kernel under all eight "nodes": every node's window holds the line ...
    other = testbed.node(0).name
    assert container in (boot.run / "nodes" / other / "kernel.log").read_text(errors="replace")
    doc = postmortem(state_home, boot.run)
    # ... and only the rank whose container it names is blamed for it
    assert (doc["first_failing_rank"], doc["category"]) == (hog, "out-of-memory"), doc["verdict"]
    evidence = doc["root_cause"]["evidence"]
    assert any(e["file"] == f"nodes/{node}/kernel.log" for e in evidence), evidence
    for r in doc["ranks"]:
        if r["rank"] != hog:
            assert "host-oom-kill" not in r["signatures"], r


def test_an_xid_on_node_5_while_rank_5_hangs_blames_node_5_with_gpu_fault(
    testbed: Testbed,
    boots: Callable[..., BootProc],  # noqa: F811
    state_home: Path,  # noqa: F811
    fixture_kernels: Callable[[int, str], str],
) -> None:
    boot = boots("--json", "--sim-fault", "rank=5:hang-at=load")
    wait_for("rank 5 loading", lambda: rank_loading(boot, 5), timeout=120)
    line = fixture_kernels(5, "nvrm-xid-79-fallen-off-the-bus")
    verdict = boot.wait()
    assert verdict.get("outcome") != "READY", verdict
    node = testbed.node(5).name
    assert (boot.run / "nodes" / node / "kernel.log").read_text() == line  # byte-exact
    assert (boot.run / "nodes" / testbed.node(4).name / "kernel.log").read_bytes() == b""
    doc = postmortem(state_home, boot.run)
    assert (doc["first_failing_rank"], doc["category"]) == (5, "gpu-fault"), doc["verdict"]
    assert doc["root_cause"]["signature"] == "nvrm-xid"
    assert any("Xid 79" in n and "fallen off the bus" in n for n in doc["source"]["notes"])
    assert any(e["what"] == "nvrm-xid" and e["rank"] == 5 for e in doc["timeline"])


def test_a_link_down_on_node_3_during_rendezvous_names_node_3(
    testbed: Testbed,
    boots: Callable[..., BootProc],  # noqa: F811
    state_home: Path,  # noqa: F811
    fixture_kernels: Callable[[int, str], str],
) -> None:
    boot = boots("--json", "--sim-fault", "rank=3:hang-at=init")
    wait_for("the ranks started", lambda: (boot.run / "rank-3").is_dir(), timeout=120)
    fixture_kernels(3, "mlx5-core-link-down")
    verdict = boot.wait()
    assert verdict.get("outcome") != "READY", verdict
    doc = postmortem(state_home, boot.run)
    assert doc["first_failing_rank"] == 3, doc["verdict"]
    assert doc["category"] == "rendezvous-network"
    assert doc["root_cause"]["signature"] == "nic-link-down"
    ranks = {r["rank"]: r for r in doc["ranks"]}
    assert ranks[3]["node"] == testbed.node(3).name
