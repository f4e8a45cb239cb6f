"""The checks, one function each, by family: the cluster's shape (`cluster`), the fabric
(`fabric`) and each node's resources (`resources`). `CHECK_TABLE` is the one list of them, in
the order the judge runs them; `CHECKS` is its names and descriptions, for people."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.preflight.checks.cluster import _check_node_count, _check_probes, _check_reachable
from orchestrator.preflight.checks.engine import _check_memory_claim
from orchestrator.preflight.checks.fabric import (
    _check_fabric,
    _check_mtu,
    _check_ports,
    _check_rdma,
    _check_subnet,
)
from orchestrator.preflight.checks.kernel import KERNEL_CHECKS
from orchestrator.preflight.checks.resources import (
    _check_clock,
    _check_containers,
    _check_disk,
    _check_docker,
    _check_gpu,
    _check_image,
    _check_memory,
    _check_peers,
    _check_weights,
)
from orchestrator.preflight.checks.weights_copies import _check_weights_copies

if TYPE_CHECKING:
    from orchestrator.preflight.checks.context import Judge


@dataclass(frozen=True)
class Check:
    """One check: its name (the family of its problems' ids), what it asks, for people, and the
    function the judge runs (None: it needs a result the judge is handed: see `judge()`)."""

    name: str
    description: str
    run: Callable[[Judge], None] | None
    docker_only: bool = False  # skipped on the process runtime: no image, container or disk


CHECK_TABLE: tuple[Check, ...] = (
    Check("node-count", "the recipe's node count equals the inventory's", _check_node_count),
    Check("reachable", "every node answers over SSH", _check_reachable),
    Check("probe", "every probe answered", _check_probes),
    Check(
        "fabric-iface",
        "the fabric interface exists on every node, is up and has an IPv4 address",
        _check_fabric,
    ),
    Check("fabric-subnet", "every fabric address is in the head's subnet", _check_subnet),
    Check(
        "fabric-mtu",
        "the fabric MTU is the same on every node (and 9000 on Sparks)",
        _check_mtu,
    ),
    Check("head-port", "the rendezvous and serve ports are free on the head", _check_ports),
    Check(
        "rendezvous-tcp",
        "every node opens a TCP connection to the head's rendezvous port over the fabric (tested "
        "for real)",
        None,
    ),
    Check(
        "engine-args",
        "the image's own engine parser accepts the rank-0 and rank-1 argv (a throwaway probe "
        "container on the head: parse only, no GPU, no weights)",
        None,
    ),
    Check("docker", "the Docker daemon answers", _check_docker, docker_only=True),
    Check(
        "image",
        "the image is on every node, with the recipe's digest and the node's platform",
        _check_image,
        docker_only=True,
    ),
    Check(
        "gpu",
        "a GPU and the NVIDIA runtime where the recipe asks for GPUs",
        _check_gpu,
        docker_only=True,
    ),
    Check(
        "rdma",
        "RDMA devices named by NCCL_IB_HCA exist and are ACTIVE; /dev/infiniband exists when the "
        "recipe passes it",
        _check_rdma,
    ),
    Check(
        "weights",
        "the weights directory exists with the same size on every node",
        _check_weights,
    ),
    Check(
        "weights-copy",
        "every node holds the same complete staged copy (`cluster weights`); where none is "
        "staged, the load-time estimate from shared storage",
        _check_weights_copies,
    ),
    Check("memory", "enough free memory for a rank", _check_memory),
    Check(
        "memory-claim",
        "the engine's memory claim (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static, "
        "x MemTotal) fits MemFree/MemAvailable, and the load's page cache fits beside it",
        _check_memory_claim,
    ),
    Check(
        "containers",
        "no other container holds memory, no rank of an earlier run still runs",
        _check_containers,
        docker_only=True,
    ),
    Check("disk", "free disk where the image lands", _check_disk, docker_only=True),
    Check("clock", "clocks agree with the controller's", _check_clock),
    Check(
        "peer-ssh",
        "each node can SSH to the next in rank order (the image chain streams node to node)",
        _check_peers,
        docker_only=True,
    ),
    # The judge dispatches these over the kernel health the runner hands it (checks/kernel.py).
    *(Check(name, what, None, docker_only=True) for name, what in KERNEL_CHECKS.items()),
)
CHECKS: dict[str, str] = {c.name: c.description for c in CHECK_TABLE}
