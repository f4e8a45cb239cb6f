"""`cluster inventory check`: connect to every node at once and say, per node, what it is.

The facts come the way preflight gets them (`facts.gather_node_facts`: the probes in one
batched command per node); the verdict per node is pure (`judge_node`), and the fabric
interface is judged by the one rule preflight uses (`probes.interfaces.fabric_faults`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from orchestrator.deadlines import DEADLINES
from orchestrator.errors import ClusterError, HostKeyError, NodeUnreachable
from orchestrator.facts import FactsRequest, gather_node_facts
from orchestrator.fanout import settle_each
from orchestrator.models.inventory import Connection, Inventory, Node
from orchestrator.probes.interfaces import fabric_faults
from orchestrator.probes.node_facts import NodeFacts
from orchestrator.transport import ConnectOptions, Transport, TransportFactory, transport_for


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
    # The node's size and two of its MemoryReading (models/memory.py), as `--json` has them.
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


CHECK_FACTS = frozenset({"host", "memory", "interfaces", "docker", "gpu"})
"""What the check asks of each node: what it is, not whether a recipe fits (that is preflight)."""


async def check_node(inventory: Inventory, node: Node, transport: Transport) -> NodeCheck:
    """One node's row: its facts through the same path as preflight (`gather_node_facts`,
    one batched command), judged by `judge_node`."""
    base: dict[str, Any] = {"node": node.name, "rank": node.rank, "address": node.address}
    try:
        await transport.connect()
    except ClusterError as exc:
        return NodeCheck(**base, reachable=False, reason=_reason(exc), problems=(exc.line(),))
    # The built-in simulated cluster runs processes: its Docker, if any, is not asked.
    request = FactsRequest(
        docker=inventory.connection is Connection.ssh,
        clock=False,
        only=CHECK_FACTS,
        timeout_s=DEADLINES.probe_s,
    )
    try:
        facts = await gather_node_facts(node, transport, request)
    finally:
        await transport.close()
    return judge_node(node, facts)


def judge_node(node: Node, facts: NodeFacts) -> NodeCheck:
    """A node's row from its facts (pure): every probe that failed, a daemon that does not
    answer, and the fabric interface by the one rule preflight uses (`fabric_faults`)."""
    base: dict[str, Any] = {"node": node.name, "rank": node.rank, "address": node.address}
    if not facts.reachable:
        return NodeCheck(
            **base, reachable=False, reason="error", problems=tuple(facts.errors.values())
        )
    problems = list(facts.errors.values())
    row: dict[str, Any] = {}
    if facts.host is not None:
        row.update(hostname=facts.host.hostname, arch=facts.host.arch, kernel=facts.host.kernel)
    if facts.memory is not None:
        m = facts.memory
        row.update(mem_total=m.mem_total, mem_free=m.mem_free, mem_available=m.mem_available)
    if facts.docker is not None:
        row["docker_server"] = facts.docker.server_version
        if not facts.docker.reachable:
            problems.append(
                f"the docker daemon does not answer: {facts.docker.error or 'no server'}"
            )
    if facts.gpu is not None:
        gpus = facts.gpu.gpus
        row["gpu"] = ", ".join(g.name for g in gpus) if facts.gpu.present else "no GPU"
    if facts.interfaces is not None:
        found = facts.interface(node.fabric_iface)
        row["fabric"] = FabricState(
            iface=node.fabric_iface,
            present=found is not None,
            addresses=tuple(found.ipv4) if found else (),
            mtu=found.mtu if found else None,
            state=found.operstate if found else None,
        )
        problems += [f.what for f in fabric_faults(node.name, node.fabric_iface, facts.interfaces)]
    return NodeCheck(**base, reachable=True, **row, problems=tuple(problems))


async def check_inventory(
    inventory: Inventory,
    options: ConnectOptions,
    factory: TransportFactory | None = None,
) -> CheckReport:
    """Check every node at once. `factory` makes a node's transport (a fake in core tests)."""
    make = factory or (lambda n: transport_for(inventory, n, options))

    def failed(n: Node, why: str) -> NodeCheck:
        return NodeCheck(
            node=n.name, rank=n.rank, address=n.address, reachable=False, reason="error",
            problems=(why,),
        )  # fmt: skip

    rows = await settle_each(
        inventory.nodes, lambda n: check_node(inventory, n, make(n)), failed, options.fanout
    )
    return CheckReport(
        inventory=str(inventory.path), connection=inventory.connection.value, nodes=tuple(rows)
    )
