"""`cluster inventory check` against eight real sshd + dockerd nodes (the testbed)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import asyncssh
import pytest

pytestmark = pytest.mark.netns
CLUSTER = [sys.executable, "-m", "orchestrator.cli"]


def check(inventory: Path, *extra: str, timeout: float = 120) -> tuple[int, dict, str]:
    started = time.monotonic()
    proc = subprocess.run(
        [*CLUSTER, "inventory", "check", "-i", str(inventory), "--json", *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    elapsed = time.monotonic() - started
    report = json.loads(proc.stdout) if proc.stdout.strip() else {}
    report["_elapsed"] = elapsed
    return proc.returncode, report, proc.stderr


def rows(report: dict) -> dict[str, dict]:
    return {n["node"]: n for n in report["nodes"]}


def test_eight_healthy_nodes_each_with_its_own_address_fabric_name_and_docker(clean_testbed):
    tb = clean_testbed
    code, report, err = check(tb.inventory)
    assert code == 0, err
    by = rows(report)
    assert len(by) == 8
    assert len({n["address"] for n in by.values()}) == 8
    fabric = {n["node"]: n["fabric"] for n in by.values()}
    assert {f["iface"] for f in fabric.values()} == {"enp1s0f1np1", "enP2p1s0f1np1"}
    for node in tb.nodes:
        row = by[node.name]
        assert row["healthy"] and row["reachable"]
        assert row["fabric"]["mtu"] == 9000
        assert row["fabric"]["state"] == "UP"
        assert row["fabric"]["addresses"] == [f"{node.fab_addr}/24"]
        assert row["fabric"]["iface"] == node.fab_iface
        assert re.match(r"^\d+\.\d+", row["docker_server"])
        assert row["hostname"] == node.name
        assert row["gpu"] == "no GPU"
    # loosely: the real figure comes from bench/inventory_check.py
    assert report["_elapsed"] < 30


def test_a_stopped_sshd_is_named_as_connection_refused_and_the_other_seven_still_report(
    clean_testbed,
):
    tb = clean_testbed
    tb.stop_daemon(3, "sshd")
    code, report, _err = check(tb.inventory)
    assert code == 3
    by = rows(report)
    bad = by[tb.node(3).name]
    assert not bad["reachable"] and bad["reason"] == "refused"
    assert "connection refused" in " ".join(bad["problems"])
    assert sum(n["healthy"] for n in by.values()) == 7
    # the person's view names the node too
    human = subprocess.run(
        [*CLUSTER, "inventory", "check", "-i", str(tb.inventory)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert human.returncode == 3
    assert tb.node(3).name in human.stderr and "connection refused" in human.stderr
    assert "Traceback" not in human.stderr


def test_a_changed_host_key_is_refused_naming_the_node_and_the_known_hosts_file(
    clean_testbed, tmp_path
):
    tb = clean_testbed
    target = tb.node(5)
    forged = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().split()[:2]
    lines = []
    for line in tb.known_hosts.read_text().splitlines():
        hosts, *_key = line.split()
        if target.mgmt_addr in hosts.split(",") or target.name in hosts.split(","):
            line = f"{hosts} {' '.join(forged)}"
        lines.append(line)
    known = tmp_path / "known_hosts"
    known.write_text("\n".join(lines) + "\n")
    inv = tmp_path / "inventory.yaml"
    inv.write_text(
        tb.inventory.read_text().replace(
            re.search(r"cluster_known_hosts: .*", tb.inventory.read_text()).group(0),
            f"cluster_known_hosts: {known}",
        )
    )
    code, report, _err = check(inv)
    assert code == 3
    bad = rows(report)[target.name]
    assert bad["reason"] == "host-key"
    text = " ".join(bad["problems"])
    assert target.name in text and str(known) in text and "differs" in text
    assert sum(n["healthy"] for n in report["nodes"]) == 7


def test_a_port_that_never_speaks_ssh_is_a_timeout_within_the_connect_timeout(
    clean_testbed, tmp_path
):
    tb = clean_testbed
    target = tb.node(2)
    tb.start_silent_listener(target, 2222)
    inv = tmp_path / "inventory.yaml"
    text = tb.inventory.read_text()
    inv.write_text(
        text.replace(
            f"ansible_host: {target.mgmt_addr}\n",
            f"ansible_host: {target.mgmt_addr}\n          ansible_port: 2222\n",
            1,
        ).replace(re.search(r"cluster_known_hosts: (.*)", text).group(1), str(tb.known_hosts))
    )
    code, report, err = check(inv, "--connect-timeout", "3")
    assert code == 3, err
    bad = rows(report)[target.name]
    assert bad["reason"] == "timeout"
    assert report["_elapsed"] < 3 + 20  # the connect timeout, plus start-up of a 2-core VM


def test_a_cut_fabric_link_is_reported_down_while_management_still_reaches_the_node(
    clean_testbed,
):
    tb = clean_testbed
    tb.cut_link(6, "fabric")
    code, report, _err = check(tb.inventory)
    assert code == 3
    bad = rows(report)[tb.node(6).name]
    assert bad["reachable"]  # SSH over management still works
    assert bad["fabric"]["state"] == "DOWN"
    assert any(
        f"fabric link {tb.node(6).fab_iface} on {tb.node(6).name} is down" in p
        for p in bad["problems"]
    )
