"""metrics.prom and `cluster status --format prometheus`: the text is parsed back with
prometheus_client's own parser, and every figure compared with the view it came from."""

from __future__ import annotations

import json
import os
import socket
import time

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.cli.main import main
from orchestrator.models.bench import BenchConfig, BenchReport, SmokeResult
from orchestrator.models.events import FollowInterrupted, Record, Smoke, Step, VerdictRecord
from orchestrator.models.run import (
    Finding,
    NodeLost,
    NodeSlow,
    Outcome,
    RankExited,
    RankStarted,
    Sample,
)
from orchestrator.serving_bench.stats import RequestResult, level_result
from orchestrator.supervisor.metrics import (
    METRICS_FILE,
    PhaseRecords,
    phase_seconds,
    render,
    write_metrics,
)
from orchestrator.supervisor.state import initial_state, reduce, reduce_lines
from orchestrator.supervisor.view import BootView, build_view
from orchestrator.supervisor.watchers import WatchConfig
from tests.unit.cli.test_serving_bench import make_run

GB = 10**9
CFG = WatchConfig(barrier_window_s=600, expected_bytes_per_rank=10 * GB)


def loading_view(
    run_id: str = "20261201T060000Z-abcdef", verdict: Finding | None = None
) -> BootView:
    s = initial_state(["spark-0", "spark-1", "spark-2"])
    for k in range(3):
        s = reduce(s, RankStarted(ts=100.0, rank=k, container=f"c{k}"))
        s = reduce_lines(
            s, k, 101.0, ["[2026-12-01 06:00:01 TP0] Load weight begin. avail mem=110.5 GB"]
        )
    for k, rchar in ((0, 4 * GB), (1, 2 * GB), (2, 1 * GB)):
        s = reduce(
            s,
            Sample(
                ts=110.0, rank=k, rchar=0, mem_free=50 * GB, mem_available=90 * GB, cached=30 * GB
            ),
        )
        s = reduce(
            s,
            Sample(
                ts=120.0,
                rank=k,
                rchar=rchar,
                mem_free=40 * GB,
                mem_available=88 * GB,
                cached=35 * GB,
            ),
        )
    s = reduce_lines(s, 0, 121.0, ["[2026-12-01 06:00:21 TP0] Load weight end. elapsed=20.0 s"])
    s = reduce(s, NodeLost(ts=122.0, rank=1, reason="ssh: connection refused"))
    s = reduce(s, RankExited(ts=123.0, rank=2, exit_code=137, oom_killed=True))
    s = reduce(s, NodeSlow(ts=119.0, rank=0, reason="docker inspect c0 answered after 4 s"))
    return build_view(
        s,
        125.0,
        CFG,
        run_id=run_id,
        recipe="mistral-large4-8x-sglang",
        phase="booting",
        verdict=verdict,
    )


