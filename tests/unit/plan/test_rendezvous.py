"""The rendezvous plan: where ranks meet, and each rank's network env from its own node's facts.

The builders at the top (`spark_facts`, `spark_cluster`) make the facts of an 8-Spark cluster
whose interface names differ per host; test_launch.py and test_preflight.py use them too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.inventory import load_inventory
from orchestrator.models.inventory import Inventory, Node
from orchestrator.models.recipe import Recipe
from orchestrator.paths import builtin_simulated_inventory
from orchestrator.plan.rendezvous import IFACE_VARS, plan_rendezvous
from orchestrator.probes.clock import ClockSample
from orchestrator.probes.disk import DiskUsage, WeightsDir
from orchestrator.probes.gpu import Gpu, GpuInfo
from orchestrator.probes.host import HostInfo
from orchestrator.probes.image import ImageFacts
from orchestrator.probes.interfaces import Interface, parse_ip_addr
from orchestrator.probes.meminfo import MemInfo
from orchestrator.probes.node_facts import NodeFacts
from orchestrator.probes.peers import PeerResult
from orchestrator.probes.rdma import RdmaDevice, RdmaGid, RdmaInfo, RdmaPort
from orchestrator.probes.runtime import parse_docker_info
from orchestrator.probes.sockets import ListeningSocket
from orchestrator.recipes import resolve_recipe

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SPARK_8X = FIXTURES / "launch" / "spark-8x.yaml"
SPARK_1X = FIXTURES / "launch" / "spark-1x.yaml"
GIB = 2**30
IMAGE_ID = "sha256:" + "ab" * 32

# ------------------------------------------------------------------------------------------------
# Builders


def iface(
    name: str,
    index: int,
    cidr: str | None = None,
    *,
    mtu: int = 9000,
    up: bool = True,
    carrier: bool = True,
) -> Interface:
    flags = ["BROADCAST", "MULTICAST"]
    if not carrier:
        flags.insert(0, "NO-CARRIER")
    if up:
        flags.append("UP")
    if up and carrier:
        flags.append("LOWER_UP")
    return Interface(
        name=name,
        index=index,
        mtu=mtu,
        operstate="UP" if up and carrier else "DOWN",
        flags=tuple(flags),
        link_type="ether",
        ipv4=(cidr,) if cidr else (),
    )


def _gid_v4(address: str) -> str:
    a, b, c, d = (int(x) for x in address.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a * 256 + b:04x}:{c * 256 + d:04x}"


def roce(
    name: str, netdev: str, *, active: bool, address: str | None, gid_index: int = 3
) -> RdmaDevice:
    link_local = "fe80:0000:0000:0000:0000:00ff:fe00:0001"
    gids = [
        RdmaGid(index=0, gid=link_local, type="IB/RoCE v1", ndev=netdev),
        RdmaGid(index=1, gid=link_local, type="RoCE v2", ndev=netdev),
    ]
    if address:
        if gid_index == 5:  # a global IPv6 address took 2 and 3
            v6 = "fd00:0000:0000:0064:0000:00ff:fe00:0001"
            gids += [
                RdmaGid(index=2, gid=v6, type="IB/RoCE v1", ndev=netdev),
                RdmaGid(index=3, gid=v6, type="RoCE v2", ndev=netdev),
            ]
        gids += [
            RdmaGid(index=gid_index - 1, gid=_gid_v4(address), type="IB/RoCE v1", ndev=netdev),
            RdmaGid(index=gid_index, gid=_gid_v4(address), type="RoCE v2", ndev=netdev),
        ]
    port = RdmaPort(
        port=1,
        state="ACTIVE" if active else "DOWN",
        phys_state="LinkUp" if active else "Disabled",
        link_layer="Ethernet",
        gids=tuple(gids),
    )
    return RdmaDevice(name=name, netdevs=(netdev,), ports=(port,))


def spark_rdma(addresses: dict[str, str], gid_index: int = 3) -> RdmaInfo:
    """A Spark's four RoCE devices; the f1 twins ACTIVE with the given netdev addresses."""
    return RdmaInfo(
        dev_infiniband=True,
        devices=(
            roce("roceP2p1s0f0", "enP2p1s0f0np0", active=False, address=None),
            roce(
                "roceP2p1s0f1",
                "enP2p1s0f1np1",
                active=True,
                address=addresses.get("enP2p1s0f1np1"),
                gid_index=gid_index,
            ),
            roce("rocep1s0f0", "enp1s0f0np0", active=False, address=None),
            roce(
                "rocep1s0f1",
                "enp1s0f1np1",
                active=True,
                address=addresses.get("enp1s0f1np1"),
                gid_index=gid_index,
            ),
        ),
    )


