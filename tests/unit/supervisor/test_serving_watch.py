"""The serving watch's pure parts: the wedge rule, the leak trend, the memory floor, the engines'
/metrics names, the restart budget (no storm possible), and the bounded log copy."""

from __future__ import annotations

import itertools
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.models.memory import MemoryReading
from orchestrator.models.recipe import Restart
from orchestrator.models.run import Outcome, RankExited
from orchestrator.simulator.serve import ServeState, metrics_text
from orchestrator.supervisor.follower import CUT_MARK, Follower
from orchestrator.supervisor.restart import decide_restart
from orchestrator.supervisor.serving import (
    CanaryResult,
    EngineReading,
    ServeWatchConfig,
    ServingState,
    judge_serving,
    parse_engine_metrics,
    watch_memory,
    watch_wedge,
)
from orchestrator.supervisor.state import initial_state, reduce
from orchestrator.supervisor.watchers import WatchConfig

GiB = 2**30
CFG = ServeWatchConfig(wedge_s=120.0, leak_window_s=600.0, mem_floor=4 * GiB)


def engine(sv: ServingState, ts: float, running: float, waiting: float, generated: float) -> None:
    sv.note_engine(EngineReading(ts, running, waiting, generated))


# -- wedge ------------------------------------------------------------------------------------


def test_requests_pending_and_tokens_flat_for_the_wedge_window_is_wedged_by_metrics() -> None:
    sv = ServingState(ready_at=0.0)
    engine(sv, 0.0, 1, 0, 100)
    engine(sv, 10.0, 1, 0, 140)  # moving
    for t in range(20, 130, 10):
        engine(sv, float(t), 1, 2, 140)  # flat from t=10
    assert watch_wedge(sv, 129.0, CFG) == []  # 119 s flat: not yet
    (f,) = watch_wedge(sv, 130.0, CFG)
    assert f.outcome is Outcome.WEDGED and f.watcher == "wedge:metrics"
    assert "1 running and 2 waiting" in f.message and "140" in f.message and "120 s" in f.message


def test_an_idle_engine_is_never_wedged_however_long_its_tokens_stay_flat() -> None:
    sv = ServingState(ready_at=0.0)
    for t in range(0, 3600, 15):
        engine(sv, float(t), 0, 0, 500)
    assert watch_wedge(sv, 3600.0, CFG) == []


def test_tokens_that_move_reset_the_wedge_clock() -> None:
    sv = ServingState(ready_at=0.0)
    for i, t in enumerate(range(0, 1000, 100)):
        engine(sv, float(t), 4, 0, 100 + i)  # slow, but moving
    assert watch_wedge(sv, 1000.0, CFG) == []


def test_a_canary_failing_while_health_says_200_for_the_window_is_wedged_by_canary() -> None:
    sv = ServingState(ready_at=0.0)
    sv.note_canary(CanaryResult(0.0, 0.2, True))
    for t in range(15, 150, 15):
        sv.note_canary(CanaryResult(float(t), None, True, "timed out"))
    assert watch_wedge(sv, 134.0, CFG) == []  # failing since 15: 119 s
    (f,) = watch_wedge(sv, 135.0, CFG)
    assert f.watcher == "wedge:canary" and "/health still answers 200" in f.message
    assert "timed out" in f.message
    sv.note_canary(CanaryResult(150.0, 0.3, True))  # one answer clears it
    assert watch_wedge(sv, 151.0, CFG) == []


def test_a_restarted_group_is_not_judged_wedged_by_the_last_attempts_failing_head() -> None:
    # Attempt 0's rank died at t=10; its head stopped answering /health and the canary. The
    # restart took 30 s; the new group is READY at 40 and its head not yet asked at 41.
    sv = ServingState(ready_at=0.0)
    sv.note_canary(CanaryResult(5.0, 0.2, True))
    sv.note_canary(CanaryResult(11.0, None, False, "connection refused"))
    engine(sv, 9.0, 1, 0, 100)
    engine(sv, 11.0, 1, 0, 100)
    sv.note_memory("spark-1", 9.0, 100 * GiB, CFG.leak_window_s)
    fast = replace(CFG, wedge_s=4.0)
    assert watch_wedge(sv, 41.0, fast)  # without a new attempt the old failure reads as wedged
    sv.begin_attempt(40.0)
    assert watch_wedge(sv, 41.0, fast) == []
    assert sv.ready_at == 40.0 and sv.memory == {} and sv.canaries  # latency history is kept
    sv.note_canary(CanaryResult(42.0, None, False, "connection refused"))
    assert watch_wedge(sv, 45.0, fast) == []  # the new attempt's own failure: 3 s, not yet
    (f,) = watch_wedge(sv, 46.0, fast)
    assert f.watcher == "wedge:health"


