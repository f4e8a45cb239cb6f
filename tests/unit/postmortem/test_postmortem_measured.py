"""The postmortem weighs what the supervisor measured (issue 32): samples, starts, lost nodes and
its warnings, beside what the ranks printed.

The run directories under tests/fixtures/postmortem/measured/ are real boots on the built-in
simulated cluster (`cluster boot RECIPE --scale test --sim-fault 'rank=K:slow-read=2MB/s'`),
trimmed by keeping only what the postmortem reads (see that folder's README.md). On vLLM a
straggler's fault shows only in its peers' NCCL watchdogs: the logs alone blamed the first
victim to print (rank 6, 1, 3 in the three vLLM runs).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.models.base import StrictModel
from orchestrator.models.events import RECORD, VerdictRecord, WatcherWarning
from orchestrator.models.run import NodeBack, NodeLost, Outcome, RankStarted
from orchestrator.postmortem import postmortem_logs, postmortem_run
from orchestrator.postmortem.blame import (
    Candidate,
    from_measured,
    served_after_the_end,
    weigh_measured,
)
from orchestrator.postmortem.collect import rank_logs
from orchestrator.postmortem.measured import Measured, SampleRow, measured_from
from orchestrator.postmortem.model import Diagnosis, Evidence, Hit, RankFacts
from orchestrator.runstore import RunStore

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "postmortem" / "measured"
STRAGGLERS = {
    "vllm-straggler-r0": 0,
    "vllm-straggler-r3": 3,
    "vllm-straggler-r5": 5,
    "sglang-straggler-r0": 0,
    "sglang-straggler-r3": 3,
}


def diagnose_dir(path: Path) -> Diagnosis:
    return postmortem_run(RunStore(path.parent).open(path), workers=1)


@pytest.mark.parametrize("name", sorted(STRAGGLERS))
def test_a_slow_reader_is_blamed_not_the_first_victim_to_print(name: str) -> None:
    k = STRAGGLERS[name]
    d = diagnose_dir(FIXTURES / name)
    assert d.first_failing_rank == k, d.verdict
    assert d.root_cause is not None
    # the straggler's cause category (slow reads), not the victims' watchdog
    assert d.root_cause.category == "load-barrier-timeout"
    # samples and logs agree: it read slowly and never printed `Load weight end`
    assert d.root_cause.confidence == "high"
    assert sorted(d.cascade_ranks) == [x for x in range(8) if x != k]
    title = d.root_cause.title
    assert "% of its weights when ranks" in title and "failed waiting" in title, title
    assert "slow reads" in title and "disk or page cache" in title, title
    # what decided it is evidence with its place: a sample line and the supervisor's warning
    files = {e.file for e in d.root_cause.evidence}
    assert f"rank-{k}/samples.jsonl" in files, files
    warned = [e for e in d.root_cause.evidence if e.file == "events.jsonl" and "will" in e.text]
    assert warned and warned[0].rank == k
    assert f"Rank {k} (sim-node{k}) failed first" in d.verdict
    assert "The supervisor warned at" in d.verdict


def test_the_logs_path_without_a_run_directory_keeps_its_answer() -> None:
    """--logs has no measurements: the answer is the logs' own (the first victim, low)."""
    run = FIXTURES / "vllm-straggler-r3"
    paths = [p for k in range(8) for p in rank_logs(run / f"rank-{k}")]
    named = []
    for p in paths:  # loose files named by rank, as a ticket would hold them
        named.append(p)
    d = postmortem_logs(named, workers=1)
    assert d.source.measured is None
    assert d.root_cause is not None and d.root_cause.confidence == "low"
    assert d.root_cause.category == "watchdog-timeout"


# -- every rank position: the same run with the straggler's place swapped -------------------------


