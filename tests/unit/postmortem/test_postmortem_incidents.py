"""The postmortem of an incident after READY (postmortem/incidents.py): the serving watch's
incident comes first (first failing rank, category, what to change), the logs' own reading
names the category when the died rank's log has one, restarts are told attempt by attempt.
Fakes only: short logs diagnosed through `postmortem_logs`, incidents made by hand."""

from __future__ import annotations

from pathlib import Path

from orchestrator.models.events import Incident, Restarted
from orchestrator.models.run import Outcome
from orchestrator.postmortem import postmortem_logs
from orchestrator.postmortem.incidents import ServingHistory, explain

T0 = 1796105871.0
SERVING = (
    "[2026-12-01 06:17:51 TP{k}] Load weight begin. avail mem=78.00 GB\n"
    "[2026-12-01 06:18:51 TP{k}] Load weight end. type=MistralForCausalLM, avail mem=40.00 GB\n"
)
CUDA_OOM = (
    "[2026-12-01 07:20:00 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 119.70 GiB of which 1.02 GiB is free.\n"
)


def logs(tmp_path: Path, rank3: str = "") -> list[Path]:
    out = []
    for k in range(4):
        path = tmp_path / f"rank-{k}.log"
        path.write_text(SERVING.format(k=k) + (rank3 if k == 3 else ""), encoding="utf-8")
        out.append(path)
    return out


def incident(outcome: Outcome, rank: int, ts: float, *, final: bool = True, **kw) -> Incident:
    fields = {
        "watcher": "died",
        "severity": "verdict",
        "rank": rank,
        "outcome": outcome,
        "message": f"rank {rank} (sim-node{rank}) died while serving (exit code 3): boom",
        "advice": "see its log",
        "ts": ts,
        "final": final,
    }
    fields.update(kw)
    return Incident.model_validate(fields)


def test_a_rank_died_after_ready_names_the_rank_its_exit_and_what_to_change(tmp_path):
    d = postmortem_logs(logs(tmp_path))
    died = incident(Outcome.RANK_DIED, 3, T0 + 600, exit_code=3, last_lines=("RuntimeError: boom",))
    out = explain(d, ServingHistory(T0, (died,), ()))
    assert out.first_failing_rank == 3
    assert out.root_cause is not None and out.root_cause.rank == 3
    assert out.verdict.startswith("RANK_DIED (rank-died-serving): rank 3 (exit code 3)")
    assert "after serving 10.0 min" in out.verdict and "RuntimeError: boom" in out.verdict
    assert "What to change:" in out.verdict and "restart: {max: 2}" in out.verdict
    assert any(n.startswith("incident: ") for n in out.notes)
    assert out.outcome == "failed-unknown"  # the log names no cause: no category is invented


def test_the_died_ranks_own_log_names_the_category_when_it_has_one(tmp_path):
    d = postmortem_logs(logs(tmp_path, CUDA_OOM))
    assert d.root_cause is not None and d.root_cause.rank == 3, d.verdict
    died = incident(Outcome.RANK_DIED, 3, T0 + 60, exit_code=1)
    out = explain(d, ServingHistory(T0, (died,), ()))
    assert out.category == d.category != "unknown"
    assert out.outcome == "failed" and "Its log says:" in out.verdict


def test_wedged_memory_low_and_node_lost_have_their_category_and_change(tmp_path):
    d = postmortem_logs(logs(tmp_path))
    cases = {
        Outcome.WEDGED: ("watchdog-timeout", "timeouts.wedge"),
        Outcome.MEMORY_LOW: ("out-of-memory", "never drop the page cache"),
        Outcome.NODE_LOST: ("rendezvous-network", "cluster inventory check"),
    }
    for outcome, (category, change) in cases.items():
        rank = 0 if outcome is Outcome.WEDGED else 2
        found = incident(outcome, rank, T0 + 30, watcher="x", signal="canary")
        out = explain(d, ServingHistory(T0, (found,), ()))
        assert out.category == category, outcome
        assert out.first_failing_rank == rank
        assert out.verdict.startswith(f"{outcome.value} ("), out.verdict
        assert change in out.verdict, outcome
        assert out.outcome == "failed"


def test_restarts_are_told_attempt_by_attempt_with_where_each_is_kept(tmp_path):
    d = postmortem_logs(logs(tmp_path))
    history = ServingHistory(
        T0,
        (
            incident(Outcome.RANK_DIED, 3, T0 + 20, final=False, attempt=0),
            incident(Outcome.RANK_DIED, 3, T0 + 60, final=False, attempt=1),
            incident(Outcome.RANK_DIED, 3, T0 + 100, attempt=2),
        ),
        (
            Restarted(attempt=1, reason="died", kept="attempt-0", ts=T0 + 25),
            Restarted(attempt=2, reason="died", kept="attempt-1", ts=T0 + 65),
        ),
    )
    out = explain(d, history)
    assert "brought the whole group back 2 time(s)" in out.verdict
    assert "attempt-0/, attempt-1/" in out.verdict
    assert sum(n.startswith("incident: ") for n in out.notes) == 3


def test_a_run_without_incidents_is_left_as_the_logs_read_it(tmp_path):
    d = postmortem_logs(logs(tmp_path))
    assert explain(d, ServingHistory(T0, (), ())) == d
