"""The run store: layout, atomic status, append-only events, the supervisor lock, redaction."""

from __future__ import annotations

import json
import os
import stat
import time
from datetime import UTC, datetime

import pytest

from orchestrator.errors import RunLocked, RunStoreError
from orchestrator.models.events import (
    FollowInterrupted,
    NcclCheck,
    Preflight,
    Resumed,
    Smoke,
    Step,
    Stopped,
    VerdictRecord,
    WatcherWarning,
)
from orchestrator.models.run import (
    Finding,
    HeadReady,
    NodeBack,
    NodeLost,
    Outcome,
    RankExited,
    RankStarted,
)
from orchestrator.runstore import REDACTED, RUN_ID_RE, RunStore, redact
from tests.run_manifests import write_a_manifest


def test_a_new_run_gets_a_time_ordered_id_valid_in_container_names(tmp_path):
    store = RunStore(tmp_path / "runs")
    run = store.create(datetime(2026, 11, 29, 15, 31, 25, tzinfo=UTC))
    assert run.id.startswith("20261129T153125Z-")
    assert RUN_ID_RE.match(run.id)
    assert run.id.replace("-", "").isalnum()  # docker names: [a-zA-Z0-9][a-zA-Z0-9_.-]
    assert stat.S_IMODE(run.dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(run.rank_dir(3).stat().st_mode) == 0o700
    assert (run.dir / "rank-3").is_dir()


def test_runs_are_listed_newest_first_and_found_by_id_or_path(tmp_path):
    store = RunStore(tmp_path)
    old = store.create(datetime(2026, 1, 1, tzinfo=UTC))
    new = store.create(datetime(2026, 6, 1, tzinfo=UTC))
    (tmp_path / "not-a-run").mkdir()
    assert [r.id for r in store.runs()] == [new.id, old.id]
    assert store.latest() == new
    assert store.open(old.id) == old
    assert store.open(str(old.dir)).dir == old.dir
    with pytest.raises(RunStoreError, match="no run"):
        store.open("20200101T000000Z-abcdef")


def test_events_append_one_line_each_and_a_torn_last_line_is_skipped(tmp_path):
    run = RunStore(tmp_path).create()
    run.append_event(Step(step="preflight", detail="8 nodes"))
    run.append_event(RankStarted(ts=12.5, rank=1, container="cluster-x-r1"))
    with run.events_path.open("a") as fh:
        fh.write('{"kind": "half')  # a crash mid-write
    records = list(run.events())
    assert [type(e) for e in records] == [Step, RankStarted]
    assert records[1] == RankStarted(ts=12.5, rank=1, container="cluster-x-r1")
    assert abs(records[0].ts - time.time()) < 60  # epoch seconds, stamped when written
    assert len(run.events_path.read_text().splitlines()) == 3


def test_every_record_kind_round_trips_through_the_file_as_itself(tmp_path):
    run = RunStore(tmp_path).create()
    finding = Finding(watcher="barrier", severity="warning", rank=5, message="rank 5 is late")
    verdict = Finding(
        watcher="exits", severity="verdict", rank=2, message="m", outcome=Outcome.RANK_EXITED
    )
    written = [
        Step(step="start", detail="8 ranks"),
        Resumed(bytes_preserved=10),
        FollowInterrupted(rank=1, reason="dropped"),
        WatcherWarning(**dict(finding)),
        VerdictRecord(decided_at=3.0, **dict(verdict)),
        Smoke(ok=True, endpoint="http://h:1", expected_model="m"),
        Preflight(ok=False, errors=1, warnings=0, problems=("error: n1: no image",)),
        NcclCheck(ok=False, culprits=(5,), elapsed_s=2.5),
        Stopped(began=4.0, saved=(0, 1), removed=("c0", "c1"), gone=()),
        RankExited(ts=1.0, rank=2, exit_code=1, oom_killed=True),
        NodeLost(ts=1.0, rank=3, reason="timeout"),
        NodeBack(ts=2.0, rank=3),
        HeadReady(ts=3.0, latency_s=0.1),
    ]
    for record in written:
        run.append_event(record)
    assert list(run.events()) == written
    # The file says `kind` on every line, flat: what programs (and the postmortem) read.
    lines = [json.loads(x) for x in run.events_path.read_text().splitlines()]
    assert [x["kind"] for x in lines][:4] == ["step", "resumed", "follow_interrupted", "warning"]
    assert lines[3]["watcher"] == "barrier" and lines[3]["rank"] == 5


def test_an_older_runs_iso_timestamps_and_a_newer_versions_kinds_are_read(tmp_path):
    run = RunStore(tmp_path).create()
    with run.events_path.open("w") as fh:
        fh.write('{"kind":"step","step":"twin","detail":"","ts":"2026-11-30T10:00:00+00:00"}\n')
        fh.write('{"kind":"from_the_future","ts":1.0}\n')
        fh.write('{"kind":"stopped","began":5.0,"saved":[0],"removed":[],"gone":[],"ts":6.0}\n')
    records = list(run.events())
    assert records[0] == Step(step="twin", ts=1796032800.0)
    assert records[1] == Stopped(began=5.0, saved=(0,), ts=6.0)


def test_status_is_replaced_atomically_and_leaves_no_temporary_files(tmp_path):
    run = RunStore(tmp_path).create()
    for i in range(20):
        run.write_status({"seq": i})
    assert run.read_status() == {"seq": 19}
    assert sorted(p.name for p in run.dir.iterdir()) == ["status.json"]


def test_secrets_are_redacted_in_every_writer(tmp_path):
    run = RunStore(tmp_path).create()
    env = {"HF_TOKEN": "hf_abc", "NCCL_SOCKET_IFNAME": "enp1s0f1np1", "WANDB_API_KEY": "k"}
    inspect = [{"Config": {"Env": ["HF_TOKEN=hf_abc", "PATH=/usr/bin", "MY_PASSWORD=pw"]}}]
    # The manifest's recipe: the same secrets, a plain value instead of the per-host one.
    recipe_env = {k: v for k, v in env.items() if k != "NCCL_SOCKET_IFNAME"}
    write_a_manifest(run, env={**recipe_env, "NCCL_DEBUG": "enp1s0f1np1"})
    run.append_event(
        Preflight(ok=False, errors=2, warnings=0, problems=tuple(inspect[0]["Config"]["Env"]))
    )
    run.write_status({"env": env})
    run.write_json("rank-0/inspect.json", inspect)
    for path in [
        run.manifest_path,
        run.events_path,
        run.status_path,
        run.dir / "rank-0/inspect.json",
    ]:
        text = path.read_text()
        assert "hf_abc" not in text and '"pw"' not in text and "=pw" not in text, path
        assert "enp1s0f1np1" in text or "PATH=/usr/bin" in text or path.name == "events.jsonl"
    manifest = json.loads(run.manifest_path.read_text())
    assert manifest["recipe"]["env"]["HF_TOKEN"] == REDACTED
    assert manifest["recipe"]["env"]["WANDB_API_KEY"] == REDACTED


def test_redaction_keeps_structure_and_non_secret_values():
    value = {"a": [{"API_KEY": "x", "n": 1}], "keys": ["ssh-ed25519 AAAA"], "ok": "fine"}
    assert redact(value) == {
        "a": [{"API_KEY": REDACTED, "n": 1}],
        "keys": ["ssh-ed25519 AAAA"],
        "ok": "fine",
    }


def test_a_live_supervisor_lock_stops_a_second_writer(tmp_path):
    run = RunStore(tmp_path).create()
    lock = run.acquire_lock()
    assert run.supervisor_alive()
    with pytest.raises(RunLocked, match=f"pid {os.getpid()}"):
        run.acquire_lock()
    lock.release()
    assert not run.supervisor_alive()
    run.acquire_lock().release()


def test_a_stale_heartbeat_or_a_dead_pid_frees_the_lock(tmp_path):
    run = RunStore(tmp_path).create()
    lock = run.acquire_lock()
    holder = json.loads(run.lock_path.read_text())
    assert not run.supervisor_alive(now=time.time() + 60)  # heartbeat too old
    holder["pid"] = 2**22 + 12345  # no such process on this host
    run.lock_path.write_text(json.dumps(holder))
    assert not run.supervisor_alive()
    run.acquire_lock()  # taken over
    lock.release()


def test_the_attempts_a_serving_restart_kept_are_listed_in_order_and_counted_by_runs(tmp_path):
    from orchestrator.run.logs import summarize

    run = RunStore(tmp_path).create()
    assert run.kept_attempts() == [] and summarize(run).restarts == 0
    for n in (10, 2, 0, 1):  # attempt-10 sorts after attempt-2: by number, not by name
        run.attempt_dir(n).mkdir()
    (run.dir / "attempt-notes.txt").write_text("a file, not an attempt")
    (run.dir / "attempt-old").mkdir()  # a folder someone named: not a kept attempt
    assert [p.name for p in run.kept_attempts()] == [
        "attempt-0",
        "attempt-1",
        "attempt-2",
        "attempt-10",
    ]
    assert summarize(run).restarts == 4