def swapped(src: Path, dst: Path, a: int, b: int) -> Path:
    """A copy of run `src` with ranks a and b trading places (folders, events, status)."""
    shutil.copytree(src, dst)
    if a == b:
        return dst
    (dst / f"rank-{a}").rename(dst / "tmp")
    (dst / f"rank-{b}").rename(dst / f"rank-{a}")
    (dst / "tmp").rename(dst / f"rank-{b}")
    swap = {a: b, b: a}
    lines = []
    for line in (dst / "events.jsonl").read_text().splitlines():
        doc = json.loads(line)
        if isinstance(doc.get("rank"), int):
            doc["rank"] = swap.get(doc["rank"], doc["rank"])
        lines.append(json.dumps(doc))
    (dst / "events.jsonl").write_text("\n".join(lines) + "\n")
    status = json.loads((dst / "status.json").read_text())
    for row in status["ranks"]:
        row["rank"] = swap.get(row["rank"], row["rank"])
        row["node"] = f"sim-node{row['rank']}"
    (dst / "status.json").write_text(json.dumps(status))
    return dst


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("k", range(8))
def test_the_straggler_is_named_at_every_rank_position(tmp_path: Path, engine: str, k: int) -> None:
    run = swapped(FIXTURES / f"{engine}-straggler-r3", tmp_path / "run", 3, k)
    d = diagnose_dir(run)
    assert d.first_failing_rank == k, d.verdict
    assert d.root_cause is not None and d.root_cause.category == "load-barrier-timeout"
    assert k not in d.cascade_ranks and len(d.cascade_ranks) == 7


# -- the pure weighing, on measurements built by hand --------------------------------------------

T0 = 1_800_000_000.0
MB = 1_000_000


def facts(k: int, *, loaded_at: float | None = None, hits: tuple[Hit, ...] = ()) -> RankFacts:
    markers = {}
    if loaded_at is not None:
        markers["load_end"] = Evidence(
            file=f"rank-{k}/stderr.log", line=5, text="Load weight end.", ts=loaded_at, rank=k
        )
    return RankFacts(
        rank=k,
        node=f"n{k}",
        lines=10,
        phase="loaded" if loaded_at is not None else "loading",
        markers=markers,
        hits=hits,
        last_line=Evidence(file=f"rank-{k}/stderr.log", line=9, text="...", ts=T0 + 30, rank=k),
    )


def echo(k: int, ts: float) -> Hit:
    ev = Evidence(file=f"rank-{k}/stderr.log", line=7, text="Watchdog caught", ts=ts, rank=k)
    return Hit(
        signature="nccl-watchdog-collective-timeout",
        category="watchdog-timeout",
        role="cascade",
        evidence=ev,
    )


def samples(
    rate: float, *, until: float = T0 + 40, start: float = T0
) -> list[tuple[int, SampleRow]]:
    rows = []
    t, n = start, 1
    while t <= until:
        rows.append((n, SampleRow(ts=t, rchar=int((t - start) * rate))))
        t += 2.0
        n += 1
    return rows


def measured(
    events: Sequence[StrictModel], per_rank: dict[int, list[tuple[int, SampleRow]]], ranks: int = 4
) -> Measured:
    numbered = [(n, RECORD.validate_python(e.model_dump())) for n, e in enumerate(events, 1)]
    return measured_from(numbered, per_rank, ranks=range(ranks), expected_bytes=100 * MB)


def started(offsets: dict[int, float]) -> list[StrictModel]:
    return [RankStarted(ts=T0 + dt, rank=k, container=f"c{k}") for k, dt in offsets.items()]


def weigh(m: Measured, ranks: list[RankFacts], root: Candidate | None = None) -> Candidate | None:
    hits = {r.rank: list(r.hits) for r in ranks}
    failed = {r.rank for r in ranks if r.hits}
    return weigh_measured(root, from_measured(m, ranks, hits, failed), ranks)


@pytest.mark.parametrize("k", range(4))
def test_a_node_lost_before_the_others_failed_is_blamed_on_the_network(k: int) -> None:
    others = [x for x in range(4) if x != k]
    per = {x: samples(10 * MB) for x in others}
    per[k] = samples(10 * MB, until=T0 + 12)  # its samples stop at 12 s
    events = [*started(dict.fromkeys(range(4), 0.0))]
    events.append(NodeLost(ts=T0 + 18, rank=k, reason="ssh: connection lost"))
    ranks = [facts(x, hits=(echo(x, T0 + 25),)) for x in others] + [facts(k)]
    got = weigh(measured(events, per), sorted(ranks, key=lambda r: r.rank))
    assert got is not None and got.rank == k
    assert got.category == "rendezvous-network"
    assert "went silent" in got.title and "network" in got.title
    assert any(e.file == "events.jsonl" and "node_lost" in e.text for e in got.evidence)


