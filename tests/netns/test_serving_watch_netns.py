"""The serving watch on eight real sshd + dockerd nodes (issue 27): `cluster boot` hands over to
its detached watcher at READY; a node's management link cut while the group serves is named
NODE_LOST (the node and its rank) within 15 s, its log up to the cut is kept, and the run's
verdict becomes NODE_LOST; the watcher then ends on its own."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.testbed import Testbed
from tests.netns import test_boot_netns
from tests.netns.test_boot_netns import (
    RANKS,
    BootProc,
    container_name,
    node_logs,
    preserved,
    wait_for,
)

pytestmark = [pytest.mark.netns, pytest.mark.timeout(420)]

# The fixtures shared with test_boot_netns (one state folder for the session).
state_home = test_boot_netns.state_home
boots = test_boot_netns.boots

LOST = 4


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def incidents(boot: BootProc) -> list[dict]:
    return [e for e in boot.events() if e.get("kind") == "incident"]


def test_a_node_cut_while_serving_is_node_lost_within_15_s_with_its_log_kept(
    testbed: Testbed, boots: Callable[..., BootProc], state_home: Path
) -> None:
    boot = boots("--json", "--watch")
    verdict = boot.wait()
    assert verdict["outcome"] == "READY", verdict
    # `cluster boot` returned once its watcher held the run.
    holder = json.loads((boot.run / "lock.json").read_text())
    watcher = int(holder["pid"])
    assert holder["owner"] == "serving-watch" and alive(watcher), holder
    try:
        # Serving: the watch asked the head (a canary) and wrote the serving block.
        wait_for(
            "the watch's first canary",
            lambda: ((boot.status() or {}).get("serving") or {}).get("canary_p50_s"),
            timeout=60,
        )
        testbed.cut_link(LOST, "mgmt")
        cut = time.time()
        found = wait_for("an incident", lambda: incidents(boot), timeout=60)
        (incident,) = found
        named = float(incident["ts"]) - cut
        test_boot_netns.TIMINGS["serving: NODE_LOST named after the cut (s)"] = named
        print(f"NODE_LOST named {named:.1f} s after the cut")  # shown with -s
        assert incident["outcome"] == "NODE_LOST", incident
        assert incident["rank"] == LOST and incident["final"] is True, incident
        assert testbed.node(LOST).name in incident["message"], incident["message"]
        assert named <= 15.0, f"NODE_LOST named {named:.1f} s after the cut"
        wait_for("the watcher to end", lambda: not alive(watcher), timeout=60)
        final = boot.verdict() or {}
        assert final["outcome"] == "NODE_LOST" and final["rank"] == LOST, final
        assert not (boot.run / "lock.json").exists()
        # The node's log up to the cut is kept: the preserved copy is the start of the node's
        # log and holds the whole boot; its follower says it was not reconciled, and why.
        testbed.restore_link(LOST, "mgmt")
        kept = preserved(boot.run, LOST)
        node = node_logs(testbed, LOST, container_name(boot.id, LOST))
        for stream in ("stdout", "stderr"):
            assert node[stream].startswith(kept[stream]), stream
        assert b"Load weight end" in kept["stderr"]
        follow = boot.follow(LOST)
        assert follow["reconciled"] is False and "unreachable" in follow["unreconciled"]
        for k in set(range(RANKS)) - {LOST}:
            assert boot.follow(k)["reconciled"] is True, k
    finally:
        testbed.restore_link(LOST, "mgmt")
        if alive(watcher):  # a failed assertion above: end the watch before the teardown
            test_boot_netns.cluster(state_home, "stop", "--yes", "--run", boot.id, timeout=180)
            wait_for("the watcher to end", lambda: not alive(watcher), timeout=60)
