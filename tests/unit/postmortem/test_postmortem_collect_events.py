"""postmortem/collect.py reads events.jsonl through the typed records (models/events.py), and a
run written by a crash or by a newer version still reads."""

from __future__ import annotations

from orchestrator.models.events import Step, Stopped, VerdictRecord, WatcherWarning
from orchestrator.models.run import NodeBack, NodeLost, Outcome, RankExited, RankStarted
from orchestrator.postmortem.collect import collect_run
from orchestrator.postmortem.signatures import load_signatures
from orchestrator.runstore import RunStore


def test_collect_reads_typed_records_past_a_newer_kind_and_a_torn_last_line(tmp_path):
    run = RunStore(tmp_path).create()
    t0 = 1_800_000_000.0
    for record in (
        Step(ts=t0, step="start"),
        RankStarted(ts=t0 + 1, rank=0, container="c0"),
        RankStarted(ts=t0 + 2, rank=1, container="c1"),
        NodeLost(ts=t0 + 3, rank=1, reason="ssh: timeout"),
        NodeBack(ts=t0 + 4, rank=1),
        NodeLost(ts=t0 + 5, rank=1, reason="no route to host"),
    ):
        run.append_event(record)
    with run.events_path.open("a") as fh:
        fh.write('{"kind":"from_a_newer_version","ts":1800000006.0,"rank":0}\n')
    warning = WatcherWarning(
        ts=t0 + 7, watcher="stall", severity="warning", rank=0, message="rank 0 stalls"
    )
    verdict = VerdictRecord(
        ts=t0 + 9,
        watcher="exits",
        severity="verdict",
        rank=0,
        outcome=Outcome.RANK_EXITED,
        message="rank 0 exited",
        decided_at=t0 + 9,
    )
    for record in (
        warning,
        RankExited(ts=t0 + 8, rank=0, exit_code=137, oom_killed=True),
        verdict,
        Stopped(ts=t0 + 11, began=t0 + 10),
    ):
        run.append_event(record)
    with run.events_path.open("a") as fh:
        fh.write('{"kind":"step","ts":1800000012.0,"st')  # a crash mid-write
    for k in (0, 1):
        run.rank_dir(k)
    got = collect_run(run, load_signatures(), workers=1)
    r0, r1 = got.ranks
    assert r0.exit is not None and (r0.exit.exit_code, r0.exit.oom_killed) == (137, True)
    assert r0.exit.started_at == t0 + 1 and r0.exit.source == "events.jsonl:9"
    assert r0.lost is None
    assert r1.lost is not None and (r1.lost.line, r1.lost.ts) == (6, t0 + 5)
    assert "no route to host" in r1.lost.text
    assert [(w.line, w.text, w.rank) for w in got.run.warnings] == [(8, "rank 0 stalls", 0)]
    assert got.run.stopped_at == t0 + 10
    assert got.run.supervisor_verdict is not None
    assert got.run.supervisor_verdict["outcome"] == Outcome.RANK_EXITED.value
    assert got.run.supervisor_verdict["decided_at"] == t0 + 9


def test_the_verdicts_own_words_are_not_evidence_but_a_lost_nodes_reason_is(tmp_path):
    # The supervisor's verdict is the answer the postmortem explains: read as a rank's line, a
    # READY_TIMEOUT worded like a launcher's wait ("not ready after 3 minutes") named a cause
    # from itself (noticed while mining the twenty-fourth set). What the nodes said (a lost
    # node's reason) is still evidence.
    run = RunStore(tmp_path).create()
    t0 = 1_800_000_000.0
    run.append_event(RankStarted(ts=t0, rank=0, container="c0"))
    run.append_event(NodeLost(ts=t0 + 1, rank=1, reason="Failed to connect to 198.18.0.2:50052"))
    run.append_event(
        VerdictRecord(
            ts=t0 + 2,
            watcher="ready",
            severity="verdict",
            rank=0,
            outcome=Outcome.READY_TIMEOUT,
            message="rank 0: vLLM not ready after 3 minutes (timeouts.ready)",
            decided_at=t0 + 2,
        )
    )
    for k in (0, 1):
        run.rank_dir(k)
    r0, r1 = collect_run(run, load_signatures(), workers=1).ranks
    assert [h.signature for h in r0.hits] == []
    assert [h.signature for h in r1.hits] == ["llama-cpp-rpc-server-unreachable"]
    assert r1.hits[0].evidence.file == "events.jsonl"
