"""The one real test (thin): a temporary listener on the head's fabric address and rendezvous
port, a connect from every node over the fabric."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from orchestrator.errors import ClusterError
from orchestrator.models.inventory import Inventory, Node
from orchestrator.preflight.model import Reachability
from orchestrator.probes.tcp import (
    ConnectResult,
    ListenerReport,
    connect_probe,
    listener_argv,
    parse_listener,
)
from orchestrator.rendezvous import RendezvousPlan
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


async def probe_reachability(
    inventory: Inventory,
    transports: Mapping[str, Transport],
    plan: RendezvousPlan,
    *,
    timeout_s: float = 3.0,
) -> Reachability | None:
    """Listen on the head's fabric address and rendezvous port; connect from every node with a
    fabric address, bound to that address; stop the listener. None when the head has no
    fabric address (the fabric checks say why)."""
    if plan.head_addr is None:
        return None
    started = time.monotonic()
    head = inventory.head
    head_addr = plan.head_addr
    sources = {r.node: r.address for r in plan.ranks if r.address is not None}
    argv = listener_argv(head_addr, plan.head_port, len(sources), timeout_s * 2 + 10)
    listener = _Listener(lines=[], ready=asyncio.Event())
    task = asyncio.create_task(listener.follow(transports[head.name].stream(argv)))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(listener.ready.wait(), 15)
    results: dict[str, ConnectResult] = {}
    errors: dict[str, str] = {}
    first = listener.report()
    if first.listening or first.bind_error:

        async def connect(node: Node) -> None:
            probe = connect_probe(sources[node.name], head_addr, plan.head_port, timeout_s)
            try:
                result = await transports[node.name].run(probe.argv, timeout_s=timeout_s + 15)
                results[node.name] = probe.read(result)
            except ClusterError as exc:
                errors[node.name] = exc.line()

        await asyncio.gather(*(connect(n) for n in inventory.nodes if n.name in sources))
        if first.pid is not None and not task.done():
            # Every connect has answered: stop the listener now rather than at its time limit
            # (closing the SSH channel would not), so the port is free again at once.
            listener.stopped = True
            with contextlib.suppress(ClusterError):
                await transports[head.name].run(["kill", str(first.pid)], timeout_s=10)
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
