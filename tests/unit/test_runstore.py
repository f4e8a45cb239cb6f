"""The run store: layout, atomic status, append-only events, the supervisor lock, redaction."""

from __future__ import annotations

import json
import os
import stat
import time
from datetime import UTC, datetime

import pytest

from orchestrator.errors import RunLocked, RunStoreError
from orchestrator.runstore import REDACTED, RUN_ID_RE, RunStore, redact


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
    run.append_event({"kind": "connect", "node": "a"})
    run.append_event({"kind": "rank_started", "rank": 1})
    with run.events_path.open("a") as fh:
        fh.write('{"kind": "half')  # a crash mid-write
    kinds = [e["kind"] for e in run.events()]
    assert kinds == ["connect", "rank_started"]
    assert all("ts" in e for e in run.events())


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
    run.write_manifest({"env": env, "argv": ["docker", "run", "-e", "HF_TOKEN=hf_abc"]})
    run.append_event({"kind": "env", "env": env})
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
    assert manifest["env"]["HF_TOKEN"] == REDACTED
    assert manifest["argv"][-1] == f"HF_TOKEN={REDACTED}"


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