def samples(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for sm in fam.samples:
            out.setdefault(sm.name, []).append(sm)
    return out


def one(found: dict[str, list], name: str, **labels: str) -> float:
    hits = [s.value for s in found[name] if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_every_rank_figure_of_the_view_is_a_series_with_run_rank_and_node():
    view = loading_view()
    text = render(view, {"preflight": 12.5, "supervise": 40.0})
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["cluster_rank_bytes_read"].type == "counter"
    assert families["cluster_rank_phase"].type == "gauge"
    found = samples(text)
    run = view.run_id
    for r in view.ranks:
        at = {"run": run, "rank": str(r.rank), "node": r.node}
        assert one(found, "cluster_rank_bytes_read_total", **at) == r.bytes_read
        phases = {
            s.labels["phase"]: s.value
            for s in found["cluster_rank_phase"]
            if s.labels["rank"] == str(r.rank)
        }
        assert phases[r.phase] == 1 and sum(phases.values()) == 1
        assert one(found, "cluster_rank_mem_free_bytes", **at) == r.mem_free
        assert one(found, "cluster_rank_mem_available_bytes", **at) == r.mem_available
        assert one(found, "cluster_rank_cached_bytes", **at) == r.cached
        assert one(found, "cluster_rank_expected_bytes", **at) == 10 * GB
        assert one(found, "cluster_rank_reachable", **at) == (0 if r.unreachable else 1)
        assert one(found, "cluster_rank_slow", **at) == (1 if r.slow else 0)
    assert [r.phase for r in view.ranks] == ["loaded", "unreachable", "exited"]
    assert [bool(r.slow) for r in view.ranks] == [True, False, False]
    assert one(found, "cluster_rank_read_rate_bytes_per_second", rank="1") == view.ranks[1].rate_bps
    assert one(found, "cluster_rank_eta_seconds", rank="1") == view.ranks[1].eta_s
    assert (
        one(found, "cluster_rank_barrier_slack_seconds", rank="1") == view.ranks[1].barrier_slack_s
    )
    assert one(found, "cluster_rank_exit_code", rank="2") == 137
    assert one(found, "cluster_rank_oom_killed", rank="2") == 1
    assert not [
        s for s in found["cluster_rank_exit_code"] if s.labels["rank"] != "2"
    ]  # no value, no series
    assert not [s for s in found["cluster_rank_eta_seconds"] if s.labels["rank"] == "0"]  # loaded
    assert one(found, "cluster_run_phase_seconds", phase="preflight") == 12.5
    assert one(found, "cluster_run_info", recipe="mistral-large4-8x-sglang", phase="booting") == 1
    assert sum(s.value for s in found["cluster_run_outcome"]) == 0  # booting: no outcome yet
    assert one(found, "cluster_run_updated_timestamp_seconds", run=run) == 125.0


def test_the_outcome_is_one_series_per_outcome_with_the_verdicts_set():
    verdict = Finding(
        watcher="ready", severity="verdict", rank=None, outcome=Outcome.READY, message="ok"
    )
    found = samples(render(loading_view(verdict=verdict), {}))
    assert {s.labels["outcome"] for s in found["cluster_run_outcome"]} == {o.value for o in Outcome}
    assert one(found, "cluster_run_outcome", outcome="READY") == 1
    assert sum(s.value for s in found["cluster_run_outcome"]) == 1


def test_phases_last_from_their_step_to_the_next_and_the_open_one_to_now():
    t0 = 1796104800.0  # 2026-12-01T06:00:00Z
    events: list[Record] = [
        Step(step="run", ts=t0),
        Step(step="twin", ts=t0 + 1),
        Step(step="preflight", ts=t0 + 2),
        Step(step="start", ts=t0 + 7),
        Step(step="started", ts=t0 + 8),
        Step(step="supervise", ts=t0 + 10),
        RankStarted(rank=0, container="c", ts=t0 + 9),
    ]
    assert phase_seconds(events, now=t0 + 70) == {
        "setup": 2.0, "preflight": 5.0, "start": 3.0, "supervise": 60.0
    }  # fmt: skip
    verdict = Finding(watcher="ready", severity="verdict", rank=None, message="ok")
    done = [*events, VerdictRecord(decided_at=t0 + 50, ts=t0 + 51, **dict(verdict))]
    assert phase_seconds(done, now=t0 + 999)["supervise"] == 40.0
    smoked = [
        *done,
        Step(step="smoke", ts=t0 + 51),
        Smoke(ok=True, endpoint="http://h:1", expected_model="m", ts=t0 + 53),
    ]
    assert phase_seconds(smoked, now=t0 + 999)["smoke"] == 2.0


def test_bench_results_are_series_per_depth_and_concurrency():
    rs = [
        RequestResult(started=0, ended=2, ttft_s=0.5, chunk_times=[0.5, 1.0, 2.0], output_tokens=4)
    ]
    levels = tuple(
        level_result(rs, depth=d, concurrency=c, duration_s=2.0, client_cpu_s=0.25)
        for d in (0, 4096) for c in (1, 2)
    )  # fmt: skip
    report = BenchReport(
        run_id="r", recipe="x", endpoint="http://h:1", model="m", started="2026-12-01T06:00:00+00:00",
        config=BenchConfig(), smoke=SmokeResult(ok=True, endpoint="http://h:1", expected_model="m"),
        levels=levels,
    )  # fmt: skip
    found = samples(render(loading_view(), {}, report))
    assert (
        one(found, "cluster_bench_output_tokens_per_second", depth="4096", concurrency="2") == 2.0
    )
    assert one(found, "cluster_bench_ttft_seconds", depth="0", concurrency="1", stat="p50") == 0.5
    assert one(found, "cluster_bench_tpot_seconds", depth="0", concurrency="1", stat="mean") == 0.5
    assert one(found, "cluster_bench_failed_requests", depth="0", concurrency="2") == 0
    assert one(found, "cluster_bench_smoke_ok", run="20261201T060000Z-abcdef") == 1
    assert one(found, "cluster_bench_timestamp_seconds") == 1796104800.0


def test_status_format_prometheus_prints_what_the_supervisor_writes(tmp_path, capsys):
    run = make_run(tmp_path, None)
    view = loading_view(run_id=run.id).model_copy(update={"updated": time.time()})
    run.write_status(view)
    run.lock_path.write_text(
        json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "heartbeat": time.time()})
    )
    run.append_event(Step(step="preflight"))
    write_metrics(run, view)  # the supervisor's hook, as every tick
    kept = (run.dir / METRICS_FILE).read_text()
    assert main(["status", "--run", str(run.dir), "--format", "prometheus"]) == 0
    printed = capsys.readouterr().out
    assert printed == kept
    assert "cluster_rank_bytes_read_total{" in printed and f'run="{run.id}"' in printed
    assert not [p for p in run.dir.iterdir() if p.name.startswith(".metrics.prom")]  # renamed


