"""metrics.prom: the run in Prometheus text format, for node_exporter's textfile collector.

While a supervisor holds a run it rewrites `<run>/metrics.prom` every tick (atomically: a
temporary file renamed, so the collector never reads half a file); `cluster bench` rewrites it
once with its results; `cluster status --format prometheus` prints the same text from any
terminal. The text is made by `prometheus_client` (its metric families and exposition), so
names, escaping and types are the library's, not ours.

Every series carries `run`; per-rank series also `rank` and `node`. Names follow Prometheus
conventions: base units (bytes, seconds), `_total` on the one counter, an enum as one series
per value (1 for the current one, 0 for the rest), so `cluster_rank_phase{phase="loading"} == 1`
selects the ranks that load now.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from orchestrator.logging import get_logger
from orchestrator.models.events import RECORD, Record, Smoke, Step, Stopped, VerdictRecord
from orchestrator.models.run import Outcome, RankPhase
from orchestrator.runstore import Run, atomic_write_text
from orchestrator.supervisor.view import BootView

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from orchestrator.models.bench import BenchReport

log = get_logger(__name__)
METRICS_FILE = "metrics.prom"
# Boot steps (events.jsonl `step` records) that begin a phase of the run; the others ("twin",
# "started", "wait-head-port") are moments inside one.
PHASE_STEPS = {
    "run": "setup",
    "preflight": "preflight",
    "image": "image",
    "start": "start",
    "supervise": "supervise",
    "resume": "supervise",
    "smoke": "smoke",
}


def _ts(value: Any) -> float | None:
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return datetime.fromisoformat(value).timestamp()
    return None


def phase_seconds(events: Iterable[Record], now: float) -> dict[str, float]:
    """Seconds spent in each phase of the run, from its step records: a phase lasts from its
    step to the next one's; the supervision to the verdict, the smoke request to its record;
    a phase not ended yet, to `now`. Pure."""
    marks: list[tuple[str, float]] = []
    ended: dict[str, float] = {}
    for ev in events:
        if isinstance(ev, Step) and ev.step in PHASE_STEPS:
            marks.append((PHASE_STEPS[ev.step], ev.ts))
        elif isinstance(ev, VerdictRecord) and ev.decided_at is not None:
            ended["supervise"] = ev.decided_at
        elif isinstance(ev, Smoke):
            ended["smoke"] = ev.ts
    out: dict[str, float] = {}
    for i, (phase, began) in enumerate(marks):
        until = marks[i + 1][1] if i + 1 < len(marks) else ended.get(phase, now)
        out[phase] = out.get(phase, 0.0) + max(until - began, 0.0)
    return out


def _phase_word(phase: str) -> str:
    """The view's phase without its detail ("stopped after READY (...)" -> "stopped")."""
    return phase.split(" ", 1)[0] if phase else "unknown"


