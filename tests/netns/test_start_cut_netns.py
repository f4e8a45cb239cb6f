"""A node's management link cut while its rank is being started (issue 31, item 7), on real
sshd and dockerd: the other ranks start side by side regardless, the boot names the cut node
NODE_LOST (not a rendezvous stall of ranks never started), and the postmortem blames it."""

from __future__ import annotations

import json
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.testbed import Testbed
from tests.netns import test_boot_netns
from tests.netns.test_boot_netns import CLUSTER, BootProc, cli_env, event_time, wait_for

pytestmark = [pytest.mark.netns, pytest.mark.timeout(420)]

# The fixtures shared with test_boot_netns (one state folder for the session).
state_home = test_boot_netns.state_home
boots = test_boot_netns.boots

CUT = 5
CUT_FOR_S = 75.0


def install_start_gate(tb: Testbed, node: int) -> Path:
    """The node's `docker run` says it began (a marker file), waits for the test to cut the
    node's management link, then runs for real; `heal` removes the wrapper."""
    marker = tb.node(node).faults_dir / "start-gate" / "began"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    tb.hook_docker(node, "run", f"touch {shlex.quote(str(marker))}; sleep 3")
    return marker


def test_a_link_cut_during_start_is_node_lost_naming_the_node_and_the_others_start(
    testbed: Testbed, boots: Callable[..., BootProc], state_home: Path
) -> None:
    marker = install_start_gate(testbed, CUT)
    boot = boots("--json", "--no-watch")

    def gate_reached() -> bool:
        if boot.proc.poll() is not None:
            pytest.fail(f"the boot ended before rank {CUT}'s start:\n{boot.output()}")
        return marker.exists()

    wait_for(f"rank {CUT}'s docker run", gate_reached, timeout=240, interval=0.05)
    testbed.cut_link(CUT, "mgmt")
    cut = time.time()
    # The link comes back only after the start's deadline (2 x the twin's connect timeout):
    # a node that comes back within it simply starts late, nobody having waited behind it.
    healer = threading.Timer(CUT_FOR_S, testbed.restore_link, args=(CUT, "mgmt"))
    healer.start()
    try:
        verdict = boot.wait()
    finally:  # the boot has decided: the link comes back now, not at the timer
        healer.cancel()
        testbed.restore_link(CUT, "mgmt")
    assert verdict.get("outcome") == "NODE_LOST", verdict
    assert verdict["rank"] == CUT and testbed.node(CUT).name in verdict["summary"]
    events = boot.events()
    started = {e["rank"]: event_time(e) for e in events if e.get("kind") == "rank_started"}
    assert sorted(started) == [k for k in range(8) if k != CUT]  # nobody waited behind rank 5
    [decided] = [e for e in events if e.get("kind") == "verdict"] or [None]
    ended = boot.ended or time.time()
    # Named within the start deadline (2 x the twin's connect timeout) plus a generous margin.
    assert ended - cut < 120, f"the boot ended {ended - cut:.0f} s after the cut"
    assert decided is None or decided.get("watcher") == "start"
    post = subprocess.run(
        [*CLUSTER, "postmortem", boot.id, "--json"],
        env=cli_env(state_home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    diagnosis = json.loads(post.stdout)
    assert diagnosis["first_failing_rank"] == CUT, post.stdout[-3000:]
