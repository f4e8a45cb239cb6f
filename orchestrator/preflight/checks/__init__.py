"""The checks, one function each, by family: the cluster's shape (`cluster`), the fabric
(`fabric`) and each node's resources (`resources`). `CHECKS` names them for people;
`_CHECK_FUNCTIONS` is the order the judge runs them in."""

from __future__ import annotations

from collections.abc import Callable
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
    from orchestrator.preflight.judge import _Judge

CHECKS: dict[str, str] = {
    "node-count": "the recipe's node count equals the inventory's",
    "reachable": "every node answers over SSH",
    "probe": "every probe answered",
    "fabric-iface": "the fabric interface exists on every node, is up and has an IPv4 address",
    "fabric-subnet": "every fabric address is in the head's subnet",
    "fabric-mtu": "the fabric MTU is the same on every node (and 9000 on Sparks)",
    "head-port": "the rendezvous and serve ports are free on the head",
    "rendezvous-tcp": "every node opens a TCP connection to the head's rendezvous port over the "
    "fabric (tested for real)",
    "engine-args": "the image's own engine parser accepts the rank-0 and rank-1 argv (a throwaway "
    "probe container on the head: parse only, no GPU, no weights)",
    "docker": "the Docker daemon answers",
    "image": "the image is on every node, with the recipe's digest and the node's platform",
    "gpu": "a GPU and the NVIDIA runtime where the recipe asks for GPUs",
    "rdma": "RDMA devices named by NCCL_IB_HCA exist and are ACTIVE; /dev/infiniband exists when "
    "the recipe passes it",
    "weights": "the weights directory exists with the same size on every node",
    "weights-copy": "every node holds the same complete staged copy (`cluster weights`); "
    "where none is staged, the load-time estimate from shared storage",
    "memory": "enough free memory for a rank",
    "memory-claim": "the engine's memory claim (vLLM --gpu-memory-utilization, SGLang "
    "--mem-fraction-static, x MemTotal) fits MemFree/MemAvailable, and the load's page cache fits "
    "beside it",
    "containers": "no other container holds memory, no rank of an earlier run still runs",
    "disk": "free disk where the image lands",
    "clock": "clocks agree with the controller's",
    "peer-ssh": "nodes can SSH to each other (the image chain needs it)",
}


_CHECK_FUNCTIONS: tuple[tuple[str, Callable[[_Judge], None]], ...] = (
    ("node-count", _check_node_count),
    ("reachable", _check_reachable),
    ("probe", _check_probes),
    ("fabric-iface", _check_fabric),
    ("fabric-subnet", _check_subnet),
    ("fabric-mtu", _check_mtu),
    ("head-port", _check_ports),
    ("rendezvous-tcp", lambda j: None),  # needs the reachability result: see judge()
    ("engine-args", lambda j: None),  # needs the probe's result: see judge()
    ("docker", _check_docker),
    ("image", _check_image),
    ("gpu", _check_gpu),
    ("rdma", _check_rdma),
    ("weights", _check_weights),
    ("weights-copy", _check_weights_copies),
    ("memory", _check_memory),
    ("memory-claim", _check_memory_claim),
    ("containers", _check_containers),
    ("disk", _check_disk),
    ("clock", _check_clock),
    ("peer-ssh", _check_peers),
)
_DOCKER_ONLY = {"docker", "image", "gpu", "containers", "disk", "peer-ssh"}
