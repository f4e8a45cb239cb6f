"""The one real test (thin): a temporary listener on the head's fabric address and rendezvous
port, a connect from every node over the fabric.

Whatever else preflight asks of every node at that moment (its `riders`: the SSH to its chain
neighbour) goes out at once, one command per node beside the listener's start-up, since it needs
no listener; the connects follow, one command per node, all nodes at once, as soon as the
listener is up (issue 31)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.deadlines import DEADLINES
from orchestrator.errors import ClusterError
from orchestrator.facts import PROBE_TIMEOUT_S, ask_batch
from orchestrator.models.inventory import Inventory
from orchestrator.plan.rendezvous import RendezvousPlan
from orchestrator.preflight.model import Reachability
from orchestrator.probes.base import Probe
from orchestrator.probes.tcp import (
    NAME_CONNECT,
    ConnectResult,
    ListenerReport,
    connect_probe,
    listener_argv,
    parse_listener,
)
from orchestrator.transport import OutputLine, Transport


@dataclass
class _Listener:
    """The head's test listener as it runs: its lines so far, and how its stream ended."""

    lines: list[str]
    ready: asyncio.Event
    error: ClusterError | None = None
    stopped: bool = False  # we killed it on purpose: its exit status is not an error

    async def follow(self, stream: AsyncIterator[OutputLine]) -> None:
        try:
            async for line in stream:
                self.lines.append(line.text)
                if line.text.startswith(("listening", "bind-failed")):
                    self.ready.set()
        except ClusterError as exc:
            if not self.stopped:
                self.error = exc
        finally:
            self.ready.set()

    def report(self) -> ListenerReport:
        try:
            return parse_listener("\n".join(self.lines))
        except ClusterError as exc:
            self.error = self.error or exc
            return ListenerReport(listening=False)


@dataclass
class LinkTest:
    """What the per-node sessions found: the rendezvous test (None when it could not run: the
    head is down or has no fabric address; the fabric checks say why) and the riders' answers,
    by node and probe name."""

    reachability: Reachability | None
    riders: dict[str, dict[str, Any]] = field(default_factory=dict)
    rider_errors: dict[str, dict[str, str]] = field(default_factory=dict)


async def probe_reachability(
    inventory: Inventory,
    transports: Mapping[str, Transport],
    plan: RendezvousPlan,
    *,
    timeout_s: float = 3.0,
) -> Reachability | None:
    """`link_sessions` with nothing riding along: the rendezvous test alone."""
    return (await link_sessions(inventory, transports, plan, {}, timeout_s=timeout_s)).reachability


async def link_sessions(
    inventory: Inventory,
    transports: Mapping[str, Transport],
    plan: RendezvousPlan | None,
    riders: Mapping[str, Mapping[str, Probe[Any]]],
    *,
    timeout_s: float = 3.0,
    head_up: bool = True,
) -> LinkTest:
    """Each node's `riders` in one command, started at once; meanwhile listen on the head's
    fabric address and rendezvous port, then connect from every node with a fabric address,
    bound to that address, one command each; stop the listener. Without a listener (`plan`
    None, the head down or without a fabric address) the riders still run."""
    out = LinkTest(reachability=None)
    # The riders need no listener: their SSH handshakes and the neighbours' shells overlap the
    # listener's start-up instead of following it (~0.3 s off preflight when peers are asked).
    early = asyncio.ensure_future(
        asyncio.gather(*(_session(out, transports, n, dict(p)) for n, p in riders.items()))
    )
    try:
        if plan is not None and plan.head_addr is not None and head_up:
            out.reachability = await _rendezvous_test(
                out, inventory, transports, plan, plan.head_addr, timeout_s
            )
    finally:
        await early
    return out


async def _rendezvous_test(
    out: LinkTest,
    inventory: Inventory,
    transports: Mapping[str, Transport],
    plan: RendezvousPlan,
    head_addr: str,
    timeout_s: float,
) -> Reachability:
    started = time.monotonic()
    head = inventory.head
    sources = {r.node: r.address for r in plan.ranks if r.address is not None}
    argv = listener_argv(head_addr, plan.head_port, len(sources), timeout_s * 2 + 10)
    listener = _Listener(lines=[], ready=asyncio.Event())
    task = asyncio.create_task(listener.follow(transports[head.name].stream(argv)))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(listener.ready.wait(), 15)
    results: dict[str, ConnectResult] = {}
    errors: dict[str, str] = {}
    first = listener.report()
    connecting = first.listening or first.bind_error
    connects: dict[str, dict[str, Probe[Any]]] = {}
    if connecting:
        for name, source in sources.items():
            probe = connect_probe(source, head_addr, plan.head_port, timeout_s)
            connects[name] = {probe.name: probe}
    await asyncio.gather(
        *(_session(out, transports, n, p, connect_s=timeout_s + 15) for n, p in connects.items())
    )
    for name in sources if connecting else ():
        if (value := out.riders.get(name, {}).pop(NAME_CONNECT, None)) is not None:
            results[name] = value
        elif (error := out.rider_errors.get(name, {}).pop(NAME_CONNECT, None)) is not None:
            errors[name] = error
    if connecting and len(results) == len(sources) and all(r.ok for r in results.values()):
        # Every node got in: the listener ends by itself once it has seen them all. Waiting for
        # its stream's end costs less than a `kill` (one more shell start-up on the head).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), 3)
    if connecting and first.pid is not None and not task.done():
        # Every connect has answered: stop the listener now rather than at its time limit
        # (closing the SSH channel would not), so the port is free again at once.
        listener.stopped = True
        with contextlib.suppress(ClusterError):
            await transports[head.name].run(
                ["kill", str(first.pid)], timeout_s=DEADLINES.short_command_s
            )
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(task), 3)
    if not task.done():
        listener.stopped = True
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return Reachability(
        head=head.name,
        address=head_addr,
        port=plan.head_port,
        listener=listener.report(),
        listener_error=listener.error.line() if listener.error else None,
        results=results,
        sources=sources,
        errors=errors,
        elapsed_s=round(time.monotonic() - started, 3),
    )


async def _session(
    out: LinkTest,
    transports: Mapping[str, Transport],
    node: str,
    probes: dict[str, Probe[Any]],
    *,
    connect_s: float = 0.0,
) -> None:
    """One command on `node` for all of `probes` (probes/batch.py; a lone probe runs as it
    is); answers and errors into `out`, by probe name."""
    if not probes:
        return
    alone = probes.keys() == {NAME_CONNECT}  # the connect's own deadline, as it always had
    timeout_s = connect_s if alone else max(PROBE_TIMEOUT_S, connect_s)
    values, errors = await ask_batch(transports[node], probes, timeout_s)
    out.riders.setdefault(node, {}).update(values)
    out.rider_errors.setdefault(node, {}).update(errors)