SPARK_DOCKER = parse_docker_info(
    (FIXTURES / "fabric_probes" / "docker_info" / "spark-edited.stdout").read_text()
)


def spark_facts(node: Node, all_nodes: tuple[Node, ...] = (), **change: Any) -> NodeFacts:
    """A healthy Spark: its fabric iface at 192.168.100.1<rank>/24 (the other twin on .101),
    Wi-Fi holding the default route, every probe answered. `change` replaces fields."""
    k = node.rank
    fabric = node.fabric_iface
    twin = "enP2p1s0f1np1" if fabric == "enp1s0f1np1" else "enp1s0f1np1"
    addresses = {fabric: f"192.168.100.{10 + k}", twin: f"192.168.101.{10 + k}"}
    interfaces = (
        iface("lo", 1, "127.0.0.1/8", mtu=65536),
        iface("enP7s7", 2, f"192.0.2.{10 + k}/24", mtu=1500),
        iface("wlP9s9", 3, f"10.9.0.{10 + k}/24", mtu=1500),  # the default route: never used
        iface("enp1s0f0np0", 4, mtu=1500, carrier=False),
        iface("enp1s0f1np1", 5, f"{addresses['enp1s0f1np1']}/24"),
        iface("enP2p1s0f1np1", 6, f"{addresses['enP2p1s0f1np1']}/24"),
    )
    facts: dict[str, Any] = {
        "node": node.name,
        "rank": k,
        "address": node.address,
        "reachable": True,
        "host": HostInfo(
            hostname=node.name, kernel="6.17.0-1008-nvidia", arch="aarch64", platform="linux/arm64"
        ),
        "memory": MemInfo(
            mem_total=125489508 * 1024,
            # ~109 GiB free before a boot, as on seed 002's Sparks ("108.78 GiB free at startup"):
            # what vLLM's --gpu-memory-utilization 0.89 was chosen to fit
            mem_free=110 * GIB,
            mem_available=115 * GIB,
            buffers=0,
            cached=10 * GIB,
            dirty=0,
            swap_total=0,
            swap_free=0,
        ),
        "interfaces": interfaces,
        "rdma": spark_rdma(addresses),
        "gpu": GpuInfo(present=True, gpus=(Gpu(name="NVIDIA GB10", compute_cap="12.1"),)),
        "docker": SPARK_DOCKER,
        "containers": (),
        "listening": (ListeningSocket(address="0.0.0.0", port=22),),
        "disks": (
            DiskUsage(
                path="/var/lib/docker",
                present=True,
                filesystem="/dev/nvme0n1p2",
                mount="/",
                total_bytes=3700 * GIB,
                used_bytes=700 * GIB,
                available_bytes=3000 * GIB,
            ),
        ),
        "weights": WeightsDir(
            path="/models/w", exists=True, is_dir=True, files=163, bytes=610_000_000_000
        ),
        "image": ImageFacts(
            reference="img", present=True, id=IMAGE_ID, architecture="arm64", os="linux"
        ),
        "clock": ClockSample(node_time=1000.01, sent=1000.0, received=1000.02),
        "peers": tuple(
            PeerResult(target=f"{p.user}@{p.address}", exit_status=0)
            for p in all_nodes
            if p.name != node.name
        ),
    }
    facts.update(change)
    return NodeFacts(**facts)


def spark_inventory(nodes: int = 8) -> Inventory:
    return load_inventory(SPARK_8X if nodes == 8 else SPARK_1X)


def spark_cluster(inventory: Inventory | None = None) -> tuple[Inventory, list[NodeFacts]]:
    inv = inventory or spark_inventory()
    return inv, [spark_facts(n, inv.nodes) for n in inv.nodes]


def replace(facts: list[NodeFacts], rank: int, **change: Any) -> list[NodeFacts]:
    """The cluster's facts with node `rank`'s fields replaced."""
    out = list(facts)
    out[rank] = out[rank].model_copy(update=change)
    return out


def sglang() -> Recipe:
    return resolve_recipe("mistral-large4-8x-sglang")


def vllm() -> Recipe:
    return resolve_recipe("mistral-large4-8x-vllm")


# ------------------------------------------------------------------------------------------------
# The head and its address


