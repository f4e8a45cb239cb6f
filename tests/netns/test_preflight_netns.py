"""`preflight` against eight real sshd + dockerd nodes (the testbed), with real faults.

The recipe is the 8x SGLang lane's simulated twin (orchestrator/simulator/twin.py): the real
args, env, ports and docker options minus GPUs and RDMA devices, the testbed's busybox image,
and a weights directory that every node sees (the nodes share the controller's filesystem).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.inventory import load_inventory
from orchestrator.models.inventory import Inventory
from orchestrator.models.recipe import Recipe
from orchestrator.preflight import PreflightResult, run_preflight
from orchestrator.recipes import resolve_recipe
from orchestrator.runstore import RunStore
from orchestrator.simulator.twin import make_twin
from orchestrator.testbed import FAB_MTU, TEST_IMAGE, Testbed
from orchestrator.transport import ConnectOptions

pytestmark = [pytest.mark.netns, pytest.mark.timeout(300)]

TIMINGS: dict[str, float] = {}


def host_python_volumes() -> list[str]:
    """The controller's Python, read-only, for a busybox container (TESTBED.md)."""
    venv = Path(sys.prefix)
    base = Path(sys.base_prefix)
    mounts = ["/usr:/usr:ro", "/lib:/lib:ro", "/lib64:/lib64:ro", f"{base}:{base}:ro"]
    if venv != base:
        mounts.append(f"{venv}:{venv}:ro")
    return mounts


