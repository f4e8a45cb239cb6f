"""What every node holds (`cluster weights status`), how much of it the page cache holds, and
`--warm`: read it once on the nodes where memory allows, never dropping any cache."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchestrator.deadlines import DEADLINES
from orchestrator.errors import ClusterError
from orchestrator.images.nodes import run_bounded
from orchestrator.models.inventory import Inventory, Node
from orchestrator.transport import ConnectOptions, Transport
from orchestrator.transport.pool import node_transports
from orchestrator.weights.model import GIB, Holding
from orchestrator.weights.nodes import probe_nodes, probe_timeout_s
from orchestrator.weights.program import program_argv


async def weights_status(
    inventory: Inventory,
    dest: str,
    *,
    cache: bool = True,
    verify: bool = False,
    connect_timeout_s: float = DEADLINES.connect_s,
    factory: Callable[[Node], Transport] | None = None,
) -> list[Holding]:
    """Every node's holding at `dest` (rank order). `verify` re-hashes every file there."""
    copts = ConnectOptions(connect_timeout_s=connect_timeout_s)
    async with node_transports(inventory, copts, factory) as transports:
        return await probe_nodes(
            inventory,
            transports,
            {"dest": dest, "cache": cache, "verify": verify},
            timeout_s=probe_timeout_s(verify=verify, connect_timeout_s=connect_timeout_s),
        )


@dataclass(frozen=True)
class WarmDecision:
    """Whether reading the rest of the copy into the page cache leaves the engine its memory."""

    node: str
    warm: bool
    reason: str
    uncached: int = 0


def decide_warm(h: Holding, claim: int) -> WarmDecision:
    """Warm only when memory − the bytes not cached yet ≥ the engine's claim. The memory is
    MemAvailable, or MemFree when lower: on a GB10 the GPU's free memory is MemFree and page
    cache counts as taken (seed 002: GPU-free fell to 1.6 GiB with MemAvailable at 31 GB), so
    the pages warmed here are pages the engine cannot claim."""
    if not h.reachable:
        return WarmDecision(h.node, False, f"cannot ask it: {h.error}")
    if not h.complete or h.total_bytes is None:
        return WarmDecision(h.node, False, f"its copy is {h.state}: push it first")
    avail, free = h.mem.get("MemAvailable"), h.mem.get("MemFree")
    if avail is None:
        return WarmDecision(h.node, False, "MemAvailable unknown (no /proc/meminfo)")
    name, mem = ("MemFree", free) if free is not None and free < avail else ("MemAvailable", avail)
    uncached = max(0, h.total_bytes - (h.cached_bytes or 0))
    if uncached == 0:
        return WarmDecision(h.node, False, "already in the page cache", 0)
    left = mem - uncached
    sums = (
        f"{name} {_g(mem)} − {_g(uncached)} not yet cached = {_g(left)} "
        f"{'≥' if left >= claim else '<'} the engine's claim {_g(claim)}"
    )
    if left < claim:
        return WarmDecision(h.node, False, f"not warmed: {sums}", uncached)
    return WarmDecision(h.node, True, f"warm: {sums}", uncached)


def engine_claim(
    mem_total: int | None,
    gpu_memory_utilization: float | None,
    expected_bytes_per_rank: int | None,
    headroom: float,
    explicit: int | None,
) -> int | None:
    """What the engine will take: --claim, else the largest of gpu-memory-utilization × total
    memory (vLLM, SGLang's mem-fraction-static) and the recipe's bytes per rank × headroom."""
    if explicit is not None:
        return explicit
    known = []
    if gpu_memory_utilization is not None and mem_total is not None:
        known.append(int(gpu_memory_utilization * mem_total))
    if expected_bytes_per_rank is not None:
        known.append(int(expected_bytes_per_rank * headroom))
    return max(known) if known else None


async def warm_nodes(
    inventory: Inventory,
    dest: str,
    names: Sequence[str],
    *,
    connect_timeout_s: float = DEADLINES.connect_s,
    factory: Callable[[Node], Transport] | None = None,
) -> dict[str, str]:
    """Read the copy once on each named node; node -> what happened."""
    copts = ConnectOptions(connect_timeout_s=connect_timeout_s)
    chosen = [n for n in inventory.nodes if n.name in names]

    async def one(transport: Transport) -> str:
        try:
            r = await run_bounded(transport, program_argv("warm", {"dest": dest}), 3600.0)
        except ClusterError as exc:
            return f"failed: {exc.line()}"
        try:
            n = int(json.loads(r.stdout.strip().splitlines()[-1])["warmed_bytes"])
        except (ValueError, IndexError, KeyError, TypeError):
            return f"failed: exit {r.exit_status}: {r.stderr.strip()[-200:]}"
        return f"read {_g(n)}"

    async with node_transports(inventory, copts, factory) as transports:
        results = await asyncio.gather(*(one(transports[n.name]) for n in chosen))
    return {n.name: r for n, r in zip(chosen, results, strict=True)}


def _g(n: int) -> str:
    return f"{n / GIB:.1f} GiB"
