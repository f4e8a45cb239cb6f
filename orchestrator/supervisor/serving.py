"""The serving watch's judgement: pure functions and a small state, no I/O, no clock.

After READY the supervisor carries on (supervise.py `Supervisor.watch_serving`); every second it
asks `judge_serving` what the state says. Incidents are verdicts of their own (the boot's verdict
stays READY):

- RANK_DIED: a rank's process ended while the group served (exit code or OOMKilled, last lines);
- NODE_LOST: a node silent for `lost_grace_s` (the boot's rule, watchers.watch_loss);
- WEDGED: the group is alive but no token comes out. Two signals, each named when it fires:
  `metrics` (the engine's own /metrics: requests running or waiting, and its generated-tokens
  counter flat for `wedge_s`) and `canary` (the canary request failing for `wedge_s` while
  /health still answers 200; sparkrun#252: "containers show 'Up', status shows green");
- MEMORY_LOW: a node's MemAvailable under the floor. Before that, a steady fall over the leak
  window is a warning with its rate and the time left to the floor. Nothing here ever empties the
  page cache (seed 002: emptying it wiped the warm NFS cache, 40 min -> 3.5 h).

The engines' metric names come from their sources:
- SGLang `python/sglang/srt/metrics/collector.py`: `sglang:num_running_reqs`,
  `sglang:num_queue_reqs` (gauges), `sglang:generation_tokens_total` (counter)
  https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/metrics/collector.py
- vLLM `vllm/v1/metrics/loggers.py`: `vllm:num_requests_running`, `vllm:num_requests_waiting`
  (gauges), `vllm:generation_tokens_total` (counter)
  https://github.com/vllm-project/vllm/blob/main/vllm/v1/metrics/loggers.py
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.models.run import Finding, Outcome, RankPhase
from orchestrator.supervisor.state import BootState
from orchestrator.supervisor.watchers import WatchConfig, watch_loss, watch_slow_nodes

GiB = 2**30
MB = 10**6
HOUR_S = 3600.0

# name -> (running, waiting, generated tokens) per engine: see the module docstring's sources.
ENGINE_METRICS: dict[str, tuple[str, str, str]] = {
    "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:generation_tokens"),
    "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:generation_tokens"),
}


@dataclass(frozen=True)
class ServeWatchConfig:
    """The serving watch's periods and deadlines (the recipe's timeouts.wedge; the rest fixed)."""

    wedge_s: float = 120.0  # timeouts.wedge
    # Each node's memory and its rank's container state, asked this often while serving (the
    # boot asks every 2 s for load progress; after READY a death is still named within
    # sample_every_s + the drain, a cut node within it + the 4 s ask + lost_grace_s < 15 s).
    sample_every_s: float = 5.0
    publish_every_s: float = 5.0  # status.json and metrics.prom while nothing happens
    canary_every_s: float = 15.0
    canary_timeout_s: float = 20.0
    canary_max_tokens: int = 2
    canary_slow_s: float = 10.0  # a canary slower than this is warned about (slow, not wedged)
    leak_window_s: float = 600.0
    leak_min_rate: float = 1 * MB  # bytes/s of MemAvailable lost steadily over the window
    leak_min_r2: float = 0.8  # how straight the fall must be (a least-squares fit's R²)
    mem_floor: int = 4 * GiB  # MemAvailable under this is MEMORY_LOW
    log_bound: int = 256 * 2**20  # per rank and stream: head + newest tail beyond this
    drain_s: float = 3.0


@dataclass(frozen=True)
class EngineReading:
    ts: float
    running: float
    waiting: float
    generated: float  # the engine's generated-tokens counter


def parse_engine_metrics(text: str, engine: str, ts: float) -> EngineReading | None:
    """The engine's running/waiting/generated figures from its /metrics text (every series of a
    name summed: SGLang labels them per dp rank), or None when a name is missing."""
    from prometheus_client.parser import text_string_to_metric_families

    running_name, waiting_name, generated_name = ENGINE_METRICS.get(
        engine, ENGINE_METRICS["sglang"]
    )
    totals: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                # A counter's samples end in `_total` (the parser may file them apart from
                # their TYPE line's family, as it does for these colon names).
                name = s.name.removesuffix("_total")
                if name in (running_name, waiting_name, generated_name):
                    totals[name] = totals.get(name, 0.0) + float(s.value)
    except ValueError:
        return None
    if not {running_name, waiting_name, generated_name} <= totals.keys():
        return None
    return EngineReading(ts, totals[running_name], totals[waiting_name], totals[generated_name])


@dataclass(frozen=True)
class CanaryResult:
    ts: float  # when it was sent
    latency_s: float | None  # None: no answer (timeout or error)
    health_ok: bool  # /health answered 2xx at the same time
    error: str = ""


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def leak_fit(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares slope (bytes/s) and R² of (ts, bytes); None under 3 points or no spread."""
    n = len(points)
    if n < 3:
        return None
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    sxx = sum((t - mx) ** 2 for t, _ in points)
    syy = sum((v - my) ** 2 for _, v in points)
    if sxx <= 0:
        return None
    sxy = sum((t - mx) * (v - my) for t, v in points)
    slope = sxy / sxx
    r2 = (sxy * sxy) / (sxx * syy) if syy > 0 else 0.0
    return slope, r2


