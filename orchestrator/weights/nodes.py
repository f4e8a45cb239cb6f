"""Asking the nodes (thin): run the node program's `probe` (or `warm`) on every node at once and
read its one JSON line into a `Holding`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from orchestrator.errors import ClusterError
from orchestrator.fanout import settle_each
from orchestrator.images.nodes import run_bounded
from orchestrator.models.inventory import Inventory, Node
from orchestrator.transport import Transport
from orchestrator.weights.manifest import manifest_of
from orchestrator.weights.model import Holding
from orchestrator.weights.program import program_argv


def holding_of(node: Node, doc: dict[str, Any]) -> Holding:
    manifest = manifest_of(doc.get("manifest"))
    return Holding(
        node=node.name,
        rank=node.rank,
        reachable=True,
        error=doc.get("state_error"),
        dest=str(doc.get("dest", "")),
        exists=bool(doc.get("exists")),
        free_bytes=doc.get("free_bytes"),
        free_path=doc.get("free_path"),
        manifest_id=manifest.id() if manifest is not None else None,
        model=manifest.model if manifest is not None else None,
        complete=bool(doc.get("complete")),
        files={str(k): str(v) for k, v in (doc.get("files") or {}).items()},
        held={str(k): str(v) for k, v in (doc.get("held") or {}).items()},
        extra=tuple(doc.get("extra") or ()),
        total_bytes=manifest.total_bytes if manifest is not None else None,
        cached_bytes=doc.get("cached_bytes"),
        mem={str(k): int(v) for k, v in (doc.get("mem") or {}).items()},
    )


async def probe_one(
    node: Node, transport: Transport, spec: dict[str, Any], timeout_s: float
) -> Holding:
    base = {"node": node.name, "rank": node.rank}
    try:
        r = await run_bounded(transport, program_argv("probe", spec), timeout_s)
    except ClusterError as exc:
        return Holding(**base, reachable=False, error=exc.line())
    if r.exit_status == 127:
        return Holding(
            **base, reachable=False, error="python3 is not there (the node program needs it)"
        )
    try:
        doc = json.loads(r.stdout.strip().splitlines()[-1])
        assert isinstance(doc, dict)
    except (ValueError, IndexError, AssertionError):
        last = (r.stderr.strip().splitlines() or [f"exit {r.exit_status}"])[-1]
        return Holding(**base, reachable=False, error=f"the node program failed: {last}")
    return holding_of(node, doc)


VERIFY_PROBE_S = 600.0
"""A verifying probe re-hashes every file of the copy: a 100+ GB model at the disk's pace."""


def probe_timeout_s(*, verify: bool, connect_timeout_s: float) -> float:
    """How long a node has to answer the node program's probe, once connected. A plain probe
    reads state.json and stats the files (well under a second on a Spark); it gets three connect
    timeouts, at least 10 s, so a node cut off mid-push is named in seconds, not half a minute."""
    return VERIFY_PROBE_S if verify else max(10.0, connect_timeout_s * 3)


async def probe_nodes(
    inventory: Inventory,
    transports: dict[str, Transport],
    spec: dict[str, Any],
    *,
    names: Sequence[str] | None = None,
    timeout_s: float,
) -> list[Holding]:
    """Every node's holding (rank order); a node that cannot be asked says why. `timeout_s`:
    see `probe_timeout_s`."""
    chosen = [n for n in inventory.nodes if names is None or n.name in names]
    return await settle_each(
        chosen,
        lambda n: probe_one(n, transports[n.name], spec, timeout_s),
        lambda n, error: Holding(node=n.name, rank=n.rank, reachable=False, error=error),
    )