def test_the_rendezvous_address_is_the_heads_fabric_address_never_its_wifi_or_management() -> None:
    inv, facts = spark_cluster()
    plan = plan_rendezvous(sglang(), inv, facts)
    assert plan.head == "spark-0" and plan.head_iface == "enp1s0f1np1"
    assert plan.head_addr == "192.168.100.10"
    assert plan.head_port == 29500 and plan.serve_port == 30000
    assert plan.complete and plan.head_port_free


def test_every_rank_gets_its_own_nodes_interface_names_not_the_heads() -> None:
    inv, facts = spark_cluster()
    plan = plan_rendezvous(sglang(), inv, facts)
    for rank in plan.ranks:
        expected = "enp1s0f1np1" if rank.rank % 2 == 0 else "enP2p1s0f1np1"
        for var in IFACE_VARS:
            assert rank.env[var] == expected, (rank.node, var)
        assert rank.address == f"192.168.100.{10 + rank.rank}"
        assert rank.network == "192.168.100.0/24"


def test_both_cx7_twins_go_into_nccl_ib_hca_with_the_rocev2_gid_of_the_fabric_address() -> None:
    inv, facts = spark_cluster()
    plan = plan_rendezvous(sglang(), inv, facts)
    rank1 = plan.rank(1)
    assert rank1.env["NCCL_IB_HCA"] == "roceP2p1s0f1,rocep1s0f1"  # its own port's device first
    assert plan.rank(0).env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
    assert rank1.env["NCCL_IB_GID_INDEX"] == "3"
    assert rank1.env["UCX_NET_DEVICES"] == "roceP2p1s0f1:1,rocep1s0f1:1"
    assert "roceP2p1s0f1" in rank1.sources["NCCL_IB_GID_INDEX"]  # the device of enP2p1s0f1np1


def test_a_gid_index_that_differs_on_one_host_is_that_hosts_value() -> None:
    inv, facts = spark_cluster()
    node3 = inv.nodes[3]
    addresses = {"enP2p1s0f1np1": "192.168.100.13", "enp1s0f1np1": "192.168.101.13"}
    facts = replace(facts, 3, rdma=spark_rdma(addresses, gid_index=5))
    plan = plan_rendezvous(sglang(), inv, facts)
    assert plan.rank(3).env["NCCL_IB_GID_INDEX"] == "5"
    assert plan.rank(2).env["NCCL_IB_GID_INDEX"] == "3"
    assert node3.fabric_iface == "enP2p1s0f1np1"


def test_inventory_ib_hca_wins_over_detection() -> None:
    inv, facts = spark_cluster()
    plan = plan_rendezvous(sglang(), inv, facts)
    rank6 = plan.rank(6)
    assert rank6.env["NCCL_IB_HCA"] == "rocep1s0f1"
    assert rank6.sources["NCCL_IB_HCA"] == "inventory ib_hca"
    assert rank6.env["NCCL_IB_GID_INDEX"] == "3"


def test_without_rdma_devices_the_ib_variables_are_absent_and_the_plan_says_sockets() -> None:
    inv, facts = spark_cluster()
    facts = replace(facts, 2, rdma=RdmaInfo())
    plan = plan_rendezvous(sglang(), inv, facts)
    rank2 = plan.rank(2)
    assert "NCCL_IB_HCA" not in rank2.env and "NCCL_IB_GID_INDEX" not in rank2.env
    assert rank2.env["UCX_NET_DEVICES"] == "enp1s0f1np1"
    assert any("NET/Socket" in note for note in rank2.notes)


def test_rdma_devices_that_are_all_down_leave_nccl_on_sockets_too() -> None:
    inv, facts = spark_cluster()
    down = RdmaInfo(
        devices=tuple(
            d.model_copy(update={"ports": (d.ports[0].model_copy(update={"state": "DOWN"}),)})
            for d in spark_rdma({}).devices
        )
    )
    plan = plan_rendezvous(sglang(), inv, replace(facts, 4, rdma=down))
    assert "NCCL_IB_HCA" not in plan.rank(4).env
    assert any("no ACTIVE RDMA device" in n for n in plan.rank(4).notes)


def test_vllm_ranks_advertise_their_fabric_address_and_sglang_ranks_need_not() -> None:
    inv, facts = spark_cluster()
    assert plan_rendezvous(vllm(), inv, facts).rank(5).env["VLLM_HOST_IP"] == "192.168.100.15"
    assert "VLLM_HOST_IP" not in plan_rendezvous(sglang(), inv, facts).rank(5).env
    assert plan_rendezvous(vllm(), inv, facts).head_port == 29501


