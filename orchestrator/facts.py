"""Everything preflight and the planners need to know about one node, gathered in one pass.

`gather_facts` asks every node at once (`settle`); on each node the probes go out as one batched
command (probes/batch.py), the clock beside it. A probe that fails is recorded under its name in
`NodeFacts.errors` (models/facts.py) and its field stays None: one broken probe never hides the
others, and the judge decides what a missing answer means. Nothing here judges.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from orchestrator.deadlines import DEADLINES
from orchestrator.dockercli import DockerCli
from orchestrator.errors import ClusterError, CommandTimeout
from orchestrator.fanout import settle_each
from orchestrator.models.inventory import Inventory, Node
from orchestrator.probes.base import Probe
from orchestrator.probes.batch import TIMED_OUT, batch_argv, batch_failed, split_batch
from orchestrator.probes.clock import CLOCK, ClockSample
from orchestrator.probes.containers import containers_probe
from orchestrator.probes.disk import df_probe, weights_probe
from orchestrator.probes.gpu import NVIDIA_SMI
from orchestrator.probes.host import HOST
from orchestrator.probes.image import image_inspect_probe
from orchestrator.probes.interfaces import IP_ADDR
from orchestrator.probes.meminfo import MEMINFO
from orchestrator.probes.node_facts import NodeFacts
from orchestrator.probes.peers import peers_probe
from orchestrator.probes.rdma import RDMA
from orchestrator.probes.runtime import DockerInfo, docker_info_probe
from orchestrator.probes.sockets import LISTENING
from orchestrator.transport import Transport
from orchestrator.weights.copy_probe import copy_probe

T = TypeVar("T")

PROBE_TIMEOUT_S = DEADLINES.probe_s  # (the name other modules import)
"""Per probe. `du` over an NFS weights mount and `ssh` to seven peers are the slow ones."""
BATCH_GRACE_S = 5.0
"""On top of the probes' own deadline, for the batch to print what they said."""


@dataclass(frozen=True)
class FactsRequest:
    """What to ask beyond the basics (host, memory, interfaces, RDMA, GPU, docker, sockets)."""

    image: str | None = None
    weights_dir: str | None = None
    peers: bool = False
    clock: bool = True
    docker: bool = True
    timeout_s: float = PROBE_TIMEOUT_S
    extra_paths: tuple[str, ...] = field(default=())
    only: frozenset[str] | None = None
    """Ask only these facts (by NodeFacts field name); None: everything above."""


def peer_target(node: Node) -> str:
    """How another node addresses `node` over SSH: the inventory's user and address."""
    return f"{node.user}@{node.address}"


async def _ask(transport: Transport, probe: Probe[T], timeout_s: float) -> T:
    result = await transport.run(probe.argv, timeout_s=timeout_s)
    return probe.read(result)


async def _clock(transport: Transport, timeout_s: float) -> ClockSample:
    sent = time.time()
    result = await transport.run(CLOCK.argv, timeout_s=timeout_s)
    received = time.time()
    node_time, whole = CLOCK.read(result)
    return ClockSample(node_time=node_time, sent=sent, received=received, whole_seconds=whole)


def node_probes(
    node: Node, request: FactsRequest, peers: Sequence[Node] = ()
) -> dict[str, Probe[Any]]:
    """Every probe `request` wants of `node`, by fact name (all independent of each other)."""
    probes: dict[str, Probe[Any]] = {
        "host": HOST,
        "memory": MEMINFO,
        "interfaces": IP_ADDR,
        "rdma": RDMA,
        "gpu": NVIDIA_SMI,
        "listening": LISTENING,
    }
    if request.docker:
        docker = DockerCli.of(node)
        probes["docker"] = docker_info_probe(docker)
        probes["containers"] = containers_probe(docker)
        if request.image:
            probes["image"] = image_inspect_probe(request.image, docker)
    if request.weights_dir:
        probes["weights"] = weights_probe(request.weights_dir)
        # What `cluster weights` staged there (manifest, complete or not): the copies must agree.
        probes["weights_copy"] = copy_probe(request.weights_dir)
    targets = tuple(peer_target(p) for p in peers if p.name != node.name)
    if request.peers and targets:
        probes["peers"] = peers_probe(targets)
    if request.only is not None:
        probes = {name: p for name, p in probes.items() if name in request.only}
    return probes


