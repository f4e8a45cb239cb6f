"""Rank specs from a launch plan: what a runtime needs to start, follow and stop each rank; and
what the runtime's answers mean as the reducer's events (one mapping for the supervisor, resume
and the live `status`)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from orchestrator.deadlines import DEADLINES
from orchestrator.dialects.timestamps import timestamp_ns
from orchestrator.models.inventory import Inventory
from orchestrator.models.run import RankExited
from orchestrator.plan.launch import LaunchPlan
from orchestrator.runtime.base import ExitState, NodeSample, RankSpec


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
    return {**s.memory.model_dump(), "rchar": s.rchar, "read_bytes": s.read_bytes}


def exit_event(rank: int, state: ExitState, ts: float) -> RankExited | None:
    """A rank's exit as the reducer's event, ordered by when it happened (the runtime's
    FinishedAt); None while it runs or when its container is gone (nothing to say)."""
    if state.running or state.status == "missing":
        return None
    return RankExited(
        ts=ts,
        rank=rank,
        exit_code=state.exit_code,
        oom_killed=state.oom_killed,
        finished_at=timestamp_ns(state.finished_at) / 1e9 if state.finished_at else None,
    )


def probe_ready(url: str) -> float | None:
    """Seconds the head took to answer its readiness path with 2xx, or None (blocking: run it
    in a thread)."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=DEADLINES.ready_probe_s) as resp:  # noqa: S310 — http to our head
            if 200 <= resp.status < 300:
                return time.monotonic() - started
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return None
