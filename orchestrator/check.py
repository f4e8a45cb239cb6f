"""`cluster inventory check`: connect to every node at once and say, per node, what it is.

The verdict per node is pure (`judge`) over facts gathered by probes; gathering is thin.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from orchestrator.dockercli import DockerCli
from orchestrator.errors import ClusterError, HostKeyError, NodeUnreachable
from orchestrator.fanout import settle
from orchestrator.models.inventory import Connection, Inventory, Node
from orchestrator.probes.base import Probe
from orchestrator.probes.docker import docker_version_probe
from orchestrator.probes.gpu import NVIDIA_SMI
from orchestrator.probes.host import HOST
from orchestrator.probes.interfaces import IP_ADDR, find_interface
from orchestrator.probes.meminfo import MEMINFO
from orchestrator.transport import ConnectOptions, Transport, transport_for

T = TypeVar("T")
PROBE_TIMEOUT_S = 15.0


class FabricState(BaseModel):
    model_config = ConfigDict(frozen=True)

    iface: str
    present: bool
    addresses: tuple[str, ...] = ()
    mtu: int | None = None
    state: str | None = None


class NodeCheck(BaseModel):
    """One row of the check: reachable or why not, and what the node is."""

    model_config = ConfigDict(frozen=True)

    node: str
    rank: int
    address: str
    reachable: bool
    reason: str | None = None  # refused, timeout, host-key, auth, dropped, ...
    hostname: str | None = None
    arch: str | None = None
    kernel: str | None = None
    mem_total: int | None = None
    mem_free: int | None = None
    mem_available: int | None = None
    docker_server: str | None = None
    gpu: str | None = None
    fabric: FabricState | None = None
    problems: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        return self.reachable and not self.problems


class CheckReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    inventory: str
    connection: str
    nodes: tuple[NodeCheck, ...]

    @property
    def healthy(self) -> bool:
        return all(n.healthy for n in self.nodes)

    def to_json(self) -> dict[str, Any]:
        return {
            "inventory": self.inventory,
            "connection": self.connection,
            "healthy": self.healthy,
            "nodes": [{**n.model_dump(mode="json"), "healthy": n.healthy} for n in self.nodes],
        }


def _reason(exc: Exception) -> str:
    if isinstance(exc, NodeUnreachable):
        return exc.reason
    if isinstance(exc, HostKeyError):
        return "host-key"
    return type(exc).__name__.removesuffix("Error").lower() or "error"


def _fabric_ok(state: FabricState) -> str | None:
    """Why the fabric interface is not usable for NCCL, or None when it is."""
    if not state.present:
        return f"fabric interface {state.iface} not found"
    if state.state not in ("UP", "UNKNOWN"):  # loopback reports UNKNOWN and works
        return f"fabric interface {state.iface} is {state.state}"
    if not state.addresses:
        return f"fabric interface {state.iface} has no IPv4 address"
    return None


async def _ask(transport: Transport, probe: Probe[T]) -> T:
    result = await transport.run(probe.argv, timeout_s=PROBE_TIMEOUT_S)
    return probe.interpret(result.exit_status, result.stdout, result.stderr)


TransportFactory = Callable[[Node], Transport]


async def check_node(inventory: Inventory, node: Node, transport: Transport) -> NodeCheck:
    base: dict[str, Any] = {"node": node.name, "rank": node.rank, "address": node.address}
    try:
        await transport.connect()
    except ClusterError as exc:
        return NodeCheck(**base, reachable=False, reason=_reason(exc), problems=(exc.line(),))
    try:
        outcomes = await asyncio.gather(
            _ask(transport, HOST),
            _ask(transport, MEMINFO),
            _ask(transport, IP_ADDR),
            _ask(transport, docker_version_probe(DockerCli.of(node))),
            _ask(transport, NVIDIA_SMI),
            return_exceptions=True,
        )
    finally:
        await transport.close()
    host, mem, ifaces, docker, gpu = outcomes
    problems: list[str] = []
    facts: dict[str, Any] = {}
    for value in outcomes:
        if isinstance(value, ClusterError):
            if not (value is docker and inventory.connection is Connection.local):
                problems.append(value.line())
        elif isinstance(value, BaseException):
            raise value
    if not isinstance(host, BaseException):
        facts.update(hostname=host.hostname, arch=host.arch, kernel=host.kernel)
    if not isinstance(mem, BaseException):
        facts.update(
            mem_total=mem.mem_total, mem_free=mem.mem_free, mem_available=mem.mem_available
        )
    if not isinstance(docker, BaseException):
        facts["docker_server"] = docker.server_version
    if not isinstance(gpu, BaseException):
        facts["gpu"] = ", ".join(g.name for g in gpu.gpus) if gpu.present else "no GPU"
    if not isinstance(ifaces, BaseException):
        found = find_interface(ifaces, node.fabric_iface)
        fabric = FabricState(
            iface=node.fabric_iface,
            present=found is not None,
            addresses=tuple(found.ipv4) if found else (),
            mtu=found.mtu if found else None,
            state=found.operstate if found else None,
        )
        facts["fabric"] = fabric
        if why := _fabric_ok(fabric):
            problems.append(why)
    return NodeCheck(**base, reachable=True, **facts, problems=tuple(problems))


async def check_inventory(
    inventory: Inventory,
    options: ConnectOptions,
    factory: TransportFactory | None = None,
) -> CheckReport:
    """Check every node at once. `factory` makes a node's transport (a fake in core tests)."""
    make = factory or (lambda n: transport_for(inventory, n, options))
    outcomes = await settle(
        inventory.nodes, lambda n: check_node(inventory, n, make(n)), limit=options.fanout
    )
    rows = []
    for outcome in outcomes:
        if outcome.value is not None:
            rows.append(outcome.value)
        else:  # an unexpected error on one node is that node's row, never the whole check
            n = outcome.node
            rows.append(
                NodeCheck(
                    node=n.name,
                    rank=n.rank,
                    address=n.address,
                    reachable=False,
                    reason="error",
                    problems=(f"{type(outcome.error).__name__}: {outcome.error}",),
                )
            )
    return CheckReport(
        inventory=str(inventory.path), connection=inventory.connection.value, nodes=tuple(rows)
    )
