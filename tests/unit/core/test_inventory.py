"""Inventory: Ansible's semantics for hosts and variables, strict checks for the cluster's keys."""

from __future__ import annotations

import getpass
import textwrap
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.errors import ExitCode, InventoryError
from orchestrator.inventory import load_inventory, resolve_inventory_path
from orchestrator.models.inventory import Connection

REPO = Path(__file__).resolve().parents[3]


def write(tmp_path: Path, text: str, name: str = "inv.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


TWO_NODES = """
all:
  vars:
    cluster_name: pair
    cluster_known_hosts: kh/known_hosts
    ansible_user: nvidia
    fabric_iface: enp1s0f1np1
  children:
    sparks:
      vars:
        ib_hca: [rocep1s0f1, roceP2p1s0f1]
        my_own_var: kept
      hosts:
        a: {ansible_host: 198.18.0.10, rank: 0}
        b:
          ansible_host: 198.18.0.11
          ansible_port: "2222"
          rank: 1
          fabric_iface: enP2p1s0f1np1
          ansible_ssh_common_args: -o ProxyJump=bastion
"""


def test_a_two_node_inventory_resolves_hosts_and_merged_variables(tmp_path):
    inv = load_inventory(write(tmp_path, TWO_NODES))
    assert inv.name == "pair"
    assert inv.connection is Connection.ssh
    assert [n.name for n in inv.nodes] == ["a", "b"]
    a, b = inv.nodes
    assert (a.address, a.port, a.user, a.fabric_iface) == (
        "198.18.0.10",
        22,
        "nvidia",
        "enp1s0f1np1",
    )
    # host vars override group vars, which override all.vars
    assert (b.port, b.fabric_iface) == (2222, "enP2p1s0f1np1")
    assert a.ib_hca == ("rocep1s0f1", "roceP2p1s0f1")
    # every other variable passes through untouched
    assert a.extra_vars["my_own_var"] == "kept"
    assert b.extra_vars["ansible_ssh_common_args"] == "-o ProxyJump=bastion"
    # relative paths resolve against the inventory file
    assert inv.known_hosts == tmp_path / "kh" / "known_hosts"
    assert inv.head.name == "a"
    assert len(inv.sha256) == 64


def test_deeper_groups_override_shallower_ones_as_in_ansible(tmp_path):
    inv = load_inventory(
        write(
            tmp_path,
            """
            all:
              vars: {fabric_iface: from_all}
              children:
                outer:
                  vars: {fabric_iface: from_outer}
                  children:
                    inner:
                      vars: {fabric_iface: from_inner}
                      hosts:
                        n0: {rank: 0}
                  hosts:
                    n1: {rank: 1}
            """,
        )
    )
    assert {n.name: n.fabric_iface for n in inv.nodes} == {"n0": "from_inner", "n1": "from_outer"}


def test_the_user_defaults_to_the_current_user_and_the_address_to_the_host_name(tmp_path):
    inv = load_inventory(
        write(tmp_path, "all:\n  hosts:\n    spark-a: {rank: 0, fabric_iface: eth1}\n")
    )
    assert inv.nodes[0].user == getpass.getuser()
    assert inv.nodes[0].address == "spark-a"


def test_top_level_groups_other_than_all_are_children_of_all(tmp_path):
    inv = load_inventory(
        write(
            tmp_path,
            """
            sparks:
              vars: {fabric_iface: eth1}
              hosts:
                x: {rank: 0}
                y: {rank: 1}
            """,
        )
    )
    assert [n.name for n in inv.nodes] == ["x", "y"]


def test_the_shipped_inventories_validate():
    sim = load_inventory(REPO / "inventory" / "sim-8x.yaml")
    assert sim.connection is Connection.local
    assert [n.address for n in sim.nodes] == [f"127.0.0.{10 + k}" for k in range(8)]
    spark = load_inventory(REPO / "inventory" / "spark-8x.example.yaml")
    assert len(spark.nodes) == 8
    assert spark.node("spark-6").fabric_iface == "enP2p1s0f1np1"
    assert spark.node("spark-0").mgmt_iface == "enP7s7"


BAD = {
    "bad_yaml": ("all:\n  hosts:\n    a: {rank: 0\n", "invalid YAML"),
    "duplicate_host_key": (
        "all:\n  hosts:\n    a: {rank: 0, fabric_iface: e}\n    a: {rank: 1, fabric_iface: e}\n",
        "duplicate key 'a'",
    ),
    "duplicate_rank": (
        "all:\n  hosts:\n    a: {rank: 0, fabric_iface: e, ansible_host: h1}\n"
        "    b: {rank: 0, fabric_iface: e, ansible_host: h2}\n",
        "host 'b': key 'rank': rank 0 is already host 'a'",
    ),
    "missing_rank_0": (
        "all:\n  hosts:\n    a: {rank: 1, fabric_iface: e, ansible_host: h1}\n"
        "    b: {rank: 2, fabric_iface: e, ansible_host: h2}\n",
        "no host has rank 0",
    ),
    "unknown_cluster_key": (
        "all:\n  vars: {cluster_nmae: x}\n  hosts:\n    a: {rank: 0, fabric_iface: e}\n",
        "key 'cluster_nmae': unknown cluster variable — did you mean 'cluster_name'?",
    ),
    "host_var_with_the_cluster_prefix": (
        "all:\n  hosts:\n    a: {cluster_rnak: 0, fabric_iface: e}\n",
        "key 'cluster_rnak': unknown cluster variable — did you mean 'rank'?",
    ),
    "misspelled_host_var": (
        "all:\n  hosts:\n    a: {rank: 0, fabric_iface: e, fabric_ifcae: e2}\n",
        "host 'a': key 'fabric_ifcae': unknown host variable — did you mean 'fabric_iface'?",
    ),
    "wrong_type": (
        "all:\n  hosts:\n    a: {rank: zero, fabric_iface: e}\n",
        "host 'a': key 'rank': Input should be a valid integer",
    ),
    "missing_rank": ("all:\n  hosts:\n    a: {fabric_iface: e}\n", "key 'rank': required"),
    "same_address_twice": (
        "all:\n  hosts:\n    a: {rank: 0, fabric_iface: e, ansible_host: h}\n"
        "    b: {rank: 1, fabric_iface: e, ansible_host: h}\n",
        "h:22 is also host 'a'",
    ),
    "bad_connection": (
        "all:\n  vars: {cluster_connection: telnet}\n  hosts:\n    a: {rank: 0, fabric_iface: e}\n",
        "key 'cluster_connection'",
    ),
    "unknown_group_key": (
        "all:\n  host:\n    a: {rank: 0, fabric_iface: e}\n",
        "group 'all': unknown key 'host'",
    ),
    "not_a_mapping": ("- a\n- b\n", "not an Ansible YAML inventory"),
    "empty_file": ("", "not an Ansible YAML inventory"),
    "rank_out_of_range": (
        "all:\n  hosts:\n    a: {rank: 0, fabric_iface: e, ansible_host: h1}\n"
        "    b: {rank: 5, fabric_iface: e, ansible_host: h2}\n",
        "5 is out of range for 2 hosts",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_malformed_inventory_is_refused_with_a_line_naming_file_and_key(tmp_path, case):
    text, expected = BAD[case]
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    lines = info.value.lines()
    assert any(expected in line for line in lines), lines
    assert all(str(path) in line for line in lines)
    assert info.value.exit_code == ExitCode.CONFIG


@pytest.mark.parametrize("case", ["bad_yaml", "duplicate_rank", "unknown_cluster_key"])
def test_the_cli_prints_one_line_per_problem_and_exits_2_without_a_traceback(
    tmp_path, capsys, case
):
    text, expected = BAD[case]
    path = write(tmp_path, text)
    code = main(["inventory", "show", "-i", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err.replace("\n", " ") or expected in err
    assert "Traceback" not in err


def test_every_problem_is_reported_at_once(tmp_path):
    path = write(
        tmp_path,
        "all:\n  vars: {cluster_x: 1}\n  hosts:\n    a: {rank: 0}\n    b: {rank: 1, fabric_iface: e}\n",
    )
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    text = "\n".join(info.value.lines())
    assert "cluster_x" in text
    assert "host 'a': key 'fabric_iface': required" in text


def test_the_inventory_comes_from_the_flag_then_the_environment_then_the_builtin(monkeypatch):
    monkeypatch.setenv("CLUSTER_INVENTORY", "/from/env.yaml")
    assert resolve_inventory_path("/from/flag.yaml")[0] == Path("/from/flag.yaml")
    assert resolve_inventory_path(None)[0] == Path("/from/env.yaml")
    monkeypatch.delenv("CLUSTER_INVENTORY")
    path, note = resolve_inventory_path(None)
    assert path.name == "sim-8x.yaml" and path.exists()
    assert "built-in simulated" in note


def test_a_missing_inventory_file_says_how_to_choose_one(tmp_path, capsys):
    code = main(["inventory", "show", "-i", str(tmp_path / "nope.yaml")])
    assert code == 2
    assert "no such file" in capsys.readouterr().err