def test_after_a_bench_metrics_prom_carries_its_results(tmp_path, capsys):
    from tests.unit.serving_servers import sim_server

    run = make_run(tmp_path, "READY")
    run.write_status(loading_view(run_id=run.id))
    with sim_server() as (url, _):
        args = [
            "bench",
            str(run.dir),
            "--endpoint",
            url,
            "--pp",
            "20",
            "--tg",
            "4",
            "--depths",
            "0",
        ]
        assert main([*args, "--concurrency", "1,2", "--requests-per-client", "1"]) == 0
    found = samples((run.dir / METRICS_FILE).read_text())
    assert {s.labels["concurrency"] for s in found["cluster_bench_requests"]} == {"1", "2"}
    assert one(found, "cluster_bench_smoke_ok") == 1
    assert len(found["cluster_rank_bytes_read_total"]) == 3  # the last supervised view's ranks


def test_phase_records_parse_only_the_bytes_appended_since_the_last_tick(tmp_path):
    run = make_run(tmp_path, None)
    t0 = 1_800_000_000.0
    tail = PhaseRecords(run.events_path)
    for step in ("run", "preflight"):
        run.append_event(Step(ts=t0, step=step))
    run.append_event(FollowInterrupted(ts=t0, rank=0, reason="ssh: connection lost"))
    before = run.events_path.stat().st_size
    assert [r.step for r in tail.read() if isinstance(r, Step)] == ["run", "preflight"]
    assert tail.parsed == 3 and tail.offset == before
    # The next tick: two records more, a newer version's kind, and a line torn mid-write.
    run.append_event(Step(ts=t0 + 10, step="start"))
    run.append_event(Step(ts=t0 + 20, step="supervise"))
    with run.events_path.open("a") as fh:
        fh.write('{"kind":"from_the_future","ts":1}\n{"kind":"step","ts":1800000030.0,"st')
    assert [r.step for r in tail.read() if isinstance(r, Step)] == [
        "run",
        "preflight",
        "start",
        "supervise",
    ]
    assert tail.parsed == 3 + 3  # the old lines were not parsed again; the torn one not yet
    # The write completes: the torn line is read again from its start, and only it.
    with run.events_path.open("a") as fh:
        fh.write('ep":"smoke"}\n')
    assert [r.step for r in tail.read() if isinstance(r, Step)][-1] == "smoke"
    assert tail.parsed == 7
    assert phase_seconds(tail.read(), now=t0 + 40) == phase_seconds(run.events(), now=t0 + 40)
    # A replaced (shorter) file is read afresh.
    run.events_path.write_text(Step(ts=t0, step="run").model_dump_json() + "\n")
    assert [r.step for r in tail.read() if isinstance(r, Step)] == ["run"]