@dataclass
class ServingState:
    """What the serving watch has seen since READY. Fed by the supervisor's loops; judged by
    `judge_serving`. Bounded: an hour of canaries, a leak window of memory per node."""

    ready_at: float
    attempt: int = 0
    canaries: deque[CanaryResult] = field(default_factory=deque)
    canary_failing_since: float | None = None
    canary_error: str = ""
    health_failing_since: float | None = None
    engine: EngineReading | None = None
    engine_prev: EngineReading | None = None
    tokens_moved_at: float | None = None  # last reading with tokens rising, or no work at all
    memory: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)
    incidents: list[Finding] = field(default_factory=list)
    restarts: list[float] = field(default_factory=list)
    waiting: str = ""  # why a restart waits (backoff, memory), while it does

    def note_canary(self, c: CanaryResult) -> None:
        self.canaries.append(c)
        while self.canaries and c.ts - self.canaries[0].ts > HOUR_S:
            self.canaries.popleft()
        if c.latency_s is not None:
            self.canary_failing_since, self.canary_error = None, ""
        elif self.canary_failing_since is None:
            self.canary_failing_since, self.canary_error = c.ts, c.error
        if c.health_ok:
            self.health_failing_since = None
        elif self.health_failing_since is None:
            self.health_failing_since = c.ts

    def note_engine(self, r: EngineReading) -> None:
        prev = self.engine
        self.engine_prev, self.engine = prev, r
        idle = r.running + r.waiting <= 0
        if (
            idle
            or self.tokens_moved_at is None
            or (prev is not None and r.generated > prev.generated)
        ):
            self.tokens_moved_at = r.ts

    def begin_attempt(self, ready_at: float) -> None:
        """A restarted group is READY: what the last attempt's head and nodes showed is no
        evidence about this one. Without this, the old attempt's failing /health (its rank had
        died) reads as a wedge of the new one at the first tick, before its head is asked, and
        a restart budget would be spent on a group that serves."""
        self.ready_at = ready_at
        self.canary_failing_since, self.canary_error = None, ""
        self.health_failing_since = None
        self.engine = self.engine_prev = None
        self.tokens_moved_at = None
        self.memory.clear()  # the reload freed and refilled memory: no trend spans it

    def note_memory(self, node: str, ts: float, available: int | None, window_s: float) -> None:
        if available is None:
            return
        series = self.memory.setdefault(node, deque())
        if series and series[-1][0] >= ts:
            return
        series.append((ts, float(available)))
        while series and ts - series[0][0] > window_s:
            series.popleft()

    @property
    def tokens_per_s(self) -> float | None:
        a, b = self.engine_prev, self.engine
        if a is None or b is None or b.ts <= a.ts:
            return None
        return max(b.generated - a.generated, 0.0) / (b.ts - a.ts)

    def canary_stats(self) -> tuple[float | None, float | None, float | None]:
        """(last, p50, p99) canary latency over the hour kept, seconds."""
        ok = [c.latency_s for c in self.canaries if c.latency_s is not None]
        last = self.canaries[-1].latency_s if self.canaries else None
        return last, percentile(ok, 0.5), percentile(ok, 0.99)


def _incident(
    watcher: str, rank: int | None, outcome: Outcome, message: str, advice: str
) -> Finding:
    return Finding.verdict(watcher, outcome, message, rank=rank, advice=advice)


def watch_died(s: BootState) -> list[Finding]:
    """The first rank to have exited (by when its process ended) after READY."""
    exited = sorted(
        (r for r in s.ranks if r.phase is RankPhase.exited), key=lambda r: r.exited_at or 0.0
    )
    if not exited:
        return []
    r = exited[0]
    why = "OOMKilled" if r.oom_killed else f"exit code {r.exit_code}"
    return [
        _incident(
            "died",
            r.rank,
            Outcome.RANK_DIED,
            f"rank {r.rank} ({r.node}) died while serving ({why}): {r.last_line[:200]}",
            "the whole TP group stops serving with it; see its log in the run directory and "
            "`cluster postmortem`; `restart:` in the recipe brings the group back (bounded)",
        )
    ]