def test_a_node_back_after_a_loss_is_not_blamed_and_a_loss_after_the_cascade_is_not_the_cause() -> (
    None
):
    per = {x: samples(10 * MB) for x in range(4)}
    events = [*started(dict.fromkeys(range(4), 0.0))]
    events += [NodeLost(ts=T0 + 5, rank=1, reason="x"), NodeBack(ts=T0 + 7, rank=1)]
    events.append(NodeLost(ts=T0 + 38, rank=2, reason="gone with the others"))
    ranks = [facts(x, loaded_at=T0 + 15, hits=(echo(x, T0 + 25),)) for x in range(4)]
    assert weigh(measured(events, per), ranks) is None


@pytest.mark.parametrize("k", range(4))
def test_samples_that_stop_while_the_others_go_on_are_a_silent_node(k: int) -> None:
    per = {x: samples(10 * MB) for x in range(4)}
    per[k] = samples(10 * MB, until=T0 + 10)
    ranks = [facts(x, hits=(echo(x, T0 + 25),)) if x != k else facts(x) for x in range(4)]
    got = weigh(measured([], per), ranks)
    assert got is not None and (got.rank, got.category) == (k, "rendezvous-network")
    assert got.evidence[0].file == f"rank-{k}/samples.jsonl"


@pytest.mark.parametrize("k", range(4))
def test_a_rank_started_late_is_blamed_with_its_delay(k: int) -> None:
    offsets = dict.fromkeys(range(4), 0.0)
    offsets[k] = 30.0
    per = {x: samples(10 * MB) for x in range(4)}
    per[k] = samples(10 * MB, start=T0 + 30, until=T0 + 40)
    ranks = [
        facts(x, loaded_at=T0 + 12, hits=(echo(x, T0 + 35),)) if x != k else facts(x)
        for x in range(4)
    ]
    got = weigh(measured(started(offsets), per), ranks)
    assert got is not None and got.rank == k
    assert "it started 30 s after the others" in got.title
    assert got.evidence[0].text.startswith(f"rank_started: rank {k}")


@pytest.mark.parametrize("k", range(4))
def test_measured_and_printed_agreeing_is_high_and_disagreeing_says_both(k: int) -> None:
    per = {x: samples(10 * MB) for x in range(4)}
    per[k] = samples(1 * MB)  # 10x slower: at ~25 % when the others fail
    ranks = [
        facts(x, loaded_at=T0 + 10, hits=(echo(x, T0 + 25),)) if x != k else facts(x)
        for x in range(4)
    ]
    victim = next(x for x in range(4) if x != k)
    logs_said = Candidate(
        rank=victim,
        strength=0,
        ts=T0 + 25,
        category="watchdog-timeout",
        signature="nccl-watchdog-collective-timeout",
        title="torch's NCCL watchdog timed out a collective",
        confidence="low",
        reason="only consequences were found",
    )
    got = weigh(measured([], per), ranks, logs_said)
    assert got is not None and got.rank == k and got.confidence == "high"
    assert got.category == "load-barrier-timeout"
    assert "at 24% of its weights" in got.title and "slow reads" in got.title, got.title
    assert f"by the logs alone rank {victim}" in got.reason
    # A cause the victim printed itself (an OOM) is not overruled by a rank that was merely
    # still loading when it struck: the blame and its confidence stand, the reason adds it.
    oom = Candidate(
        rank=victim,
        strength=3,
        ts=T0 + 20,
        category="out-of-memory",
        signature="cuda-oom",
        title="CUDA out of memory",
        confidence="high",
        reason="CUDA out of memory",
    )
    kept = weigh(measured([], per), ranks, oom)
    assert kept is not None and kept.rank == victim and kept.category == "out-of-memory"
    assert kept.confidence == "high"
    assert f"the supervisor also measured: rank {k} was at" in kept.reason


