"""The cluster as the inventory describes it: strict, frozen, inert.

The file is an Ansible YAML inventory (`orchestrator/inventory.py` reads it with Ansible's
variable precedence); these models hold only what `cluster` understands. Everything else a host
carries (`ansible_*`, the user's own variables) stays in `Node.extra_vars`, untouched.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import Field, StrictInt, StrictStr

from orchestrator.models.base import StrictModel


class Connection(StrEnum):
    """How the controller reaches a node: OpenSSH (Sparks, testbed) or subprocesses (simulated)."""

    ssh = "ssh"
    local = "local"


class HostVars(StrictModel):
    """The cluster's own host variables, validated strictly (a misspelling is an error)."""

    rank: StrictInt = Field(ge=0, description="tensor-parallel node rank, unique, 0..N-1")
    fabric_iface: StrictStr = Field(
        min_length=1, description="interface whose address NCCL and Gloo use (the CX-7 port)"
    )
    mgmt_iface: StrictStr | None = Field(default=None, description="management port, e.g. enP7s7")
    ib_hca: tuple[StrictStr, ...] = Field(
        default=(), description="RoCE HCAs for NCCL_IB_HCA; both CX-7 twins for full bandwidth"
    )
    docker_host: StrictStr | None = Field(
        default=None, description="DOCKER_HOST on that node, when not the default socket"
    )


class ClusterVars(StrictModel):
    """The cluster-wide `cluster_*` variables (usually in `all.vars`).

    Later features register their own keys here, so an unknown `cluster_*` key stays an error.
    """

    cluster_name: StrictStr = "cluster"
    cluster_known_hosts: StrictStr | None = None
    cluster_connection: Connection = Connection.ssh
    cluster_runs_dir: StrictStr | None = None
    cluster_weights_root: StrictStr | None = None


HOST_VAR_NAMES = frozenset(HostVars.model_fields)
CLUSTER_VAR_NAMES = frozenset(ClusterVars.model_fields)


class Node(StrictModel):
    """One Spark (or stand-in), everything needed to reach it and to plan its rank."""

    name: str
    address: str
    port: int = 22
    user: str
    private_key: Path | None = None
    rank: int
    fabric_iface: str
    mgmt_iface: str | None = None
    ib_hca: tuple[str, ...] = ()
    docker_host: str | None = None
    extra_vars: dict[str, Any] = Field(default_factory=dict)


class Inventory(StrictModel):
    """A validated cluster: nodes sorted by rank, rank 0 first (the head)."""

    path: Path
    sha256: str
    name: str
    connection: Connection
    known_hosts: Path | None
    runs_dir: Path | None
    weights_root: str | None = None
    nodes: tuple[Node, ...]

    @property
    def head(self) -> Node:
        return self.nodes[0]

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)
