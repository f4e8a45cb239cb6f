"""The same inventory file drives Ansible: real `ansible-inventory` (ansible-core from PyPI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli.inventory import inventory_view
from orchestrator.inventory import load_inventory

pytestmark = pytest.mark.ansible
REPO = Path(__file__).resolve().parents[2]
ANSIBLE_INVENTORY = Path(sys.executable).parent / "ansible-inventory"


def ansible_list(path: Path) -> dict:
    if not ANSIBLE_INVENTORY.exists():
        pytest.fail(
            f"ansible-inventory not installed at {ANSIBLE_INVENTORY} (ansible-core is a dev dependency)"
        )
    env = {**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true", "ANSIBLE_NOCOLOR": "1"}
    out = subprocess.run(
        [str(ANSIBLE_INVENTORY), "-i", str(path), "--list", "--export"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout)


def ansible_host_vars(listing: dict, host: str) -> dict:
    return listing["_meta"]["hostvars"][host]


@pytest.mark.parametrize("name", ["spark-8x.example.yaml", "sim-8x.yaml"])
def test_ansible_inventory_accepts_the_shipped_inventory_and_agrees_on_hosts_and_vars(name):
    path = REPO / "inventory" / name
    listing = ansible_list(path)
    ours = load_inventory(path)
    ansible_hosts = set(listing["_meta"]["hostvars"])
    assert ansible_hosts == {n.name for n in ours.nodes}
    for node in ours.nodes:
        # --export keeps group vars on groups; merge as Ansible does for the comparison
        merged = {}
        for group in ("all", "sparks"):
            merged.update(listing.get(group, {}).get("vars", {}))
        merged.update(ansible_host_vars(listing, node.name))
        assert merged["rank"] == node.rank
        assert merged["fabric_iface"] == node.fabric_iface
        assert merged.get("ansible_host", node.name) == node.address
        assert list(merged.get("ib_hca", [])) == list(node.ib_hca)


def test_a_host_var_override_is_seen_the_same_way_by_both(tmp_path):
    path = REPO / "inventory" / "spark-8x.example.yaml"
    listing = ansible_list(path)
    view = inventory_view(load_inventory(path))
    spark6 = next(n for n in view["nodes"] if n["name"] == "spark-6")
    assert ansible_host_vars(listing, "spark-6")["fabric_iface"] == spark6["fabric_iface"]
    assert spark6["fabric_iface"] == "enP2p1s0f1np1"