@pytest.mark.parametrize("k", range(4))
def test_a_node_lost_before_a_printed_cause_elsewhere_is_said_beside_it(k: int) -> None:
    """The logs name an OOM on another rank, but rank k's node went silent before it: the
    printed cause keeps the blame, trusted less, and the reason says both."""
    victim = (k + 1) % 4
    per = {x: samples(10 * MB) for x in range(4)}
    per[k] = samples(10 * MB, until=T0 + 10)
    events = [NodeLost(ts=T0 + 14, rank=k, reason="ssh: connection lost")]
    ranks = [facts(x, hits=(echo(x, T0 + 25),)) if x != k else facts(x) for x in range(4)]
    oom = Candidate(
        rank=victim,
        strength=3,
        ts=T0 + 20,
        category="out-of-memory",
        signature="cuda-oom",
        title="CUDA out of memory",
        confidence="high",
        reason="CUDA out of memory",
    )
    got = weigh(measured(events, per), ranks, oom)
    assert got is not None and (got.rank, got.category) == (victim, "out-of-memory")
    assert got.confidence == "medium"
    assert f"the supervisor's measurements point at rank {k} instead" in got.reason


def test_no_measurement_of_its_own_leaves_the_logs_answer() -> None:
    """Logs alone show a rank behind (no `Load weight end`), but nothing was sampled and no
    warning named it: the measurements add nothing and the logs' answer stands."""
    ranks = [facts(x, loaded_at=T0 + 10, hits=(echo(x, T0 + 25),)) for x in range(3)]
    ranks.append(facts(3))
    assert (
        from_measured(measured([], {}), ranks, {r.rank: list(r.hits) for r in ranks}, {0, 1, 2})
        is None
    )


def test_a_warning_before_the_failure_names_a_rank_even_without_samples() -> None:
    warn = WatcherWarning(
        ts=T0 + 8,
        watcher="vllm-ready",
        severity="warning",
        rank=2,
        message="rank 2 (n2) will finish loading after vLLM's engine-ready deadline by ~240 s",
    )
    ranks = [facts(x, loaded_at=T0 + 10, hits=(echo(x, T0 + 25),)) for x in (0, 1, 3)]
    ranks.insert(2, facts(2))
    got = weigh(measured([warn], {}), ranks)
    assert got is not None and got.rank == 2
    assert "the supervisor had warned at" in got.reason
    assert any("engine-ready deadline" in e.text for e in got.evidence)


def test_samples_read_back_monotonic_and_a_torn_line_is_skipped(tmp_path: Path) -> None:
    from orchestrator.postmortem.collect import _samples

    path = tmp_path / "samples.jsonl"
    path.write_text(
        '{"ts": 1, "rchar": 10, "mem_free": 5, "new_field": 1}\n'
        '{"ts": 3, "rchar": 4}\n'  # a reader child exited: its count left with it
        '{"ts": 5, "rch'  # torn by a crash
    )
    notes: list[str] = []
    rows = _samples(path, notes)
    assert [n for n, _ in rows] == [1, 2] and not notes
    m = measured_from([], {0: rows}, ranks=[0], expected_bytes=20)
    assert [r.bytes_read for r in m.ranks[0].readings] == [10, 10]
    assert m.fraction_at(0, 4.0) == 0.5


def test_a_late_start_that_spent_the_ready_deadline_is_blamed_though_no_rank_failed() -> None:
    """A real boot whose rank 5 start was held back 20 s (tests/sim: the process runtime's start
    delayed, as a slow image unpack delays `docker run`); ranks 6-7 queued behind it. Nobody
    printed an error; the supervisor ended the boot with READY_TIMEOUT."""
    d = diagnose_dir(FIXTURES / "vllm-late-start-r5")
    assert d.first_failing_rank == 5, d.verdict
    assert d.root_cause is not None and d.root_cause.confidence == "medium"
    assert "it started 20 s after the others" in d.root_cause.title
    assert "ranks 5-7 all started late" in d.root_cause.title
    assert d.root_cause.evidence[0].text.startswith("rank_started: rank 5")