def watch_wedge(sv: ServingState, now: float, cfg: ServeWatchConfig) -> list[Finding]:
    """WEDGED by the engine's metrics or by the canary; the finding names its signal."""
    e = sv.engine
    if (
        e is not None
        and e.running + e.waiting > 0
        and sv.tokens_moved_at is not None
        and now - sv.tokens_moved_at >= cfg.wedge_s
    ):
        return [
            _incident(
                "wedge:metrics",
                0,
                Outcome.WEDGED,
                f"the engine reports {e.running:.0f} running and {e.waiting:.0f} waiting "
                f"requests, and its generated-tokens counter has stayed at {e.generated:.0f} "
                f"for {now - sv.tokens_moved_at:.0f} s (timeouts.wedge {cfg.wedge_s:.0f} s)",
                "the processes are alive but no token comes out: look at the head's last lines "
                "(a stuck collective, a hung kernel); `cluster stop` and boot again",
            )
        ]
    since = sv.canary_failing_since
    last = sv.canaries[-1] if sv.canaries else None
    if since is not None and last is not None and last.health_ok and now - since >= cfg.wedge_s:
        return [
            _incident(
                "wedge:canary",
                0,
                Outcome.WEDGED,
                f"the canary request ({cfg.canary_max_tokens} tokens) has failed for "
                f"{now - since:.0f} s ({sv.canary_error or 'no answer'}) while /health still "
                f"answers 200 (timeouts.wedge {cfg.wedge_s:.0f} s)",
                "the server accepts connections but does not generate: see the head's last "
                "lines; `cluster stop` and boot again",
            )
        ]
    hs = sv.health_failing_since
    if hs is not None and since is not None and now - max(hs, since) >= cfg.wedge_s:
        return [
            _incident(
                "wedge:health",
                0,
                Outcome.WEDGED,
                f"neither /health nor the canary has answered for {now - max(hs, since):.0f} s "
                "while every rank's process runs",
                "the head's HTTP server is stuck: see its last lines",
            )
        ]
    return []


def watch_memory(
    s: BootState, sv: ServingState, now: float, cfg: ServeWatchConfig
) -> list[Finding]:
    """MEMORY_LOW under the floor; before that, a steady fall is a leak warning."""
    out: list[Finding] = []
    for r in s.ranks:
        avail = r.memory.mem_available
        if avail is not None and avail < cfg.mem_floor:
            return [
                _incident(
                    "memory",
                    r.rank,
                    Outcome.MEMORY_LOW,
                    f"node {r.node} (rank {r.rank}): MemAvailable {avail / GiB:.1f} GiB is under "
                    f"the {cfg.mem_floor / GiB:.1f} GiB floor (MemFree "
                    f"{(r.memory.mem_free or 0) / GiB:.1f} GiB, Cached "
                    f"{(r.memory.cached or 0) / GiB:.1f} GiB)",
                    "find what grows on that node (the engine's RSS, a leak in a restart loop); "
                    "do NOT drop caches; stop the run before sshd and the kernel fail",
                )
            ]
        points = list(sv.memory.get(r.node, ()))
        if len(points) < 5 or points[-1][0] - points[0][0] < cfg.leak_window_s / 2:
            continue
        fit = leak_fit(points)
        if fit is None:
            continue
        slope, r2 = fit
        if slope > -cfg.leak_min_rate or r2 < cfg.leak_min_r2:
            continue
        current = points[-1][1]
        left_s = max(current - cfg.mem_floor, 0.0) / -slope
        out.append(
            Finding(
                watcher="leak",
                severity="warning",
                rank=r.rank,
                message=f"node {r.node}: MemAvailable falling {-slope / MB:.1f} MB/s over the "
                f"last {points[-1][0] - points[0][0]:.0f} s (now {current / GiB:.1f} GiB); the "
                f"{cfg.mem_floor / GiB:.1f} GiB floor in ~{left_s:.0f} s",
                advice="a leak: find the growing process on that node before the floor; do NOT "
                "drop caches",
            )
        )
    return out


def watch_canary_slow(sv: ServingState, cfg: ServeWatchConfig) -> list[Finding]:
    last, p50, p99 = sv.canary_stats()
    if last is None or last < cfg.canary_slow_s:
        return []
    return [
        Finding(
            watcher="slow-canary",
            severity="warning",
            rank=0,
            message=f"the canary took {last:.1f} s (p50 {p50 or 0:.1f} s, p99 {p99 or 0:.1f} s "
            f"over the last hour; slow above {cfg.canary_slow_s:.0f} s)",
            advice="the group is loaded or degraded: see running/waiting requests and tokens/s",
        )
    ]


def judge_serving(
    s: BootState, sv: ServingState, now: float, wcfg: WatchConfig, cfg: ServeWatchConfig
) -> list[Finding]:
    """Every serving watcher; incidents first, in priority order: loss, death, memory, wedge."""
    loss = [
        f.model_copy(update={"watcher": "loss"}) for f in watch_loss(s, now, wcfg)
    ]  # NODE_LOST, as during the boot
    findings = [
        *loss,
        *watch_died(s),
        *watch_memory(s, sv, now, cfg),
        *watch_wedge(sv, now, cfg),
        *watch_canary_slow(sv, cfg),
        *watch_slow_nodes(s, now, wcfg),
    ]
    return sorted(findings, key=lambda f: f.severity != "verdict")


def lowest_available(s: BootState) -> Mapping[str, int | None]:
    """Each node's last MemAvailable (None: never sampled)."""
    return {r.node: r.memory.mem_available for r in s.ranks}
