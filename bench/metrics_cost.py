"""Benchmark: what metrics.prom costs the supervisor per tick (issue 19).

    .venv/bin/python bench/metrics_cost.py [--ticks 300] [--events 400]

The supervisor writes status.json every tick (1 s) and, since issue 19, metrics.prom too: the
view rendered by prometheus_client, the run's phases read back from events.jsonl, the last
bench report if any, written to a temporary file and renamed. This times both writes for an
8-rank view mid-load, with an events.jsonl of `--events` records (a long boot with warnings
and reconnects has a few hundred), and prints milliseconds a tick, the share of one core at one
tick a second, and metrics.prom's cost as a ratio of status.json's. One run, this machine.
The supervisor reads events.jsonl incrementally (only what was appended since its last tick);
the whole re-read each tick that it did before is timed beside it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.models.events import FollowInterrupted, Step  # noqa: E402
from orchestrator.models.run import RankStarted, Sample  # noqa: E402
from orchestrator.runstore import RunStore  # noqa: E402
from orchestrator.supervisor.metrics import PhaseRecords, write_metrics  # noqa: E402
from orchestrator.supervisor.state import initial_state, reduce, reduce_lines  # noqa: E402
from orchestrator.supervisor.view import build_view  # noqa: E402
from orchestrator.supervisor.watchers import WatchConfig  # noqa: E402

GB = 10**9


def timed(fn, ticks: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(ticks):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ticks", type=int, default=300)
    ap.add_argument("--events", type=int, default=400)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = RunStore(Path(tmp)).create()
        for step in ("run", "twin", "preflight", "start", "started", "supervise"):
            run.append_event(Step(step=step))
        s = initial_state([f"spark-{k}" for k in range(8)])
        for k in range(8):
            s = reduce(s, RankStarted(ts=100.0, rank=k, container=f"c{k}"))
            run.append_event(RankStarted(ts=100.0, rank=k, container=f"c{k}"))
            s = reduce_lines(s, k, 101.0, ["[2026-12-01 06:00:01 TP0] Load weight begin."])
            for i, ts in enumerate((110.0, 120.0)):
                s = reduce(s, Sample(ts=ts, rank=k, rchar=i * (k + 1) * GB, mem_free=40 * GB,
                                     mem_available=88 * GB, cached=35 * GB))  # fmt: skip
        for i in range(max(args.events - 14, 0)):
            run.append_event(FollowInterrupted(rank=i % 8, reason="ssh: connection lost"))
        cfg = WatchConfig(barrier_window_s=7200, expected_bytes_per_rank=76 * GB)
        view = build_view(s, 125.0, cfg, run_id=run.id, recipe="mistral-large4-8x-sglang",
                          phase="booting")  # fmt: skip
        status = timed(lambda: run.write_status(view), args.ticks)
        # As the supervisor does it: one incremental reader of events.jsonl across the ticks
        # (its first tick reads the whole file; the rest only what was appended, here nothing,
        # as in a quiet stretch of a boot). `whole` re-reads the file every tick, as
        # `cluster status --format prometheus` does once.
        records = PhaseRecords(run.events_path)
        metrics = timed(lambda: write_metrics(run, view, records), args.ticks)
        whole = timed(lambda: write_metrics(run, view), args.ticks)
        size = (run.dir / "metrics.prom").stat().st_size
        series = sum(1 for line in (run.dir / "metrics.prom").read_text().splitlines()
                     if line and not line.startswith("#"))  # fmt: skip
    ms_status = 1000 * statistics.median(status)
    ms_metrics = 1000 * statistics.median(metrics)
    print(f"8 ranks, {args.events} events.jsonl records, {args.ticks} ticks each (medians)")
    print(f"status.json  : {ms_status:6.2f} ms a tick = {ms_status / 10:5.2f}% of a core at 1 Hz")
    print(f"metrics.prom : {ms_metrics:6.2f} ms a tick = {ms_metrics / 10:5.2f}% of a core at 1 Hz"
          f" ({series} series, {size} bytes)")  # fmt: skip
    ms_whole = 1000 * statistics.median(whole)
    print(f"  re-reading events.jsonl whole each tick: {ms_whole:6.2f} ms a tick")
    print(f"metrics.prom / status.json: {ms_metrics / ms_status:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
