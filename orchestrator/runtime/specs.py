"""Rank specs from a launch plan: what a runtime needs to start, follow and stop each rank."""

from __future__ import annotations

from orchestrator.launch import LaunchPlan
from orchestrator.models.inventory import Inventory
from orchestrator.runtime.base import NodeSample, RankSpec


def rank_specs(plan: LaunchPlan, inventory: Inventory) -> list[RankSpec]:
    return [
        RankSpec(
            rank=r.rank,
            node=inventory.node(r.node),
            name=r.container,
            argv=r.engine_argv,
            env=r.env,
            docker_run=r.docker_argv,
            labels=r.labels,
        )
        for r in sorted(plan.ranks, key=lambda r: r.rank)
    ]


def sample_fields(s: NodeSample) -> dict[str, int | None]:
    """A node sample as the supervisor's `Sample` event fields."""
    return {
        "mem_free": s.mem_free,
        "mem_available": s.mem_available,
        "cached": s.cached,
        "dirty": s.dirty,
        "rchar": s.rchar,
        "read_bytes": s.read_bytes,
    }