class _Families:
    """The metric families of one run, built from its view, phases and bench report."""

    def __init__(
        self, view: BootView, phases: Mapping[str, float], bench: BenchReport | None
    ) -> None:
        self.view, self.phases, self.bench = view, phases, bench

    def collect(self) -> Iterator[Metric]:
        yield from self._run()
        yield from self._ranks()
        if self.view.serving is not None:
            yield from self._serving()
        if self.bench is not None:
            yield from self._bench(self.bench)

    def _run(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import GaugeMetricFamily

        v, run = self.view, self.view.run_id

        def gauge(name: str, doc: str, *labels: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=["run", *labels])

        info = gauge("cluster_run_info", "The run: recipe and where it is now", "recipe", "phase")
        info.add_metric([run, v.recipe, _phase_word(v.phase)], 1)
        yield info
        outcome = gauge(
            "cluster_run_outcome", "1 for how the boot ended (all 0 while it boots)", "outcome"
        )
        for o in Outcome:
            outcome.add_metric([run, o.value], 1 if v.outcome == o.value else 0)
        yield outcome
        phases = gauge("cluster_run_phase_seconds", "Seconds the run spent in each phase", "phase")
        for name, seconds in self.phases.items():
            phases.add_metric([run, name], seconds)
        yield phases
        updated = gauge(
            "cluster_run_updated_timestamp_seconds",
            "When this view was made (a supervisor refreshes it every second)",
        )
        updated.add_metric([run], v.updated)
        yield updated
        if v.head_latency_s is not None:
            head = gauge("cluster_run_head_latency_seconds", "The head's readiness answer time")
            head.add_metric([run], v.head_latency_s)
            yield head

    def _serving(self) -> Iterator[Metric]:
        """After READY, the serving watch's figures (supervisor/serving_watch.py)."""
        from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

        sv, run = self.view.serving, self.view.run_id
        assert sv is not None

        def gauge(name: str, doc: str, value: float | None) -> Iterator[Metric]:
            if value is not None:
                fam = GaugeMetricFamily(name, doc, labels=["run"])
                fam.add_metric([run], value)
                yield fam

        def gauges(
            name: str, doc: str, label: str, values: Iterable[tuple[str, float | None]]
        ) -> Metric:
            """One family with a series per labelled value; an absent value has none."""
            fam = GaugeMetricFamily(name, doc, labels=["run", label])
            for key, value in values:
                if value is not None:
                    fam.add_metric([run, key], value)
            return fam

        def counter(name: str, doc: str, value: float) -> Metric:
            fam = CounterMetricFamily(name, doc, labels=["run"])
            fam.add_metric([run], value)
            return fam

        yield from gauge(
            "cluster_serving_uptime_seconds", "Seconds since this attempt was READY", sv.uptime_s
        )
        yield from gauge(
            "cluster_serving_ready_timestamp_seconds", "When this attempt was READY", sv.ready_at
        )
        yield gauges(
            "cluster_serving_canary_latency_seconds",
            "The canary request's latency: last, and p50/p99 over the last hour",
            "stat",
            (("last", sv.canary_last_s), ("p50", sv.canary_p50_s), ("p99", sv.canary_p99_s)),
        )
        yield from gauge(
            "cluster_serving_canary_failing_seconds",
            "How long the canary has failed (absent while it answers)",
            sv.canary_failing_s,
        )
        yield from gauge(
            "cluster_serving_health_ok",
            "1 when the head's readiness path answers 2xx",
            None if sv.health_ok is None else float(sv.health_ok),
        )
        yield gauges(
            "cluster_serving_requests",
            "The engine's own running and waiting requests",
            "state",
            (("running", sv.running), ("waiting", sv.waiting)),
        )
        yield from gauge(
            "cluster_serving_generation_tokens_per_second",
            "Output tokens per second, from the engine's generated-tokens counter",
            sv.tokens_per_s,
        )
        yield counter("cluster_serving_incidents", "Incidents after READY", sv.incidents)
        yield counter("cluster_serving_restarts", "Restarts of the whole TP group", sv.attempt)

    def _ranks(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

        labels = ["run", "rank", "node"]

        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels)

        phase = GaugeMetricFamily(
            "cluster_rank_phase", "1 for the rank's current phase", labels=[*labels, "phase"]
        )
        read = CounterMetricFamily(
            "cluster_rank_bytes_read", "Bytes the rank's processes have read", labels=labels
        )
        fams = {
            "expected_bytes": gauge("cluster_rank_expected_bytes", "Bytes the rank should read"),
            "rate_bps": gauge(
                "cluster_rank_read_rate_bytes_per_second", "The rank's read rate, smoothed"
            ),
            "eta_s": gauge("cluster_rank_eta_seconds", "Seconds until the rank's load ends"),
            "mem_free": gauge("cluster_rank_mem_free_bytes", "The node's MemFree"),
            "mem_available": gauge("cluster_rank_mem_available_bytes", "The node's MemAvailable"),
            "cached": gauge("cluster_rank_cached_bytes", "The node's page cache (Cached)"),
            "barrier_slack_s": gauge(
                "cluster_rank_barrier_slack_seconds",
                "Predicted finish to the post-load barrier deadline (< 0: late)",
            ),
            "exit_code": gauge("cluster_rank_exit_code", "The rank's exit code, once it exited"),
            "signal_age_s": gauge(
                "cluster_rank_signal_age_seconds", "Seconds since the rank last gave a sign"
            ),
        }
        reachable = gauge("cluster_rank_reachable", "1 when the rank's node answers")
        slow = gauge(
            "cluster_rank_slow",
            "1 while the rank's node answers but its sampling commands run past their deadline",
        )
        oom = gauge("cluster_rank_oom_killed", "1 when the kernel's OOM killer ended the rank")
        run = self.view.run_id
        for r in self.view.ranks:
            values = [run, str(r.rank), r.node]
            for p in RankPhase:
                phase.add_metric([*values, p.value], 1 if r.phase == p.value else 0)
            read.add_metric(values, r.bytes_read)
            for field, fam in fams.items():
                value = getattr(r, field)
                if value is not None:
                    fam.add_metric(values, float(value))
            reachable.add_metric(values, 0 if r.unreachable else 1)
            slow.add_metric(values, 1 if r.slow else 0)
            if r.exit_code is not None:
                oom.add_metric(values, 1 if r.oom_killed else 0)
        yield phase
        yield read
        yield from fams.values()
        yield reachable
        yield slow
        yield oom

    def _bench(self, b: BenchReport) -> Iterator[Metric]:
        from prometheus_client.metrics_core import GaugeMetricFamily

        run = self.view.run_id
        labels = ["run", "depth", "concurrency"]
        smoke = GaugeMetricFamily(
            "cluster_bench_smoke_ok", "1 when the last smoke request passed", labels=["run"]
        )
        smoke.add_metric([run], 1 if b.smoke.ok else 0)
        yield smoke
        when = GaugeMetricFamily(
            "cluster_bench_timestamp_seconds", "When the last bench began", labels=["run"]
        )
        when.add_metric([run], _ts(b.started) or 0.0)
        yield when
        simple = {
            "output_tok_s": ("cluster_bench_output_tokens_per_second", "Output tokens per second"),
            "req_s": ("cluster_bench_requests_per_second", "Completed requests per second"),
            "requests": ("cluster_bench_requests", "Requests the level sent"),
            "errors": ("cluster_bench_failed_requests", "Requests of the level that failed"),
            "client_cpu_s": ("cluster_bench_client_cpu_seconds", "CPU the bench client used"),
        }
        for field, (name, doc) in simple.items():
            fam = GaugeMetricFamily(name, doc, labels=labels)
            for lv in b.levels:
                fam.add_metric([run, str(lv.depth), str(lv.concurrency)], float(getattr(lv, field)))
            yield fam
        for field in ("ttft", "tpot", "itl", "e2e"):
            fam = GaugeMetricFamily(
                f"cluster_bench_{field}_seconds",
                f"{field.upper()} of the level: mean, p50, p99",
                labels=[*labels, "stat"],
            )
            for lv in b.levels:
                s = getattr(lv, field)
                for stat in ("mean", "p50", "p99"):
                    value = getattr(s, stat)
                    if value is not None:
                        fam.add_metric([run, str(lv.depth), str(lv.concurrency), stat], value)
            yield fam


def render(view: BootView, phases: Mapping[str, float], bench: BenchReport | None = None) -> str:
    """The Prometheus text exposition of one run. Pure (given its inputs)."""
    from prometheus_client.exposition import generate_latest

    return generate_latest(_Families(view, phases, bench)).decode()


class PhaseRecords:
    """The records `phase_seconds` reads, kept from events.jsonl as it grows: each call parses
    only the bytes appended since the last one (a supervisor ticks every second for hours, and
    re-reading the whole file each tick grew with the run). A torn last line (a write under
    way, or a crash mid-write) is left for the next call, which reads again from its start; a
    line no record of this version describes (a newer version's kind) is skipped, as
    `Run.events` skips it. A file shorter than what was read (replaced) is read afresh."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0  # bytes read up to the end of the last whole line
        self.parsed = 0  # lines parsed so far (what the incremental read saves, counted)
        self.records: list[Record] = []

    def read(self) -> list[Record]:
        try:
            with self.path.open("rb") as fh:
                if os.fstat(fh.fileno()).st_size < self.offset:
                    self.offset, self.records = 0, []
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return self.records
        whole = data.rfind(b"\n") + 1  # 0 when no line is complete yet
        for line in data[:whole].splitlines():
            self.parsed += 1
            with contextlib.suppress(ValidationError):
                record = RECORD.validate_json(line)
                # Stopped: the serving watch ends at `cluster stop` (it reads this reader too).
                if isinstance(record, Step | VerdictRecord | Smoke | Stopped):
                    self.records.append(record)
        self.offset += whole
        return self.records


def run_metrics(run: Run, view: BootView, records: PhaseRecords | None = None) -> str:
    """The text for `run` now: its view, its phases from events.jsonl, its last bench.
    `records`: the supervisor's incremental reader of events.jsonl; without it, read whole."""
    events = records.read() if records is not None else run.events()
    return render(view, phase_seconds(events, view.updated), run.bench_report_if_any())


def write_metrics(run: Run, view: BootView, records: PhaseRecords | None = None) -> None:
    """Rewrite metrics.prom atomically. A failure is logged, never raised: metrics must not
    end a boot. `records` as for `run_metrics`."""
    try:
        atomic_write_text(run.dir / METRICS_FILE, run_metrics(run, view, records))
    except (OSError, ValueError) as exc:
        log.warning("metrics.prom not written", error=f"{type(exc).__name__}: {exc}")