def ready_timeout_first(src: Path, dst: Path, decided: str) -> Path:
    """A copy of run `src` as if the supervisor's ready deadline had run out at `decided`
    (UTC, `YYYY-MM-DDTHH:MM:SS`), before any rank failed: every log line, sample and event after
    it dropped, no rank exited, the verdict READY_TIMEOUT on rank 0."""
    shutil.copytree(src, dst)
    at = datetime.fromisoformat(decided).replace(tzinfo=UTC).timestamp()
    for rank_dir in dst.glob("rank-*"):
        (rank_dir / "exit.json").unlink(missing_ok=True)
        for log in ("stdout.log", "stderr.log"):
            lines = (rank_dir / log).read_text().splitlines(keepends=True)
            (rank_dir / log).write_text("".join(x for x in lines if x[:19] <= decided))
        rows = (rank_dir / "samples.jsonl").read_text().splitlines(keepends=True)
        (rank_dir / "samples.jsonl").write_text(
            "".join(x for x in rows if json.loads(x)["ts"] <= at)
        )
    events = [
        x
        for x in (dst / "events.jsonl").read_text().splitlines()
        if json.loads(x).get("ts", 0) <= at and json.loads(x).get("kind") != "rank_exited"
    ]
    verdict = VerdictRecord(
        ts=at + 1,
        watcher="ready",
        severity="verdict",
        rank=0,
        message="not ready after 22 s (timeouts.ready)",
        outcome=Outcome.READY_TIMEOUT,
        decided_at=at,
    )
    events.append(verdict.model_dump_json())
    (dst / "events.jsonl").write_text("\n".join(events) + "\n")
    doc = json.loads((dst / "verdict.json").read_text())
    doc.update(outcome="READY_TIMEOUT", rank=0, summary=verdict.message)
    (dst / "verdict.json").write_text(json.dumps(doc))
    return dst


def test_a_straggler_still_reading_when_the_ready_deadline_ran_out_is_blamed_with_its_reads(
    tmp_path: Path,
) -> None:
    """The stored vLLM run whose head read at 2 MB/s, had the supervisor's ready deadline run out
    before the peers' NCCL watchdogs fired (their order on a busy 2-core CI host: seen in CI,
    where the logs alone then said only "rank 0 was still loading", low). No rank failed; the
    measured reads still name the cause, and nobody is a cascade: the others loaded and waited."""
    run = ready_timeout_first(
        FIXTURES / "vllm-straggler-r0", tmp_path / "run", "2026-12-03T07:11:01"
    )
    d = diagnose_dir(run)
    assert d.first_failing_rank == 0, d.verdict
    assert d.root_cause is not None
    assert (d.root_cause.category, d.root_cause.confidence) == ("load-barrier-timeout", "high")
    title = d.root_cause.title
    assert "when the boot's deadline ran out (READY_TIMEOUT, 07:11:01 UTC)" in title, title
    assert "slow reads" in title and "disk or page cache" in title, title
    assert d.cascade_ranks == ()
    assert any(e.file == "rank-0/samples.jsonl" for e in d.root_cause.evidence)


def test_a_deadline_with_no_rank_behind_blames_nobody_by_measurement(tmp_path: Path) -> None:
    """The same deadline, cut before rank 0 fell behind (the others still loading too): no
    measurement singles a rank out, so the measured blame stays silent."""
    run = ready_timeout_first(
        FIXTURES / "vllm-straggler-r0", tmp_path / "run", "2026-12-03T07:10:44"
    )
    d = diagnose_dir(run)
    assert d.root_cause is None or "deadline ran out" not in d.root_cause.title, d.verdict


def test_a_deadline_that_caught_every_rank_loading_names_the_one_far_behind(
    tmp_path: Path,
) -> None:
    """Seen in CI on a busy host: the ready deadline ran out while the others were at the end of
    their reads, before any printed its load end, and the vLLM rank reading at 2 MB/s had read a
    tenth of its weights. The logs alone show eight ranks loading; the reads name rank 3, and the
    title says how far the others had come instead of claiming they had loaded."""
    run = ready_timeout_first(
        FIXTURES / "vllm-straggler-r3", tmp_path / "run", "2026-12-03T07:06:56"
    )
    d = diagnose_dir(run)
    assert d.first_failing_rank == 3, d.verdict
    assert d.root_cause is not None and d.root_cause.category == "load-barrier-timeout"
    title = d.root_cause.title
    assert "it was at 10% of its weights when the boot's deadline ran out" in title, title
    assert "while the others had read 76% of theirs" in title and "slow reads" in title, title
    assert "with the others loaded" not in title, title
    assert any(e.file == "rank-3/samples.jsonl" for e in d.root_cause.evidence)