def make_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small weights directory every node sees (the nodes share the controller's disk)."""
    d = tmp_path_factory.mktemp("weights")
    (d / "model-00001-of-00002.safetensors").write_bytes(b"\x01" * 4096)
    (d / "model-00002-of-00002.safetensors").write_bytes(b"\x02" * 2048)
    (d / "config.json").write_text("{}\n")
    return d


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_weights(tmp_path_factory)


def twin(weights: Path, nodes: int = 8) -> Recipe:
    recipe = make_twin(
        resolve_recipe("mistral-large4-8x-sglang"),
        "test",
        python=str(Path(sys.prefix) / "bin" / "python"),
        image=TEST_IMAGE,
        weights_dir=str(weights),
        extra_volumes=host_python_volumes(),
    )
    # The development VM lacks CAP_SYS_RESOURCE (hard RLIMIT_MEMLOCK 8 MiB), so runc cannot
    # give a container `--ulimit memlock=-1:-1` ("error setting rlimit type 8: operation not
    # permitted"). Unlimited memlock is for RDMA's pinned memory, which the twin has dropped.
    ulimits = {k: v for k, v in recipe.docker.ulimits.items() if k != "memlock"}
    update: dict[str, object] = {"docker": recipe.docker.model_copy(update={"ulimits": ulimits})}
    if nodes != recipe.nodes:
        update.update(nodes=nodes, tp=nodes)
    return recipe.model_copy(update=update)


def preflight(recipe: Recipe, inventory: Inventory, **kw: object) -> PreflightResult:
    started = time.monotonic()
    result = asyncio.run(
        run_preflight(recipe, inventory, ConnectOptions(connect_timeout_s=10), **kw)  # type: ignore[arg-type]
    )
    TIMINGS[f"preflight {len(TIMINGS)}"] = time.monotonic() - started
    return result


def errors(result: PreflightResult) -> set[tuple[str, str | None]]:
    return {(p.check, p.node) for p in result.report.errors}


def restore(testbed: Testbed) -> None:
    """Undo the two faults heal() does not know: a changed MTU and a removed image."""
    for nd in testbed.nodes:
        testbed.netns_run(nd, ["ip", "link", "set", nd.fab_iface, "mtu", str(FAB_MTU)])
        if testbed.docker(nd, "image", "inspect", TEST_IMAGE, check=False).returncode != 0:
            testbed.build_test_image(nd)


@pytest.fixture
def tb(clean_testbed: Testbed, testbed_image: str) -> Iterator[Testbed]:
    """The testbed with the test image on every node, every fault undone afterwards."""
    yield clean_testbed
    restore(clean_testbed)


def test_the_8x_sglang_twin_passes_preflight_on_the_testbed(
    tb: Testbed, weights_dir: Path, tmp_path: Path
) -> None:
    inventory = load_inventory(tb.inventory)
    run = RunStore(tmp_path / "runs").create()
    started = time.monotonic()
    result = preflight(twin(weights_dir), inventory, run=run)
    elapsed = time.monotonic() - started
    report = result.report
    assert report.ok, [p.model_dump() for p in report.errors]
    assert result.rendezvous.head_addr == tb.node(0).fab_addr
    for nd, rank in zip(tb.nodes, result.rendezvous.ranks, strict=True):
        assert rank.address == nd.fab_addr
        assert rank.env["NCCL_SOCKET_IFNAME"] == rank.env["GLOO_SOCKET_IFNAME"] == nd.fab_iface
        assert "NCCL_IB_HCA" not in rank.env  # no RDMA on the testbed, and the plan says so
        assert any("NET/Socket" in note for note in rank.notes)
    reach = report.reachability
    assert reach is not None and reach.listener is not None and reach.listener.listening
    assert {n: r.outcome for n, r in reach.results.items()} == {
        nd.name: "connected" for nd in tb.nodes
    }
    assert sorted(reach.listener.accepted_from) == sorted(nd.fab_addr for nd in tb.nodes)
    assert result.launch is not None and result.launch.run_id == run.id
    assert json.loads((run.dir / "preflight.json").read_text())["ok"] is True
    assert (run.dir / "plans" / "launch.json").exists()
    assert elapsed < 30, f"preflight took {elapsed:.1f} s"
    print(f"\npreflight of the twin on 8 testbed nodes: {elapsed:.2f} s, {report.checks}")


def test_every_injected_fault_is_caught_and_named_in_one_report(
    tb: Testbed, weights_dir: Path, tmp_path: Path
) -> None:
    nodes = tb.nodes
    tb.cut_link(3, "fabric")  # node 3: fabric link down
    tb.netns_run(5, ["ip", "link", "set", nodes[5].fab_iface, "mtu", "1500"])  # node 5: MTU
    tb.start_silent_listener(0, 29500)  # the head's rendezvous port occupied
    tb.drop_port(6, 29500)  # node 6: the rendezvous port dropped by nftables
    tb.docker(2, "rmi", TEST_IMAGE)  # node 2: no image
    inventory = load_inventory(tb.inventory)
    started = time.monotonic()
    result = preflight(twin(weights_dir, nodes=9), inventory)
    elapsed = time.monotonic() - started
    found = errors(result)
    name = {k: nd.name for k, nd in enumerate(nodes)}
    expected = {
        ("node-count", None),
        ("fabric-iface-down", name[3]),
        ("fabric-mtu", name[5]),
        ("head-port-rendezvous", name[0]),
        ("rendezvous-tcp", name[6]),
        ("image-missing", name[2]),
    }
    assert expected <= found, sorted(found)
    # nothing is blamed on a healthy node; node 3's lost link also costs it the TCP path
    blamed = {node for _, node in found if node is not None}
    assert blamed == {name[0], name[2], name[3], name[5], name[6]}, sorted(found)
    evidence = {(p.check, p.node): p for p in result.report.errors}
    assert "DOWN" in evidence[("fabric-iface-down", name[3])].evidence
    assert "1500" in evidence[("fabric-mtu", name[5])].what
    assert "0.0.0.0:29500" in evidence[("head-port-rendezvous", name[0])].evidence
    assert "timeout" in evidence[("rendezvous-tcp", name[6])].evidence
    assert "No such image" in evidence[("image-missing", name[2])].evidence
    assert all(p.fix for p in result.report.problems)
    assert result.launch is None  # 9 ranks cannot be planned on 8 nodes
    assert elapsed < 30, f"preflight took {elapsed:.1f} s"
    print(f"\npreflight with six faults: {elapsed:.2f} s, {len(result.report.errors)} errors")


@pytest.mark.parametrize(
    "fault",
    ["link-down", "mtu", "head-port", "port-dropped", "no-image"],
)
def test_each_fault_alone_is_named_on_its_node_and_nowhere_else(
    tb: Testbed, weights_dir: Path, fault: str
) -> None:
    nodes = tb.nodes
    if fault == "link-down":
        tb.cut_link(4, "fabric")
        want = {("fabric-iface-down", nodes[4].name), ("rendezvous-tcp", nodes[4].name)}
    elif fault == "mtu":
        tb.netns_run(1, ["ip", "link", "set", nodes[1].fab_iface, "mtu", "1500"])
        want = {("fabric-mtu", nodes[1].name)}
    elif fault == "head-port":
        tb.start_silent_listener(0, 29500)
        want = {("head-port-rendezvous", nodes[0].name)}
    elif fault == "port-dropped":
        tb.drop_port(7, 29500)
        want = {("rendezvous-tcp", nodes[7].name)}
    else:
        tb.docker(6, "rmi", TEST_IMAGE)
        want = {("image-missing", nodes[6].name)}
    result = preflight(twin(weights_dir), load_inventory(tb.inventory))
    assert errors(result) == want, [p.model_dump() for p in result.report.errors]
