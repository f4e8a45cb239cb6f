"""The per-rank view of a boot: one model for status.json, `--json`, and the live table.

`cluster boot` and `cluster status --watch` render the same `BootView`, laid out for the
terminal's width by `supervisor/table.py`.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.models.run import Finding, RankPhase, RunPhase
from orchestrator.supervisor.serving import ServingState
from orchestrator.supervisor.state import BootState, RankState
from orchestrator.supervisor.watchers import WatchConfig

GiB = 2**30
MB = 10**6


class RankRow(BaseModel):
    model_config = ConfigDict(frozen=True)

    rank: int
    node: str
    container: str = ""
    container_state: str = ""
    phase: RankPhase
    progress_pct: float | None = None
    bytes_read: int = 0
    expected_bytes: int | None = None
    rate_bps: float | None = None
    eta_s: float | None = None
    # Three of the node's MemoryReading (models/memory.py), kept flat and in this place in the
    # row: status.json's keys and their order (docs/operating.md); no column shows Dirty.
    mem_free: int | None = None
    mem_available: int | None = None
    cached: int | None = None
    barrier_slack_s: float | None = None
    last_line: str = ""
    signal_age_s: float | None = None
    exit_code: int | None = None
    oom_killed: bool = False
    unreachable: str = ""
    # Answering (its sshd opens each session) but its sampling commands run past their
    # deadline: a busy docker daemon or host. Its readings are stale for `slow_for_s`; never
    # set together with `unreachable`.
    slow: str = ""
    slow_for_s: float | None = None
    serving: str | None = None  # after READY: the head's readiness answer and latency


class ServingHealth(BaseModel):
    """After READY, what the serving watch sees (supervisor/serving_watch.py)."""

    model_config = ConfigDict(frozen=True)

    ready_at: float  # when this attempt became READY
    uptime_s: float
    attempt: int = 0  # restarts of the group so far
    canary_last_s: float | None = None  # None: the last canary got no answer
    canary_p50_s: float | None = None  # over the last hour
    canary_p99_s: float | None = None
    canary_failing_s: float | None = None  # how long the canary has failed, while it does
    canary_error: str = ""
    health_ok: bool | None = None
    running: float | None = None  # the engine's own figures (its /metrics)
    waiting: float | None = None
    generated_tokens: float | None = None
    tokens_per_s: float | None = None
    incidents: int = 0
    last_incident: str = ""
    restart_wait: str = ""  # why a restart waits, while it does


class BootView(BaseModel):
    """The document behind status.json and `cluster status --json` (docs/operating.md)."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = 1
    run_id: str
    recipe: str
    source: Literal["supervisor", "live"] = "supervisor"
    updated: float
    phase: RunPhase
    phase_detail: str = ""  # e.g. after READY (`cluster stop` at 07:10:00 UTC)
    outcome: str | None = None
    endpoint: str | None = None
    head_latency_s: float | None = None
    ranks: tuple[RankRow, ...]
    warnings: tuple[Finding, ...] = ()
    verdict: Finding | None = None
    serving: ServingHealth | None = None  # after READY, while the serving watch runs

    @property
    def phase_text(self) -> str:
        """The phase with its detail, for people: "stopped after READY (...)"."""
        return f"{self.phase} {self.phase_detail}".strip()


def barrier_slack(s: BootState, r: RankState, now: float, cfg: WatchConfig) -> float | None:
    """Seconds between the rank's predicted finish and the barrier deadline (>0: in time)."""
    if s.first_load_end_at is None or r.phase.finished_loading:
        return None
    deadline = s.first_load_end_at + cfg.barrier_window_s
    eta = r.eta_s(cfg.expected_bytes_per_rank)
    if eta is None:
        return deadline - now
    return deadline - (now + eta)


def build_view(
    s: BootState,
    now: float,
    cfg: WatchConfig,
    *,
    run_id: str,
    recipe: str,
    phase: RunPhase,
    phase_detail: str = "",
    warnings: tuple[Finding, ...] = (),
    verdict: Finding | None = None,
    endpoint: str | None = None,
    container_states: dict[int, str] | None = None,
) -> BootView:
    exp = cfg.expected_bytes_per_rank
    rows = []
    for r in s.ranks:
        frac = r.load_fraction(exp)
        rows.append(
            RankRow(
                rank=r.rank,
                node=r.node,
                container=r.container,
                container_state=(container_states or {}).get(r.rank, ""),
                phase=r.shown_phase,
                progress_pct=None if frac is None else round(100 * frac, 1),
                bytes_read=r.bytes_read,
                expected_bytes=exp,
                rate_bps=r.read_rate,
                eta_s=r.eta_s(exp),
                mem_free=r.memory.mem_free,
                mem_available=r.memory.mem_available,
                cached=r.memory.cached,
                barrier_slack_s=barrier_slack(s, r, now, cfg),
                last_line=r.last_line[-160:],
                signal_age_s=None if r.last_signal_at is None else now - r.last_signal_at,
                exit_code=r.exit_code,
                oom_killed=r.oom_killed,
                unreachable=r.lost_reason if r.lost_since is not None else "",
                slow=r.slow_reason if r.slow_for is not None else "",
                slow_for_s=None if r.slow_for is None else now - r.slow_for,
                serving=_serving(s, r, phase),
            )
        )
    return BootView(
        run_id=run_id,
        recipe=recipe,
        updated=now,
        phase=phase,
        phase_detail=phase_detail,
        outcome=verdict.outcome.value if verdict and verdict.outcome else None,
        endpoint=endpoint,
        head_latency_s=s.head_latency_s,
        ranks=tuple(rows),
        warnings=warnings,
        verdict=verdict,
    )


def _serving(s: BootState, r: RankState, phase: RunPhase) -> str | None:
    """After READY a row shows serving health instead of load progress."""
    if phase is not RunPhase.ready or r.phase is RankPhase.exited:
        return None
    if r.rank == 0:
        if s.head_latency_s is None:
            return "not answering"
        return f"answers in {s.head_latency_s * 1000:.0f} ms"
    return "in the group"


def duration_text(s: float | None) -> str:
    """42s, 12m05s; - when unknown."""
    if s is None or not math.isfinite(s):
        return "-"
    s = max(s, 0)
    return f"{int(s // 60)}m{int(s % 60):02d}s" if s >= 60 else f"{s:.0f}s"


def serving_health(sv: ServingState, now: float) -> ServingHealth:
    last, p50, p99 = sv.canary_stats()
    e = sv.engine
    latest = sv.incidents[-1] if sv.incidents else None
    return ServingHealth(
        ready_at=sv.ready_at,
        uptime_s=max(now - sv.ready_at, 0.0),
        attempt=sv.attempt,
        canary_last_s=last,
        canary_p50_s=p50,
        canary_p99_s=p99,
        canary_failing_s=None if sv.canary_failing_since is None else now - sv.canary_failing_since,
        canary_error=sv.canary_error,
        health_ok=sv.canaries[-1].health_ok if sv.canaries else None,
        running=e.running if e else None,
        waiting=e.waiting if e else None,
        generated_tokens=e.generated if e else None,
        tokens_per_s=sv.tokens_per_s,
        incidents=len(sv.incidents),
        last_incident=f"{latest.outcome.value if latest.outcome else ''} {latest.message}"[:200]
        if latest
        else "",
        restart_wait=sv.waiting,
    )