def test_a_node_cut_mid_load_is_named_from_its_silence_on_the_testbed() -> None:
    """A real boot on the netns testbed (tests/netns/test_postmortem_netns.py): every rank read
    at 3 MB/s, node 5 lost both links mid-load, the boot ended on NODE_LOST before anyone
    failed. Only the supervisor saw it (its verdict and its measurements are one witness, so
    the confidence is medium, not high)."""
    d = diagnose_dir(FIXTURES / "netns-node-cut-r5")
    assert d.first_failing_rank == 5, d.verdict
    assert d.root_cause is not None
    assert (d.root_cause.category, d.root_cause.confidence) == ("rendezvous-network", "medium")
    assert d.root_cause.title.startswith("its node went silent at")
    assert "the boot ended on it" in d.root_cause.title
    assert "the supervisor's verdict names it too" in d.root_cause.reason
    assert any("node_lost" in e.text for e in d.root_cause.evidence)


def test_a_head_up_only_after_the_ready_deadline_is_not_ready_and_the_late_start_is_blamed() -> (
    None
):
    """A real boot on the netns testbed (tests/netns/test_blame_netns.py's drill, held back
    15 s instead of 25): rank 5's `docker run` waited 15 s, the others waited for it in torch's
    init, the supervisor ended the boot with READY_TIMEOUT at 12:03:44, and the head printed
    `Starting vLLM server` at 12:03:48 while its logs were being saved. Before: `ready`, no
    rank (the head's serving line); after: rank 5, started 15 s late."""
    d = diagnose_dir(FIXTURES / "netns-vllm-late-start-r5")
    assert d.category != "ready" and d.first_failing_rank == 5, d.verdict
    assert d.root_cause is not None
    assert d.root_cause.title.startswith("it started 15 s after the others"), d.root_cause.title
    assert "(READY_TIMEOUT)" in d.root_cause.title
    assert d.root_cause.evidence[0].text.startswith("rank_started: rank 5")
    [note] = [n for n in d.notes if "reached serving" in n]
    assert note.startswith("rank 0 reached serving at 12:03:48 UTC (rank-0/stdout.log:")
    assert "4 s after the supervisor ended the boot with READY_TIMEOUT at 12:03:44 UTC" in note
    assert not [n for n in d.notes if "no rank reached serving" in n], d.notes


def serving_facts(k: int, at: float) -> RankFacts:
    line = Evidence(file=f"rank-{k}/stdout.log", line=9, text="Starting vLLM server", ts=at, rank=k)
    return RankFacts(rank=k, phase="serving", markers={"ready": line}, last_line=line)


@pytest.mark.parametrize(
    ("outcome", "served_at", "too_late"),
    [
        ("READY_TIMEOUT", T0 + 50, True),  # up 10 s after the supervisor gave up
        ("READY_TIMEOUT", T0 + 39, False),  # up before it decided: the logs' `ready` stands
        ("READY", T0 + 50, False),
        ("INTERRUPTED", T0 + 50, False),  # an operator's stop is not a deadline
    ],
)
def test_serving_counts_as_ready_only_before_the_supervisor_ended_the_boot(
    outcome: str, served_at: float, too_late: bool
) -> None:
    decided = VerdictRecord(
        ts=T0 + 45,
        decided_at=T0 + 40,
        rank=0,
        watcher="ready",
        severity="verdict",
        message="not ready after 24 s (timeouts.ready)",
        outcome=Outcome(outcome),
    )
    m = measured([decided], {})
    assert m.decided is not None and m.decided.ts == T0 + 40
    note = served_after_the_end(m, [serving_facts(0, served_at)], {"outcome": outcome})
    assert (note is not None) is too_late, note
    if note is not None:
        assert "10 s after the supervisor ended the boot with READY_TIMEOUT" in note
    # the logs path has no measurements: its answer is its own
    assert served_after_the_end(None, [serving_facts(0, served_at)], {"outcome": outcome}) is None