def test_slow_canaries_are_a_warning_with_p50_and_p99_not_a_wedge() -> None:
    sv = ServingState(ready_at=0.0)
    for t in range(0, 300, 15):
        sv.note_canary(CanaryResult(float(t), 12.0 if t % 30 else 1.0, True))
    sv.note_canary(CanaryResult(300.0, 14.0, True))
    state = initial_state(["n0", "n1"])
    found = judge_serving(state, sv, 301.0, WatchConfig(), CFG)
    assert [f.watcher for f in found] == ["slow-canary"]
    assert found[0].severity == "warning" and "p50" in found[0].message
    last, p50, p99 = sv.canary_stats()
    assert (last, p99) == (14.0, 14.0) and p50 in (1.0, 12.0)


def test_canaries_older_than_an_hour_are_dropped() -> None:
    sv = ServingState(ready_at=0.0)
    for t in range(0, 7200, 15):
        sv.note_canary(CanaryResult(float(t), 0.1, True))
    assert len(sv.canaries) <= 3600 // 15 + 1


# -- memory -----------------------------------------------------------------------------------


def _with_memory(avail: int) -> object:
    s = initial_state(["n0", "n1"])
    ranks = tuple(replace(r, memory=MemoryReading(mem_available=avail)) for r in s.ranks)
    return replace(s, ranks=ranks)


def test_a_steady_fall_is_a_leak_warning_with_its_rate_and_time_to_the_floor() -> None:
    sv = ServingState(ready_at=0.0)
    start = 20 * GiB
    for t in range(0, 601, 2):  # 10 MB/s for 10 minutes
        sv.note_memory("n0", float(t), start - 10_000_000 * t, CFG.leak_window_s)
        sv.note_memory("n1", float(t), start, CFG.leak_window_s)
    now_avail = start - 10_000_000 * 600
    s = _with_memory(now_avail)
    (f,) = watch_memory(s, sv, 600.0, CFG)  # type: ignore[arg-type]
    assert f.severity == "warning" and f.watcher == "leak" and "node n0" in f.message
    assert "10.0 MB/s" in f.message
    expected_left = (now_avail - 4 * GiB) / 10_000_000
    assert f"~{expected_left:.0f} s" in f.message


def test_noise_without_a_trend_is_no_leak() -> None:
    sv = ServingState(ready_at=0.0)
    wobble = itertools.cycle([0, 300e6, -200e6, 100e6, -300e6])
    for t in range(0, 601, 2):
        sv.note_memory("n0", float(t), int(20 * GiB + next(wobble)), CFG.leak_window_s)
    assert watch_memory(_with_memory(20 * GiB), sv, 600.0, CFG) == []  # type: ignore[arg-type]


def test_under_the_floor_is_memory_low_a_verdict() -> None:
    sv = ServingState(ready_at=0.0)
    (f,) = watch_memory(_with_memory(3 * GiB), sv, 10.0, CFG)  # type: ignore[arg-type]
    assert f.severity == "verdict" and f.outcome is Outcome.MEMORY_LOW
    assert "under the 4.0 GiB floor" in f.message and "do NOT drop caches" in f.advice


# -- deaths -----------------------------------------------------------------------------------


def test_the_first_rank_to_die_after_ready_is_rank_died_with_its_exit_code() -> None:
    s = initial_state(["n0", "n1", "n2"])
    s = reduce(s, RankExited(ts=20.0, rank=2, exit_code=1, finished_at=11.0))
    s = reduce(s, RankExited(ts=21.0, rank=1, exit_code=137, finished_at=10.0))
    (f,) = [x for x in judge_serving(s, ServingState(0.0), 22.0, WatchConfig(), CFG)]
    assert f.outcome is Outcome.RANK_DIED and f.rank == 1 and "exit code 137" in f.message


# -- the engines' metric names ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["sglang", "vllm"])
def test_the_simulators_metrics_read_back_in_each_engines_names(name: str) -> None:
    state = ServeState(name, "m", "/m", 1024, access_log=lambda *a: None)
    state.count(running=2, waiting=3, generated=41)
    text = metrics_text(state)
    assert (
        "sglang:num_running_reqs" in text
        if name == "sglang"
        else "vllm:num_requests_running" in text
    )
    assert f"{name}:generation_tokens_total" in text
    r = parse_engine_metrics(text, name, 5.0)
    assert r == EngineReading(5.0, 2.0, 3.0, 41.0)
    assert parse_engine_metrics(text, "vllm" if name == "sglang" else "sglang", 5.0) is None


def test_series_of_one_name_are_summed_and_garbage_reads_as_none() -> None:
    text = (
        "# TYPE sglang:num_running_reqs gauge\n"
        'sglang:num_running_reqs{dp="0"} 1\nsglang:num_running_reqs{dp="1"} 2\n'
        "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs 0\n"
        "# TYPE sglang:generation_tokens counter\nsglang:generation_tokens_total 7\n"
    )
    assert parse_engine_metrics(text, "sglang", 1.0) == EngineReading(1.0, 3.0, 0.0, 7.0)
    assert parse_engine_metrics("not { prometheus", "sglang", 1.0) is None