async def ask_batch(
    transport: Transport, probes: Mapping[str, Probe[Any]], timeout_s: float
) -> tuple[dict[str, Any], dict[str, str]]:
    """Every probe in one command on the node (probes/batch.py): one shell start-up. Values
    and errors by probe name; one probe's failure is that probe's error only."""
    if not probes:
        return {}, {}
    if len(probes) == 1:  # nothing to share: the probe alone, as it is
        return await _run_all({n: _asker(transport, p, timeout_s) for n, p in probes.items()})
    node = transport.node.name
    batch = batch_argv({name: p.argv for name, p in probes.items()}, timeout_s)
    started = time.monotonic()
    try:
        result = await transport.run(batch.argv, timeout_s=timeout_s + BATCH_GRACE_S)
        stdout, trouble = result.stdout, result.stderr.strip()
        if batch_failed(result.exit_status):
            trouble = f"the probes could not run (mktemp failed: {trouble or 'no reason'})"
    except CommandTimeout as exc:  # what arrived is kept: the probes that answered count
        stdout, trouble = exc.stdout, exc.line()
    except ClusterError as exc:
        return {}, dict.fromkeys(probes, exc.line())
    answers = split_batch(batch, node, stdout, time.monotonic() - started)
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, probe in probes.items():
        answer = answers.get(name)
        if answer is None:
            errors[name] = f"no answer from {node}: {trouble or 'the probes were cut short'}"
        elif answer.exit_status == TIMED_OUT:
            errors[name] = CommandTimeout(
                node=node, argv=list(probe.argv), timeout_s=timeout_s
            ).line()
        else:
            try:
                values[name] = probe.read(answer)
            except ClusterError as exc:
                errors[name] = exc.line()
    return values, errors


def _asker(
    transport: Transport, probe: Probe[Any], timeout_s: float
) -> Callable[[], Awaitable[Any]]:
    return lambda: _ask(transport, probe, timeout_s)


async def gather_node_facts(
    node: Node, transport: Transport, request: FactsRequest, peers: Sequence[Node] = ()
) -> NodeFacts:
    """Ask one node everything `request` wants: the probes in one batch, the clock beside it
    (its own command: its sent/received window must be the clock's alone), then free disk
    where the daemon keeps images. Connection failures make it unreachable."""
    base: dict[str, Any] = {"node": node.name, "rank": node.rank, "address": node.address}
    try:
        await transport.connect()
    except ClusterError as exc:
        return NodeFacts(**base, reachable=False, errors={"connect": exc.line()})
    timeout = request.timeout_s
    clock: dict[str, Callable[[], Awaitable[Any]]] = {}
    if request.clock and (request.only is None or "clock" in request.only):
        clock["clock"] = lambda: _clock(transport, timeout)
    (values, errors), (clock_values, clock_errors) = await asyncio.gather(
        ask_batch(transport, node_probes(node, request, peers), timeout), _run_all(clock)
    )
    values.update(clock_values)
    errors.update(clock_errors)
    # Second pass: free disk where images land (the daemon's data root) and where weights live.
    paths = [p for p in (_root_dir(values.get("docker")), request.weights_dir) if p]
    paths += [p for p in request.extra_paths if p not in paths]
    if paths and (request.only is None or "disks" in request.only):
        more, more_errors = await _run_all(
            {"disks": lambda: _ask(transport, df_probe(tuple(paths)), timeout)}
        )
        values.update(more)
        errors.update(more_errors)
    return NodeFacts(**base, reachable=True, errors=errors, **values)


def _root_dir(docker: object) -> str | None:
    return docker.root_dir if isinstance(docker, DockerInfo) and docker.reachable else None


async def _run_all(
    jobs: Mapping[str, Callable[[], Awaitable[Any]]],
) -> tuple[dict[str, Any], dict[str, str]]:
    names = list(jobs)
    outcomes = await asyncio.gather(*(jobs[n]() for n in names), return_exceptions=True)
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, outcome in zip(names, outcomes, strict=True):
        if isinstance(outcome, ClusterError):
            errors[name] = outcome.line()
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            values[name] = outcome
    return values, errors


async def gather_facts(
    inventory: Inventory,
    transports: Mapping[str, Transport],
    request: FactsRequest,
    on_node: Callable[[NodeFacts], None] | None = None,
) -> tuple[NodeFacts, ...]:
    """Facts of every node, in rank order; an unexpected error is that node's facts, not ours.
    `on_node` hears each node's facts as they arrive (a terminal shows who answered)."""

    async def one(n: Node) -> NodeFacts:
        facts = await gather_node_facts(n, transports[n.name], request, inventory.nodes)
        if on_node is not None:
            on_node(facts)
        return facts

    def failed(n: Node, why: str) -> NodeFacts:
        return NodeFacts(
            node=n.name, rank=n.rank, address=n.address, reachable=False, errors={"gather": why}
        )

    return tuple(await settle_each(inventory.nodes, one, failed))
