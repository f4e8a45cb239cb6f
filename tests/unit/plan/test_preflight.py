"""Preflight: the pure judge finds every problem at once, each with node, evidence and fix; the
thin runner gathers facts, tests the head's port for real and writes the run directory."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.cli.main import main
from orchestrator.errors import ExitCode
from orchestrator.inventory import load_inventory
from orchestrator.models.inventory import Inventory, Node
from orchestrator.models.recipe import Recipe
from orchestrator.plan.rendezvous import plan_rendezvous
from orchestrator.preflight import (
    CHECKS,
    PreflightLimits,
    Problem,
    Reachability,
    Severity,
    judge,
    run_preflight,
)
from orchestrator.preflight.engine_args import EngineArgsResult
from orchestrator.probes.clock import ClockSample
from orchestrator.probes.containers import RunningContainer
from orchestrator.probes.disk import DiskUsage, WeightsDir
from orchestrator.probes.gpu import GpuInfo
from orchestrator.probes.image import ImageFacts
from orchestrator.probes.interfaces import parse_ip_addr
from orchestrator.probes.meminfo import MemInfo
from orchestrator.probes.node_facts import NodeFacts
from orchestrator.probes.peers import PeerResult
from orchestrator.probes.rdma import RdmaInfo
from orchestrator.probes.runtime import DockerInfo
from orchestrator.probes.sockets import ListeningSocket
from orchestrator.probes.tcp import ConnectResult, ListenerReport
from orchestrator.recipes import resolve_recipe
from orchestrator.runstore import RunStore
from tests.fake_transport import FakeReply, FakeTransport
from tests.unit.plan.test_rendezvous import (
    GIB,
    IMAGE_ID,
    iface,
    replace,
    sglang,
    spark_cluster,
    spark_inventory,
    vllm,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def reach_all_ok(inv: Inventory, **results: ConnectResult) -> Reachability:
    ok = ConnectResult(outcome="connected", elapsed_ms=1, local="x")
    return Reachability(
        head=inv.head.name,
        address="192.168.100.10",
        port=29500,
        listener=ListenerReport(listening=True, accepted_from=(), finished=True),
        results={n.name: results.get(n.name, ok) for n in inv.nodes},
        sources={n.name: f"192.168.100.{10 + n.rank}" for n in inv.nodes},
    )


def problems_of(
    facts: list[NodeFacts],
    *,
    recipe: Recipe | None = None,
    inv: Inventory | None = None,
    reach: Reachability | None = None,
    **kw: Any,
) -> list[Problem]:
    recipe = recipe or sglang()
    inv = inv or spark_inventory()
    plan = plan_rendezvous(recipe, inv, facts)
    found = judge(recipe, inv, facts, plan, reachability=reach or reach_all_ok(inv), **kw).problems
    return found


def only(found: list[Problem], check: str) -> Problem:
    matching = [p for p in found if p.check == check]
    assert len(matching) == 1, f"{check}: {[p.check for p in found]}"
    return matching[0]


# ------------------------------------------------------------------------------------------------
# A healthy cluster


def test_a_healthy_eight_spark_cluster_has_no_problem_at_all() -> None:
    _, facts = spark_cluster()
    assert problems_of(facts) == []
    assert problems_of(facts, recipe=vllm()) == []


def test_every_check_runs_and_each_has_a_description_for_the_docs() -> None:
    inv, facts = spark_cluster()
    recipe = sglang()
    plan = plan_rendezvous(recipe, inv, facts)
    asked = EngineArgsResult(node="spark-0", argv=[])
    judged = judge(
        recipe,
        inv,
        facts,
        plan,
        reachability=reach_all_ok(inv),
        engine_args=asked,
        kernel_health={},
    )
    assert judged.ran == list(CHECKS) and judged.not_checked == []


def test_a_check_without_its_result_is_listed_as_not_checked_with_why() -> None:
    # Issue 31: a report never passes what it did not look at.
    inv, facts = spark_cluster()
    facts = [f.model_copy(update={"peers": None}) for f in facts]
    recipe = sglang()
    judged = judge(recipe, inv, facts, plan_rendezvous(recipe, inv, facts))
    why = {n.check: n.because for n in judged.not_checked}
    kernel = {"logind-removeipc", "fabric-speed", "kernel-recent"}
    assert set(why) == {"rendezvous-tcp", "engine-args", "peer-ssh", *kernel}
    assert all(why[k] == "the nodes' kernel and fabric health was not asked" for k in kernel)
    assert "has no address on" in why["rendezvous-tcp"] or "did not answer" in why["rendezvous-tcp"]
    assert "image chain will not run" in why["peer-ssh"]
    assert not set(why) & set(judged.ran)
    told = judge(
        recipe, inv, facts, plan_rendezvous(recipe, inv, facts), not_asked={"engine-args": "x y"}
    )
    assert {n.check: n.because for n in told.not_checked}["engine-args"] == "x y"


# ------------------------------------------------------------------------------------------------
# Each problem, named, with its evidence and its fix


Fault = Callable[[list[NodeFacts]], list[NodeFacts]]


def without_iface(rank: int, name: str) -> Fault:
    def fault(facts: list[NodeFacts]) -> list[NodeFacts]:
        kept = tuple(i for i in facts[rank].interfaces or () if i.name != name)
        return replace(facts, rank, interfaces=kept)

    return fault


def with_iface(rank: int, **kw: Any) -> Fault:
    def fault(facts: list[NodeFacts]) -> list[NodeFacts]:
        name = facts[rank].interfaces[4 if rank % 2 == 0 else 5].name  # type: ignore[index]
        others = tuple(i for i in facts[rank].interfaces or () if i.name != name)
        options = dict(kw)
        cidr = options.pop("cidr", f"192.168.100.{10 + rank}/24")
        return replace(facts, rank, interfaces=(*others, iface(name, 9, cidr, **options)))

    return fault


def with_fact(rank: int, **change: Any) -> Fault:
    return lambda facts: replace(facts, rank, **change)


MEM_LOW = MemInfo(
    mem_total=125 * GIB,
    mem_free=20 * GIB,
    mem_available=30 * GIB,
    buffers=0,
    cached=5 * GIB,
    dirty=0,
    swap_total=0,
    swap_free=0,
)
MEM_FREE_LOW = MEM_LOW.model_copy(update={"mem_free": 2 * GIB, "mem_available": 110 * GIB})

FAULTS: dict[str, tuple[Fault, str, int | None, Severity]] = {
    # check id: (fault, a word the `what` must contain, the rank named, severity)
    "fabric-iface-missing": (
        without_iface(3, "enP2p1s0f1np1"),
        "does not exist",
        3,
        Severity.error,
    ),
    "fabric-iface-down": (with_iface(5, up=False), "down", 5, Severity.error),
    "fabric-iface-no-address": (with_iface(2, cidr=None), "no IPv4", 2, Severity.error),
    "fabric-subnet": (with_iface(4, cidr="192.168.77.14/24"), "subnet", 4, Severity.error),
    "fabric-mtu": (with_iface(6, mtu=1500), "MTU 1500", 6, Severity.error),
    "head-port-rendezvous": (
        with_fact(0, listening=(ListeningSocket(address="0.0.0.0", port=29500),)),
        "29500",
        0,
        Severity.error,
    ),
    "head-port-serve": (
        with_fact(0, listening=(ListeningSocket(address="192.168.100.10", port=30000),)),
        "30000",
        0,
        Severity.error,
    ),
    "docker": (
        with_fact(
            7, docker=DockerInfo(reachable=False, error="Cannot connect to the Docker daemon")
        ),
        "does not answer",
        7,
        Severity.error,
    ),
    "image-missing": (
        with_fact(1, image=ImageFacts(reference="img", present=False)),
        "is not on",
        1,
        Severity.error,
    ),
    "image-platform": (
        with_fact(
            2,
            image=ImageFacts(
                reference="img", present=True, id=IMAGE_ID, architecture="amd64", os="linux"
            ),
        ),
        "linux/amd64",
        2,
        Severity.error,
    ),
    "gpu-missing": (
        with_fact(3, gpu=GpuInfo(present=False, reason="nvidia-smi: command not found")),
        "no GPU",
        3,
        Severity.error,
    ),
    "gpu-runtime": (
        with_fact(3, docker=DockerInfo(reachable=True, server_version="28.0", runtimes=("runc",))),
        "nvidia runtime",
        3,
        Severity.warning,
    ),
    "rdma-dev": (
        with_fact(4, rdma=RdmaInfo(devices=(), dev_infiniband=False)),
        "/dev/infiniband",
        4,
        Severity.error,
    ),
    "weights-missing": (
        with_fact(5, weights=WeightsDir(path="/m", exists=False)),
        "does not exist",
        5,
        Severity.error,
    ),
    "weights-size": (
        with_fact(6, weights=WeightsDir(path="/m", exists=True, is_dir=True, files=160, bytes=1)),
        "different",
        6,
        Severity.error,
    ),
    "memory-low": (with_fact(7, memory=MEM_LOW), "too little memory", 7, Severity.error),
    "memory-free-low": (with_fact(7, memory=MEM_FREE_LOW), "MemFree", 7, Severity.warning),
    "containers-memory": (
        with_fact(
            1,
            containers=(
                RunningContainer(
                    id="fb4b", name="vllm-mistral-small4", image="vllm", memory_bytes=61 * GIB
                ),
            ),
        ),
        "vllm-mistral-small4",
        1,
        Severity.error,
    ),
    "containers-earlier-run": (
        with_fact(
            2,
            containers=(
                RunningContainer(
                    id="025b",
                    name="cluster-20261128T100000Z-abcdef-r2",
                    image="img",
                    labels={"cluster.run": "20261128T100000Z-abcdef", "cluster.rank": "2"},
                    memory_bytes=70 * GIB,
                ),
            ),
        ),
        "20261128T100000Z-abcdef",
        2,
        Severity.error,
    ),
    "disk-low": (
        with_fact(
            3,
            disks=(
                DiskUsage(
                    path="/var/lib/docker",
                    present=True,
                    available_bytes=2 * GIB,
                    total_bytes=100 * GIB,
                ),
            ),
        ),
        "free",
        3,
        Severity.warning,
    ),
    "clock": (
        with_fact(4, clock=ClockSample(node_time=1012.0, sent=1000.0, received=1000.02)),
        "+11.99 s",
        4,
        Severity.warning,
    ),
    "peer-ssh": (
        with_fact(
            5,
            peers=(
                PeerResult(
                    target="nvidia@192.0.2.13",
                    exit_status=255,
                    message="Host key verification failed.",
                ),
            ),
        ),
        "cannot SSH",
        5,
        Severity.warning,
    ),
    "probe-interfaces": (
        lambda facts: replace(facts, 6, interfaces=None, errors={"interfaces": "ip: not found"}),
        "interfaces",
        6,
        Severity.error,
    ),
    "reachable": (
        lambda facts: [
            *facts[:7],
            NodeFacts(
                node="spark-7",
                rank=7,
                address="192.0.2.17",
                reachable=False,
                errors={"connect": "node spark-7: connection refused"},
            ),
        ],
        "did not answer",
        7,
        Severity.error,
    ),
}


@pytest.mark.parametrize("check", sorted(FAULTS))
def test_each_fault_is_one_named_problem_with_evidence_and_a_fix(check: str) -> None:
    fault, word, rank, severity = FAULTS[check]
    _, facts = spark_cluster()
    found = problems_of(fault(facts))
    problem = only(found, check)
    assert word in problem.what
    assert problem.rank == rank and problem.node == f"spark-{rank}"
    assert problem.severity is severity
    assert problem.evidence.strip() and problem.fix.strip()
    others = [p for p in found if p.check != check]
    # a fault shows under its own name; a fabric fault may also cost the TCP path, nothing else
    assert all(p.check.startswith(("fabric", "rendezvous-tcp")) for p in others), others


def test_every_fault_of_the_table_at_once_is_reported_at_once() -> None:
    # These replace a field that another fault of the table replaces on the same node.
    overlapping = {
        "reachable", "memory-free-low", "gpu-runtime", "image-platform", "head-port-serve",
        "probe-interfaces",
    }  # fmt: skip
    _, facts = spark_cluster()
    for check in sorted(set(FAULTS) - overlapping):
        facts = FAULTS[check][0](facts)
    found = {p.check for p in problems_of(facts)}
    assert set(FAULTS) - overlapping <= found


def test_a_real_capture_of_a_cut_testbed_link_is_named_fabric_down() -> None:
    text = (FIXTURES / "preflight" / "ip_addr-testbed-node4-fabric-down.stdout").read_text()
    inv, facts = spark_cluster()
    nodes = list(inv.nodes)
    nodes[4] = nodes[4].model_copy(update={"fabric_iface": "enp1s0f1np1"})
    inv = inv.model_copy(update={"nodes": tuple(nodes)})
    facts = replace(facts, 4, interfaces=tuple(parse_ip_addr(text)))
    found = problems_of(facts, inv=inv)
    down = only(found, "fabric-iface-down")
    assert down.rank == 4 and "administratively down" in down.what
    assert "operstate DOWN" in down.evidence
    # the capture's address is on the testbed's subnet, not the Sparks': named too
    assert only(found, "fabric-subnet").rank == 4


def test_a_recipe_for_nine_nodes_against_eight_is_named_for_the_cluster() -> None:
    _, facts = spark_cluster()
    data = json.loads(sglang().model_dump_json())
    data.update(nodes=9, tp=9)
    nine = Recipe.model_validate(data)
    problem = only(problems_of(facts, recipe=nine), "node-count")
    assert problem.node is None and problem.severity is Severity.error
    assert "9 nodes" in problem.what and "has 8" in problem.what


def test_a_node_that_cannot_reach_the_heads_port_is_named_with_the_connect_evidence() -> None:
    inv, facts = spark_cluster()
    dropped = ConnectResult(outcome="timeout", elapsed_ms=3001, message="timed out")
    problem = only(
        problems_of(facts, reach=reach_all_ok(inv, **{"spark-3": dropped})), "rendezvous-tcp"
    )
    assert problem.node == "spark-3"
    assert "192.168.100.13 to 192.168.100.10:29500: timeout after 3001 ms" in problem.evidence
    assert "firewall" in problem.fix


def test_when_no_node_reaches_the_head_the_head_is_named_as_the_likely_cause() -> None:
    inv, facts = spark_cluster()
    refused = ConnectResult(outcome="timeout", elapsed_ms=3000)
    results = {n.name: refused for n in inv.nodes if n.rank > 0}
    found = problems_of(facts, reach=reach_all_ok(inv, **results))
    assert len([p for p in found if p.check == "rendezvous-tcp"]) == 7
    assert only(found, "rendezvous-tcp-head").node == "spark-0"


def test_a_test_listener_that_could_not_bind_names_the_busy_head_port() -> None:
    inv, facts = spark_cluster()
    reach = reach_all_ok(inv).model_copy(
        update={"listener": ListenerReport(listening=False, bind_error="98 Address already in use")}
    )
    problem = only(problems_of(facts, reach=reach), "head-port-rendezvous")
    assert "Address already in use" in problem.evidence and problem.node == "spark-0"


def test_a_listener_that_never_started_makes_reachability_an_error_not_a_pass() -> None:
    inv, facts = spark_cluster()
    reach = reach_all_ok(inv).model_copy(
        update={"listener": None, "listener_error": "python3: not found"}
    )
    assert (
        only(problems_of(facts, reach=reach), "rendezvous-tcp-listener").evidence
        == "python3: not found"
    )


def test_a_missing_image_is_a_warning_when_the_boot_will_push_it() -> None:
    _, facts = spark_cluster()
    facts = replace(facts, 1, image=ImageFacts(reference="img", present=False))
    assert only(problems_of(facts), "image-missing").severity is Severity.error
    pushed = only(problems_of(facts, image_will_be_pushed=True), "image-missing")
    assert pushed.severity is Severity.warning and "will be pushed" in pushed.what


def test_the_room_a_missing_image_needs_is_twice_its_size_when_the_recipe_gives_it() -> None:
    _, facts = spark_cluster()
    disk = DiskUsage(
        path="/var/lib/docker", present=True, available_bytes=40 * GIB, total_bytes=100 * GIB
    )
    facts = replace(facts, 1, image=ImageFacts(reference="img", present=False), disks=(disk,))
    unsized = only(problems_of(facts), "disk-image")
    assert unsized.node == "spark-1" and "needs 64" in unsized.what

    def sized(nbytes: int) -> Recipe:
        data = json.loads(sglang().model_dump_json())
        data["image"]["size_bytes"] = nbytes
        return Recipe.model_validate(data)

    assert not [p for p in problems_of(facts, recipe=sized(15 * GIB)) if p.check == "disk-image"]
    big = only(problems_of(facts, recipe=sized(25 * GIB)), "disk-image")
    assert "needs 50" in big.what and "twice the image's 25" in big.what
    # Present everywhere: nothing to load, so no room is asked for.
    present = replace(facts, 1, image=ImageFacts(reference="img", present=True))
    assert not [p for p in problems_of(present) if p.check == "disk-image"]


def test_peers_that_cannot_ssh_are_an_error_when_the_image_chain_is_needed() -> None:
    _, facts = spark_cluster()
    facts = FAULTS["peer-ssh"][0](facts)
    facts = replace(facts, 1, image=ImageFacts(reference="img", present=False))
    assert only(problems_of(facts), "peer-ssh").severity is Severity.error


def test_an_image_of_another_digest_is_refused() -> None:
    _, facts = spark_cluster()
    data = json.loads(sglang().model_dump_json())
    data["image"]["digest"] = "sha256:" + "cd" * 32
    pinned = Recipe.model_validate(data)
    found = [p for p in problems_of(facts, recipe=pinned) if p.check == "image-digest"]
    assert [p.rank for p in found] == list(range(8))
    assert IMAGE_ID in found[0].evidence


def test_an_image_that_failed_exec_readiness_is_refused() -> None:
    _, facts = spark_cluster()
    assert only(problems_of(facts, image_ready={"spark-4": False}), "image-not-ready").rank == 4


def test_an_inventory_hca_that_is_not_active_is_refused() -> None:
    _, facts = spark_cluster()
    inv = spark_inventory()
    nodes = list(inv.nodes)
    nodes[2] = nodes[2].model_copy(update={"ib_hca": ("rocep1s0f0",)})
    inv = inv.model_copy(update={"nodes": tuple(nodes)})
    problem = only(problems_of(facts, inv=inv), "rdma-hca")
    assert problem.rank == 2 and "rocep1s0f0: DOWN" in problem.evidence


def test_rdma_devices_with_none_active_warn_that_nccl_falls_back_to_sockets() -> None:
    _, facts = spark_cluster()
    rdma = facts[3].rdma
    assert rdma is not None
    down = RdmaInfo(
        dev_infiniband=True,
        devices=tuple(
            d.model_copy(update={"ports": (d.ports[0].model_copy(update={"state": "DOWN"}),)})
            for d in rdma.devices
        ),
    )
    problem = only(problems_of(replace(facts, 3, rdma=down)), "rdma-inactive")
    assert problem.severity is Severity.warning and "NET/Socket" in problem.what


def test_the_containers_of_the_run_being_prepared_are_not_other_containers() -> None:
    _, facts = spark_cluster()
    own = RunningContainer(
        id="1", name="cluster-R-r0", image="img", labels={"cluster.run": "R"}, memory_bytes=50 * GIB
    )
    facts = replace(facts, 0, containers=(own,))
    assert problems_of(facts, run_id="R") == []
    assert only(problems_of(facts), "containers-earlier-run").rank == 0


def test_problems_come_cluster_first_then_by_rank() -> None:
    _, facts = spark_cluster()
    facts = FAULTS["fabric-mtu"][0](facts)
    facts = FAULTS["docker"][0](facts)
    data = json.loads(sglang().model_dump_json())
    data.update(nodes=9, tp=9)
    found = problems_of(facts, recipe=Recipe.model_validate(data))
    assert [p.rank for p in found] == [None, 6, 7]


def test_the_simulated_cluster_skips_docker_image_gpu_and_disk_checks() -> None:
    inv, facts = spark_cluster()
    facts = FAULTS["image-missing"][0](FAULTS["docker"][0](facts))
    recipe = sglang()
    judged = judge(recipe, inv, facts, plan_rendezvous(recipe, inv, facts), runtime="process")
    assert judged.problems == []
    assert "docker" not in judged.ran and "image" not in judged.ran
    assert "fabric-iface" in judged.ran
    why = {n.check: n.because for n in judged.not_checked}
    assert {"docker", "image", "gpu", "containers", "disk", "peer-ssh"} <= set(why)
    assert why["docker"].startswith("the built-in simulated cluster runs each rank as a local")


def test_limits_are_one_object_and_change_the_verdict() -> None:
    _, facts = spark_cluster()
    facts = FAULTS["clock"][0](facts)
    assert problems_of(facts, limits=PreflightLimits(clock_skew_s=60)) == []


# ------------------------------------------------------------------------------------------------
# The runner, over a handler fake


def fake_cluster(
    inv: Inventory, facts_of: dict[str, dict[str, FakeReply]]
) -> Callable[[Node], FakeTransport]:
    probes = FIXTURES / "probes"

    def read(probe: str, case: str) -> str:
        return (FIXTURES / "fabric_probes" / probe / f"{case}.stdout").read_text()

    def handler_for(node: Node) -> Callable[[tuple[str, ...], bytes | None], FakeReply]:
        k = node.rank
        ip = json.dumps(
            [
                {
                    "ifindex": 1,
                    "ifname": node.fabric_iface,
                    "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
                    "mtu": 9000,
                    "operstate": "UP",
                    "addr_info": [
                        {"family": "inet", "local": f"198.18.1.{10 + k}", "prefixlen": 24}
                    ],
                }
            ]
        )
        replies = {
            "uname": FakeReply(stdout=f"{node.name} 6.18.44 x86_64\n"),
            "cat/proc/meminfo": FakeReply(
                stdout=(probes / "meminfo" / "devbox-x86_64.stdout").read_text()
            ),
            "ip": FakeReply(stdout=ip),
            "sh-rdma": FakeReply(stdout=""),
            "nvidia-smi": FakeReply(exit_status=127, stderr="nvidia-smi: command not found"),
            "cat/proc/net/tcp": FakeReply(stdout=read("listening", "testbed-node")),
            "docker-info": FakeReply(stdout=read("docker_info", "testbed-node")),
            "sh-containers": FakeReply(stdout=""),
            "docker-image": FakeReply(
                stdout=(FIXTURES / "image" / "inspect" / "testbed-busybox.stdout").read_text()
            ),
            "date": FakeReply(stdout="1795967902.5\n"),
            "sh-peers": FakeReply(stdout=""),
            "sh-df": FakeReply(stdout=read("df", "testbed-node")),
            "listener": FakeReply(stdout="listening x 29500\ndone 8\n"),
            "connector": FakeReply(stdout="connected 1 x\n"),
            # engine-args: the image's parser accepts rank 0's and rank 1's argv
            "docker-run": FakeReply(stdout=PARSED_OK * 2),
            **facts_of.get(node.name, {}),
        }

        def handler(argv: tuple[str, ...], stdin: bytes | None) -> FakeReply:
            if argv[0] == "python3":
                return replies["listener" if "listen(128)" in argv[2] else "connector"]
            if argv[0] == "sh":
                name = argv[3] if len(argv) > 3 else "rdma"
                if "ps --no-trunc" in argv[2]:
                    name = "containers"
                elif name == "df-probe":
                    name = "df"
                elif name == "peers-probe":
                    name = "peers"
                return replies[f"sh-{name}"]
            if argv[0] == "cat":
                return replies["cat" + argv[1]]
            if argv[0] == "docker":
                return replies["docker-" + argv[1]]
            return replies[argv[0]]

        return handler

    def factory(node: Node) -> FakeTransport:
        return FakeTransport(node, handler_for(node))

    return factory


PARSED_OK = 'ENGINE_ARGS_PROBE {"engine": "sglang", "ok": true, "version": "0.5.23"}\n'


def inventory_like_testbed(tmp_path: Path) -> Inventory:
    hosts = {
        f"ctb-node{k}": {
            "ansible_host": f"198.18.0.{10 + k}",
            "rank": k,
            "fabric_iface": ("enp1s0f1np1", "enP2p1s0f1np1")[k % 2],
        }
        for k in range(8)
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump({"all": {"vars": {"ansible_user": "root"}, "hosts": hosts}}))
    return load_inventory(path)


def small_twin(nodes: int = 8) -> Recipe:
    """The Large 4 SGLang recipe shrunk to what the testbed can pass: no GPU, no RDMA device,
    no weights directory, a busybox image."""
    data = json.loads(sglang().model_dump_json())
    data["image"] = {"reference": "ctb/busybox:1", "platform": "linux/amd64"}
    data["model"] = {"path": data["model"]["path"], "expected_bytes_per_rank": 1_000_000}
    data["docker"].update(gpus=None, volumes=[], extra=[])
    data.update(nodes=nodes, tp=nodes)
    return Recipe.model_validate(data)


async def test_the_runner_gathers_facts_tests_the_port_and_writes_the_report_to_the_run(
    tmp_path: Path,
) -> None:
    inv = inventory_like_testbed(tmp_path)
    run = RunStore(tmp_path / "runs").create()
    result = await run_preflight(small_twin(), inv, run=run, factory=fake_cluster(inv, {}))
    assert result.report.ok, result.report.problems
    assert result.rendezvous.head_addr == "198.18.1.10"
    assert result.launch is not None and result.launch.run_id == run.id
    reach = result.report.reachability
    assert reach is not None and set(reach.results) == {n.name for n in inv.nodes}
    written = json.loads((run.dir / "preflight.json").read_text())
    assert written["ok"] is True and written["errors"] == 0
    assert (run.dir / "plans" / "rendezvous.json").exists()
    assert (run.dir / "plans" / "launch.json").exists()
    assert len(json.loads((run.dir / "facts.json").read_text())) == 8
    assert [e.kind for e in run.events()] == ["preflight"]


async def test_the_runner_reports_a_dropped_connect_and_a_missing_image_together(
    tmp_path: Path,
) -> None:
    inv = inventory_like_testbed(tmp_path)
    faults = {
        "ctb-node3": {"connector": FakeReply(stdout="timeout 3001\n")},
        "ctb-node5": {
            "docker-image": FakeReply(exit_status=1, stderr="Error: No such image: ctb/busybox:1\n")
        },
    }
    result = await run_preflight(small_twin(), inv, factory=fake_cluster(inv, faults))
    found = {(p.check, p.node) for p in result.report.errors}
    assert ("rendezvous-tcp", "ctb-node3") in found
    assert ("image-missing", "ctb-node5") in found
    assert not result.report.ok


async def test_peers_are_asked_only_when_the_image_chain_will_run(tmp_path: Path) -> None:
    inv = inventory_like_testbed(tmp_path)
    made: list[FakeTransport] = []
    missing = {"docker-image": FakeReply(exit_status=1, stderr="Error: No such image: x\n")}

    def recording(faults: dict[str, dict[str, FakeReply]]) -> Callable[[Node], FakeTransport]:
        make = fake_cluster(inv, faults)

        def factory(node: Node) -> FakeTransport:
            made.append(make(node))
            return made[-1]

        return factory

    def asked_peers() -> bool:
        return any(len(c) > 3 and c[3] == "peers-probe" for t in made for c in t.calls)

    await run_preflight(small_twin(), inv, factory=recording({}))
    assert not asked_peers()
    made.clear()
    await run_preflight(small_twin(), inv, factory=recording({"ctb-node4": missing}))
    assert asked_peers()


async def test_each_node_asks_only_its_chain_neighbour_and_connects_in_a_command_of_its_own(
    tmp_path: Path,
) -> None:
    # Issue 31: 7 SSH pairs for 8 nodes (not 56), each in one command started beside the
    # listener; the connect to the head's port in one command per node after it. Node 6 cannot
    # reach node 7: one peer-ssh error, on node 6.
    inv = inventory_like_testbed(tmp_path)
    missing = {"docker-image": FakeReply(exit_status=1, stderr="Error: No such image: x\n")}
    sessions: dict[str, list[tuple[str, ...]]] = {}
    transports: dict[str, FakeTransport] = {}
    make = fake_cluster(
        inv,
        {
            "ctb-node3": missing,
            "ctb-node6": {
                "sh-peers": FakeReply(stdout="peer root@198.18.0.17 255 Permission denied.\n")
            },
        },
    )

    def factory(node: Node) -> FakeTransport:
        t = make(node)
        execute = t._execute

        async def recorded(argv: tuple[str, ...], timeout_s: Any, stdin: Any) -> Any:
            sessions.setdefault(node.name, []).append(argv)
            return await execute(argv, timeout_s, stdin)

        t._execute = recorded  # type: ignore[method-assign]
        transports[node.name] = t
        return t

    result = await run_preflight(small_twin(), inv, factory=factory)
    asked = {
        n: [c[4:] for c in t.calls if len(c) > 3 and c[3] == "peers-probe"]
        for n, t in transports.items()
    }
    assert asked == {
        f"ctb-node{k}": ([(f"root@198.18.0.{11 + k}",)] if k < 7 else []) for k in range(8)
    }
    for k in range(8):  # one command for the SSH (none on the last node), one for the connect
        mine = sessions[f"ctb-node{k}"]
        ssh = [a for a in mine if len(a) > 3 and a[3] == "peers-probe"]
        connect = [a for a in mine if a[0] == "python3" and "listen(128)" not in a[2]]
        assert (len(ssh), len(connect)) == ((1 if k < 7 else 0), 1), mine
    peer = [p for p in result.report.errors if p.check == "peer-ssh"]
    assert [(p.node, p.what) for p in peer] == [
        (
            "ctb-node6",
            "ctb-node6 cannot SSH to root@198.18.0.17, the next node in the image chain: the "
            "chain needs it",
        )
    ]


async def test_a_recipe_for_nine_nodes_still_judges_every_node_but_makes_no_launch_plan(
    tmp_path: Path,
) -> None:
    inv = inventory_like_testbed(tmp_path)
    result = await run_preflight(small_twin(9), inv, factory=fake_cluster(inv, {}))
    assert [p.check for p in result.report.errors] == ["node-count"]
    assert result.launch is None and "9 nodes" in (result.launch_error or "")


# ------------------------------------------------------------------------------------------------
# The command, on the built-in simulated cluster (real local processes, real listener)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_recipe(tmp_path: Path, recipe: Recipe) -> Path:
    """The recipe as a file, on two free ports: this machine also runs other people's simulated
    boots, whose rank 0 may hold 30000 or 29500."""
    data = json.loads(recipe.model_dump_json())
    data["name"] = "small-twin"
    serve, rendezvous = free_port(), free_port()
    data["ports"] = {"serve": serve, "rendezvous": rendezvous}
    data["args"] = [str(serve) if a == "30000" else a for a in data["args"]]
    path = tmp_path / "small-twin.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_cluster_preflight_passes_on_the_simulated_cluster_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["preflight", str(write_recipe(tmp_path, small_twin())), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out["problems"]
    assert out["ok"] and out["runtime"] == "process"
    assert out["reachability"]["address"] == "127.0.0.10"
    assert all(r["outcome"] == "connected" for r in out["reachability"]["results"].values())


def test_cluster_preflight_refuses_with_exit_4_and_names_every_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["preflight", str(write_recipe(tmp_path, small_twin(9)))])
    captured = capsys.readouterr()
    assert code == ExitCode.PREFLIGHT_REFUSED == 4
    assert "the recipe small-twin is for 9 nodes, the inventory has 8" in captured.err
    assert "fix:" in captured.err


# -- the engine's memory claim ------------------------------------------------------------------


def test_a_vllm_claim_over_memfree_is_refused_with_the_numbers_and_no_cache_dropping() -> None:
    _, facts = spark_cluster()
    # a warm page cache after an earlier load: available, but not free (seed 001's relaunch)
    warm = MEM_LOW.model_copy(
        update={"mem_total": 119 * GIB, "mem_free": 60 * GIB, "mem_available": 115 * GIB}
    )
    found = problems_of(replace(facts, 3, memory=warm), recipe=vllm())
    p = only(found, "memory-claim")
    assert (p.severity, p.rank) == (Severity.error, 3)
    assert "vLLM refuses to start" in p.what
    assert p.evidence.startswith("--gpu-memory-utilization 0.89 x MemTotal 119.0 GiB = 105.9 GiB")
    assert "lower --gpu-memory-utilization to 0.50 or less" in p.fix
    assert "never drop caches" in p.fix and "drop_caches" not in p.fix


def test_an_sglang_claim_over_memfree_is_a_warning_and_over_available_an_error() -> None:
    recipe = resolve_recipe("mistral-small4-1x-sglang")  # --mem-fraction-static 0.75
    inv, one = spark_cluster(spark_inventory(1))
    tight = MEM_LOW.model_copy(update={"mem_total": 119 * GIB, "mem_free": 80 * GIB})
    tight = tight.model_copy(update={"mem_available": 100 * GIB})
    p = only(problems_of(replace(one, 0, memory=tight), recipe=recipe, inv=inv), "memory-claim")
    assert p.severity is Severity.warning and "89.2 GiB" in p.evidence
    short = tight.model_copy(update={"mem_available": 85 * GIB})
    p = only(problems_of(replace(one, 0, memory=short), recipe=recipe, inv=inv), "memory-claim")
    assert p.severity is Severity.error and "more than it has available" in p.what