# -- restarts: bounded by construction --------------------------------------------------------

ROOMY = {"n0": 100 * GiB, "n1": 100 * GiB}


def test_no_restart_policy_means_every_death_is_final() -> None:
    d = decide_restart(None, [], 0.0, 1000.0, ROOMY)
    assert d.action == "final" and "no `restart:`" in d.reason


def test_max_two_brings_the_group_back_twice_and_the_third_death_is_final() -> None:
    policy = Restart(max=2, window=3600, backoff=5, min_mem_available=GiB)
    restarts: list[float] = []
    t = 0.0
    actions = []
    for _death in range(3):
        died = t
        while True:
            d = decide_restart(policy, restarts, died, t, ROOMY)
            if d.action != "wait":
                break
            t = max(t + 0.5, d.not_before)
        actions.append(d.action)
        if d.action == "restart":
            restarts.append(t)
        t += 1.0  # the group dies again a second after it is back
    assert actions == ["restart", "restart", "final"]
    assert restarts[1] - restarts[0] >= 2 * 5  # the backoff doubled


def test_a_group_that_dies_the_moment_it_is_back_never_storms() -> None:
    """Whatever the timing, in every window there are at most `max` restarts and each waits
    its backoff: a simulated day of instant deaths, asked every half second."""
    policy = Restart(max=3, window=600, backoff=2, min_mem_available=GiB)
    restarts: list[float] = []
    t, died, finals = 0.0, 0.0, 0
    while t < 86400:
        d = decide_restart(policy, restarts, died, t, ROOMY)
        if d.action == "restart":
            restarts.append(t)
            died = t  # dead again at once
        elif d.action == "final":
            finals += 1
            died = t  # (a new run would start here; the budget still holds)
            t += 60
        t += 0.5 if d.action != "wait" else max(0.5, min(d.not_before - t, 60))
    assert restarts, "it did restart"
    for i, start in enumerate(restarts):
        in_window = [r for r in restarts[i:] if r - start < policy.window]
        assert len(in_window) <= policy.max, (start, in_window)
    gaps = [b - a for a, b in itertools.pairwise(restarts)]
    assert min(gaps) >= policy.backoff
    assert len(restarts) <= policy.max * (86400 / policy.window + 1)
    assert finals > 0


def test_no_restart_under_the_memory_floor_it_waits_then_gives_up() -> None:
    policy = Restart(max=2, window=3600, backoff=1, min_mem_available=8 * GiB, mem_wait=60)
    low = {"n0": 100 * GiB, "n1": 5 * GiB}
    d = decide_restart(policy, [], 0.0, 2.0, low)
    assert d.action == "wait" and "n1 5.0 GiB" in d.reason
    assert decide_restart(policy, [], 0.0, 62.0, low).action == "final"
    assert decide_restart(policy, [], 0.0, 2.0, {"n0": None}).action == "wait"  # unknown
    assert decide_restart(policy, [], 0.0, 2.0, ROOMY).action == "restart"


# -- the bounded copy -------------------------------------------------------------------------


class _NoRuntime:
    pass


def test_a_rank_log_over_its_bound_keeps_head_and_newest_tail_and_says_what_was_cut(
    tmp_path: Path,
) -> None:
    from orchestrator.runtime.base import RankSpec

    spec = RankSpec.__new__(RankSpec)
    object.__setattr__(spec, "rank", 0)
    got: list[str] = []
    f = Follower(_NoRuntime(), spec, tmp_path, lambda r, s, t: got.extend(t), bound=10_000)  # type: ignore[arg-type]
    lock = threading.Lock()
    with lock:
        for i in range(2000):
            stamp = f"2026-12-03T07:{i // 60 % 60:02d}:{i % 60:02d}.{i:09d}Z"
            f.accept("stdout", [f"{stamp} line {i}\n".encode()])
    data = (tmp_path / "stdout.log").read_bytes()
    assert len(data) <= 10_000 + 200
    assert data.startswith(b"2026-12-03T07:00:00.000000000Z line 0\n")
    assert data.rstrip().endswith(b"line 1999")
    assert data.count(CUT_MARK) == 1
    assert f.cut_bytes > 0 and f"{f.cut_bytes} bytes in all".encode() in data
    assert len(got) == 2000  # every line was still handed on
    f.close()
    again = Follower(_NoRuntime(), spec, tmp_path, lambda r, s, t: None, bound=10_000)  # type: ignore[arg-type]
    assert again.cut_bytes == f.cut_bytes  # a resumed follower knows its copy is bounded
    again.close()
