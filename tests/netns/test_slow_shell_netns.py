"""A login shell that takes 0.2 s (a ~/.bashrc with conda or pyenv init), on the netns testbed.

Every command sshd runs starts root's shell, and the testbed's slow `~/.bashrc` counts its
start-ups (`Testbed.shell_starts`). `inventory check` and preflight ask each node for its facts
in one batched command (probes/batch.py), so a node costs few start-ups, not one per probe;
the seconds are bench/slow_shell.py's to measure, this counts and checks the answers.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.inventory import load_inventory
from orchestrator.preflight.runner import run_preflight
from orchestrator.recipes import resolve_recipe
from orchestrator.simulator.twin import make_twin
from orchestrator.testbed import TEST_IMAGE, Testbed
from orchestrator.transport import ConnectOptions

pytestmark = [pytest.mark.netns, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def slow(testbed: Testbed, testbed_image: str) -> Iterator[Testbed]:
    testbed.heal()
    testbed.set_session(shell_delay_s=0.2)
    try:
        yield testbed
    finally:
        testbed.set_session(shell_delay_s=0.0)


def test_inventory_check_starts_one_shell_per_node_and_finds_every_node_healthy(
    slow: Testbed,
) -> None:
    slow.reset_shell_starts()
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "inventory", "check", "-i", str(slow.inventory),
         "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["healthy"] and len(report["nodes"]) == len(slow.nodes), report
    assert all(n["docker_server"] and n["hostname"] for n in report["nodes"]), report
    assert [slow.shell_starts(nd) for nd in slow.nodes] == [1] * len(slow.nodes)


def test_preflight_asks_each_node_in_a_few_shells_and_passes(slow: Testbed, tmp_path: Path) -> None:
    (tmp_path / "model-00001-of-00001.safetensors").write_bytes(b"\x01" * 4096)
    recipe = make_twin(
        resolve_recipe("mistral-large4-8x-sglang"),
        "test",
        python=sys.executable,
        image=TEST_IMAGE,
        weights_dir=str(tmp_path),
    )
    slow.reset_shell_starts()
    result = asyncio.run(run_preflight(recipe, load_inventory(slow.inventory), ConnectOptions()))
    facts = {f.node: f for f in result.facts}
    assert all(f.reachable and not f.errors for f in facts.values()), facts
    reach = result.report.reachability
    assert reach is not None and len(reach.results) == len(slow.nodes) and not reach.errors, reach
    assert all(r.ok for r in reach.results.values()), reach
    starts = [slow.shell_starts(nd) for nd in slow.nodes]
    # Every node: the probes' batch, the clock, free disk, the connect to the head's port, its
    # kernel and fabric health (one command: logind, link speed, the last hour's kernel) (5).
    # The head also runs the listener and the engine-args probe (6); the listener ends by
    # itself once every node has connected, so no `kill` follows (issue 31: that was a 7th
    # start-up whenever its stream's end lost the race with the last connect's answer).
    # Nothing else may start a shell.
    assert starts == [7] + [5] * (len(starts) - 1), starts


def test_preflight_asks_each_node_for_its_chain_neighbour_alone_in_its_connect_session(
    slow: Testbed, tmp_path: Path
) -> None:
    # Issue 31: the image chain needs node k to reach node k+1, so 7 SSH handshakes for 8 nodes
    # (not all 56 pairs), each node's in one command started beside the listener.
    recipe = make_twin(
        resolve_recipe("mistral-large4-8x-sglang"),
        "test",
        python=sys.executable,
        image=TEST_IMAGE,
        weights_dir=str(tmp_path),
    )
    inventory = load_inventory(slow.inventory)
    slow.reset_shell_starts()
    result = asyncio.run(run_preflight(recipe, inventory, ConnectOptions(), peers=True))
    asked = {f.node: [(p.target, p.ok) for p in f.peers or ()] for f in result.facts}
    nodes = inventory.nodes
    assert asked == {
        n.name: ([(f"{nodes[k + 1].user}@{nodes[k + 1].address}", True)] if k < 7 else [])
        for k, n in enumerate(nodes)
    }, asked
    assert not [p for p in result.report.problems if p.check == "peer-ssh"]
    # As above, plus each node's command for that SSH (not the last node's: it has no next),
    # and every node but the head is SSHed into once by its upstream neighbour.
    starts = [slow.shell_starts(nd) for nd in slow.nodes]
    assert starts == [8] + [7] * (len(starts) - 2) + [6], starts