def test_a_missing_fabric_interface_leaves_that_rank_without_an_address_and_says_why() -> None:
    inv, facts = spark_cluster()
    without = tuple(i for i in facts[5].interfaces or () if i.name != "enP2p1s0f1np1")
    plan = plan_rendezvous(sglang(), inv, replace(facts, 5, interfaces=without))
    assert plan.rank(5).address is None and not plan.complete
    assert any("does not exist on spark-5" in n for n in plan.rank(5).notes)
    # its env still names the inventory's interface: preflight reports it missing
    assert plan.rank(5).env["NCCL_SOCKET_IFNAME"] == "enP2p1s0f1np1"


def test_a_listener_on_the_heads_rendezvous_port_is_recorded_as_its_holder() -> None:
    inv, facts = spark_cluster()
    taken = (
        ListeningSocket(address="0.0.0.0", port=22),
        ListeningSocket(address="0.0.0.0", port=29500),
    )
    plan = plan_rendezvous(sglang(), inv, replace(facts, 0, listening=taken))
    assert plan.head_port_holders == ("0.0.0.0:29500",) and not plan.head_port_free
    assert plan.serve_port_holders == ()


def test_on_the_simulated_cluster_each_node_meets_on_its_own_loopback_address() -> None:
    inv = load_inventory(builtin_simulated_inventory())
    lo = Interface(
        name="lo",
        index=1,
        mtu=65536,
        operstate="UNKNOWN",
        flags=("LOOPBACK", "UP", "LOWER_UP"),
        ipv4=("127.0.0.1/8",),
    )
    facts = [
        NodeFacts(node=n.name, rank=n.rank, address=n.address, reachable=True, interfaces=(lo,))
        for n in inv.nodes
    ]
    plan = plan_rendezvous(sglang(), inv, facts)
    assert plan.head_addr == "127.0.0.10"
    assert [r.address for r in plan.ranks] == [f"127.0.0.{10 + k}" for k in range(8)]
    assert plan.rank(3).env["GLOO_SOCKET_IFNAME"] == "lo"


def test_a_real_testbed_node_capture_gives_its_twin_name_and_fabric_address() -> None:
    text = (FIXTURES / "preflight" / "ip_addr-testbed-node1.stdout").read_text()
    node = Node(
        name="ctb-node1", address="198.18.0.11", user="root", rank=1, fabric_iface="enP2p1s0f1np1"
    )
    head = Node(
        name="ctb-node0", address="198.18.0.10", user="root", rank=0, fabric_iface="enp1s0f1np1"
    )
    inv = spark_inventory().model_copy(update={"nodes": (head, node)})
    head_if = iface("enp1s0f1np1", 3, "198.18.1.10/24")
    facts = [
        NodeFacts(
            node=head.name,
            rank=0,
            address=head.address,
            reachable=True,
            interfaces=(head_if,),
            rdma=RdmaInfo(),
        ),
        NodeFacts(
            node=node.name,
            rank=1,
            address=node.address,
            reachable=True,
            interfaces=tuple(parse_ip_addr(text)),
            rdma=RdmaInfo(),
        ),
    ]
    recipe = load_recipe_for_nodes(2)
    plan = plan_rendezvous(recipe, inv, facts)
    assert plan.rank(1).address == "198.18.1.11"
    assert plan.rank(1).env["GLOO_SOCKET_IFNAME"] == "enP2p1s0f1np1"
    assert "NCCL_IB_HCA" not in plan.rank(1).env


def load_recipe_for_nodes(nodes: int) -> Recipe:
    data = json.loads(sglang().model_dump_json())
    data.update(nodes=nodes, tp=nodes)
    return Recipe.model_validate(data)


def test_the_plan_serialises_to_json_and_back() -> None:
    inv, facts = spark_cluster()
    plan = plan_rendezvous(sglang(), inv, facts)
    again = type(plan).model_validate_json(plan.model_dump_json())
    assert again == plan


@pytest.mark.parametrize("name", ["mistral-small4-1x-sglang", "mistral-small4-1x-vllm"])
def test_a_cluster_of_one_is_its_own_head(name: str) -> None:
    inv, facts = spark_cluster(spark_inventory(1))
    plan = plan_rendezvous(resolve_recipe(name), inv, facts)
    assert plan.head == "spark-1" and plan.head_addr == "192.168.100.10"
    assert plan.rank(0).env["NCCL_SOCKET_IFNAME"] == "enP2p1s0f1np1"
