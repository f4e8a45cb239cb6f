"""Exec-readiness and `cluster image probe`: the throwaway-container probe on every node,
retried through the lazy-unpack window, and who holds the image and can exec it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from pydantic import Field

from orchestrator.deadlines import DEADLINES
from orchestrator.errors import ClusterError, ImageError
from orchestrator.fanout import settle_each
from orchestrator.images.model import TransportFactory
from orchestrator.images.nodes import gather_states
from orchestrator.models.base import StrictModel
from orchestrator.models.inventory import Inventory, Node
from orchestrator.probes.exec_ready import DEFAULT_WINDOW_S, ExecReadiness, wait_exec_ready
from orchestrator.probes.image import matches_digest
from orchestrator.transport import ConnectOptions, Transport, transport_for
from orchestrator.transport.pool import close_transports, node_transports


async def probe_exec_ready(
    inventory: Inventory,
    reference: str,
    *,
    names: Sequence[str] | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    command: Sequence[str] = ("/bin/sh", "-c", "true"),
    transports: dict[str, Transport] | None = None,
    connect_timeout_s: float = DEADLINES.connect_s,
    on_result: Callable[[ExecReadiness], None] | None = None,
) -> list[ExecReadiness]:
    """The exec-readiness probe on every node named (default: all), at once; one answer per
    node in inventory order. A node that cannot be asked is not ready, with that error."""
    chosen = [n for n in inventory.nodes if names is None or n.name in set(names)]
    own = transports is None
    copts = ConnectOptions(connect_timeout_s=connect_timeout_s)
    tmap = transports or {n.name: transport_for(inventory, n, copts) for n in chosen}

    async def one(node: Node) -> ExecReadiness:
        started = time.monotonic()
        try:
            result = await wait_exec_ready(
                tmap[node.name],
                reference,
                window_s=window_s,
                command=command,
            )
        except ClusterError as exc:
            result = ExecReadiness(
                node=node.name,
                image=reference,
                ready=False,
                tries=0,
                seconds=round(time.monotonic() - started, 3),
                last_error=exc.line(),
                gave_up="fatal",
            )
        if on_result is not None:
            on_result(result)
        return result

    def unexpected(node: Node, error: str) -> ExecReadiness:
        return ExecReadiness(
            node=node.name,
            image=reference,
            ready=False,
            tries=0,
            seconds=0.0,
            last_error=error,
            gave_up="fatal",
        )

    try:
        return await settle_each(chosen, one, unexpected)
    finally:
        if own:
            await close_transports(tmap)


class ProbeRow(StrictModel):
    node: str
    rank: int
    reachable: bool
    present: bool
    identity: str | None = None
    platform: str | None = None
    store: str | None = None
    driver: str | None = None
    matches: bool | None = Field(default=None, description="the expected digest, when given")
    ready: ExecReadiness | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return (
            self.reachable
            and self.present
            and self.matches is not False
            and self.ready is not None
            and self.ready.ready
        )


class ProbeReport(StrictModel):
    reference: str
    nodes: tuple[ProbeRow, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.nodes)

    def raise_for_failures(self) -> None:
        bad = [r for r in self.nodes if not r.ok]
        if not bad:
            return
        lines = []
        for r in bad:
            if not r.reachable:
                lines.append(f"{r.node}: {r.error}")
            elif not r.present:
                lines.append(f"{r.node}: {self.reference} is not there")
            elif r.matches is False:
                lines.append(f"{r.node}: holds {r.identity}, not the expected digest")
            elif r.ready is not None:
                lines.append(f"{r.node}: {r.ready.summary()}")
        raise ImageError(
            f"{len(bad)} of {len(self.nodes)} nodes cannot run {self.reference}: "
            + ", ".join(r.node for r in bad),
            hint=f"`cluster image push {self.reference}` puts it where it is missing",
            more=tuple(lines),
        )


async def probe_image(
    inventory: Inventory,
    reference: str,
    *,
    expected_digest: str | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    command: Sequence[str] = ("/bin/sh", "-c", "true"),
    connect_timeout_s: float = DEADLINES.connect_s,
    factory: TransportFactory | None = None,
    on_result: Callable[[ExecReadiness], None] | None = None,
) -> ProbeReport:
    """`cluster image probe`: who holds the image (identity, store) and can exec it."""
    started = time.monotonic()
    async with node_transports(
        inventory, ConnectOptions(connect_timeout_s=connect_timeout_s), factory
    ) as transports:
        states = await gather_states(
            inventory, reference, transports, timeout_s=max(10.0, connect_timeout_s * 2)
        )
        holders = [s.node for s in states if s.reachable and s.holds_image]
        ready = await probe_exec_ready(
            inventory,
            reference,
            names=holders,
            window_s=window_s,
            command=command,
            transports=transports,
            on_result=on_result,
        )
    by_node = {r.node: r for r in ready}
    rows = []
    for s in states:
        ident = s.identity
        rows.append(
            ProbeRow(
                node=s.node,
                rank=s.rank,
                reachable=s.reachable,
                present=s.holds_image,
                identity=ident.short() if s.holds_image else None,
                platform=s.image.platform if s.image else None,
                store=s.store.kind.value if s.store else None,
                driver=s.store.driver if s.store else None,
                matches=(
                    matches_digest(ident, expected_digest)
                    if expected_digest and s.holds_image
                    else None
                ),
                ready=by_node.get(s.node),
                error=s.error,
            )
        )
    return ProbeReport(
        reference=reference, nodes=tuple(rows), seconds=round(time.monotonic() - started, 3)
    )
