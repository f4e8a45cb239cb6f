"""The postmortem of a node cut off mid-load, on eight real sshd + dockerd nodes (issue 32).

One drill: every rank loads slowly (so the cut lands mid-load), node 5 loses both its links,
the supervisor ends the boot with NODE_LOST, and `cluster postmortem RUN --json` names rank 5 with
a network cause, from what the supervisor measured (its node_lost record and the samples that
stopped), not from what the others printed. Run it alone: the netns tier shares one testbed,
`flock /tmp/netns.lock .venv/bin/python -m pytest tests/netns/test_postmortem_netns.py -q`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from orchestrator.testbed import Testbed
from tests.netns.test_boot_netns import (  # noqa: F401  (fixtures, used by name)
    BootProc,
    all_loading,
    boots,
    cluster,
    state_home,
    wait_for,
)

CUT = 5


def test_a_node_cut_during_load_is_named_by_the_postmortem_with_a_network_cause(
    testbed: Testbed,
    boots: Callable[..., BootProc],  # noqa: F811  (the fixture imported above)
    state_home: Path,  # noqa: F811
) -> None:
    boot = boots("--json", "--sim-fault", "rank=*:slow-read=3MB/s")
    wait_for("every rank loading", lambda: all_loading(boot), timeout=120)
    testbed.cut_link(CUT, "mgmt")
    testbed.cut_link(CUT, "fabric")
    verdict = boot.wait()
    assert verdict.get("outcome") == "NODE_LOST", verdict
    testbed.restore_link(CUT)

    done = cluster(state_home, "postmortem", str(boot.run), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    root = doc["root_cause"]
    assert doc["first_failing_rank"] == CUT, doc["verdict"]
    assert root["category"] == "rendezvous-network", root
    assert "went silent" in root["title"] and "network" in root["title"], root["title"]
    assert root["confidence"] in ("high", "medium"), root
    measured = [e for e in root["evidence"] if e["file"] == "events.jsonl"]
    assert any("node_lost" in e["text"] and e["rank"] == CUT for e in measured), root["evidence"]
