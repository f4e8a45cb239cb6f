"""The typed run directory: manifest.json and verdict.json through runstore only, earlier
releases' files upgraded, a verdict written once, and the run's lock with its stop request."""

from __future__ import annotations

import asyncio
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.errors import ExitCode, RunLocked, RunStoreError
from orchestrator.models.run import Finding, Outcome
from orchestrator.postmortem.blame import outcome_category
from orchestrator.run_files import SCHEMA_VERSION, Verdict
from orchestrator.runstore import HEARTBEAT_S, Run, RunStore, VerdictExists
from tests.run_manifests import write_a_manifest

STORED = Path(__file__).resolve().parents[2] / "fixtures" / "run-files"


def earlier_run(tmp_path: Path) -> Run:
    """A run directory exactly as the release before the typed run directory wrote it
    (made by that release's own write_manifest/write_verdict, commit 196b32d)."""
    d = tmp_path / "20261201T000000Z-abcdef"
    d.mkdir()
    shutil.copy(STORED / "v1-manifest.json", d / "manifest.json")
    shutil.copy(STORED / "v1-verdict.json", d / "verdict.json")
    return Run(d.name, d)


def test_an_earlier_releases_run_directory_reads_through_the_upgrade_step(tmp_path):
    run = earlier_run(tmp_path)
    assert "schema_version" not in json.loads(run.manifest_path.read_text())
    manifest = run.manifest()
    assert manifest.schema_version == SCHEMA_VERSION
    assert manifest.recipe.name == "mistral-large4-8x-sglang" and manifest.real_recipe
    assert manifest.plans.launch is not None and len(manifest.plans.launch.ranks) == 8
    assert manifest.plans.rendezvous is not None
    assert [n.name for n in manifest.inventory.nodes] == [f"spark-{k}" for k in range(8)]
    verdict = run.verdict()
    assert verdict is not None and verdict.outcome is Outcome.RENDEZVOUS_STALLED
    assert (verdict.rank, verdict.summary, verdict.repaired_bytes) == (
        3,
        "ranks 5-7 had not joined",
        12,
    )
    assert verdict.category == "rendezvous-network" and verdict.exit_code == ExitCode.BOOT_FAILED


def test_a_verdict_that_said_message_before_summary_still_reads(tmp_path):
    run = RunStore(tmp_path).create()
    run.verdict_path.write_text(json.dumps({"outcome": "SMOKE_FAILED", "message": "no reply"}))
    verdict = run.verdict()
    assert verdict is not None and verdict.summary == "no reply"
    assert verdict.category == "smoke-failed"  # from the outcome, never a stored copy


def test_a_newer_or_broken_file_is_one_clear_error_naming_it(tmp_path):
    run = RunStore(tmp_path).create()
    run.verdict_path.write_text(json.dumps({"schema_version": 99, "outcome": "READY"}))
    with pytest.raises(RunStoreError, match=r"verdict\.json does not read: .*schema_version 99"):
        run.verdict()
    run.manifest_path.write_text(json.dumps({"run_id": "x"}))
    with pytest.raises(RunStoreError, match=r"manifest\.json does not read"):
        run.manifest()


def test_the_category_comes_from_the_outcome_for_every_outcome():
    # The postmortem's fallback once held a shorter copy of this table.
    for outcome in Outcome:
        assert outcome_category(outcome.value) == outcome.category
        assert outcome_category(outcome.value.lower()) == outcome.category
    assert outcome_category("SOMETHING_NEW") == "unknown"
    assert outcome_category(Outcome.RENDEZVOUS_STALLED) == "rendezvous-network"


def finding(outcome: Outcome) -> Finding:
    return Finding(watcher="t", severity="verdict", rank=1, message="m", outcome=outcome)


def test_a_final_verdict_is_written_once_and_a_serving_one_may_be_ended(tmp_path):
    run = RunStore(tmp_path).create()
    run.write_verdict(Verdict.of(finding(Outcome.RENDEZVOUS_STALLED)))
    with pytest.raises(VerdictExists, match="already has its verdict RENDEZVOUS_STALLED"):
        run.write_verdict(Verdict.of(finding(Outcome.READY_TIMEOUT)))
    assert run.verdict().outcome is Outcome.RENDEZVOUS_STALLED  # type: ignore[union-attr]
    on_disk = json.loads(run.verdict_path.read_text())
    assert on_disk["exit_code"] == 6 and on_disk["category"] == "rendezvous-network"

    serving = RunStore(tmp_path / "b").create()
    serving.write_verdict(Verdict.of(finding(Outcome.READY)))
    serving.write_verdict(Verdict.of(finding(Outcome.STOPPED)))
    assert serving.verdict().outcome is Outcome.STOPPED  # type: ignore[union-attr]
    with pytest.raises(VerdictExists):
        serving.write_verdict(Verdict.of(finding(Outcome.READY)))


def test_stopped_has_its_own_exit_code():
    assert Outcome.STOPPED.exit_code == ExitCode.STOPPED == 7
    assert not Outcome.STOPPED.serving and Outcome.SMOKE_FAILED.serving


def test_the_run_is_held_from_its_first_second_and_a_stop_request_reaches_the_holder(tmp_path):
    run = RunStore(tmp_path).create()
    write_a_manifest(run)
    lock = run.acquire_lock("boot")
    with pytest.raises(RunLocked, match=r"held by its boot \(pid \d+ on .* since \d\d:\d\d:\d\d"):
        run.acquire_lock()
    asked: list[float] = []

    async def hold() -> None:
        async with lock.held(on_stop=lambda: asked.append(1.0)):
            run.request_stop(by="test")
            for _ in range(int(10 * HEARTBEAT_S / 0.1)):
                await asyncio.sleep(0.1)
                if asked:
                    break

    asyncio.run(hold())
    assert asked == [1.0]  # once, from the heartbeat
    assert run.lock_holder() is None and not run.supervisor_alive()  # released at the end
    run.acquire_lock().release()  # free again


def test_verdict_document_has_the_derived_fields():
    v = Verdict(outcome=Outcome.NODE_LOST, summary="s", finished=datetime.now(UTC))
    doc = v.document()
    assert doc["exit_code"] == 6 and doc["category"] == "rendezvous-network"
    assert doc["outcome"] == "NODE_LOST" and doc["schema_version"] == SCHEMA_VERSION


def test_each_ranks_image_is_recorded_from_the_push_and_shown_by_status_wide():
    from types import SimpleNamespace

    from orchestrator.cli.operate import image_lines
    from orchestrator.run.boot import rank_images
    from tests.unit.plan.test_rendezvous import spark_inventory

    inv = spark_inventory(8)
    names = [n.name for n in inv.nodes]
    pushed = SimpleNamespace(
        nodes=[
            SimpleNamespace(node=names[0], image_id="sha256:aa", config_digest="sha256:cc"),
            SimpleNamespace(node=names[1], image_id="sha256:aa", config_digest="sha256:cc"),
            SimpleNamespace(node=names[2], image_id="sha256:bb", config_digest="sha256:cc"),
        ]
    )
    images = rank_images(pushed, inv)  # type: ignore[arg-type]
    assert [(i.rank, i.image_id) for i in images] == [
        (0, "sha256:aa"),
        (1, "sha256:aa"),
        (2, "sha256:bb"),
        *((k, None) for k in range(3, 8)),
    ]
    assert image_lines(images) == [
        "image: ranks 0-1: id sha256:aa, config sha256:cc",
        "image: ranks 2: id sha256:bb, config sha256:cc",
        "image: ranks 3-7: id ?, config hidden by its store",
    ]
    assert image_lines(())[0].startswith("image: not recorded")
