"""`cluster status --json` on a run before its ranks: a document that says what the boot is
doing, not an error; a run that ended before any rank still says so, as an error."""

from __future__ import annotations

import json

from orchestrator.cli.main import main
from orchestrator.errors import ExitCode
from orchestrator.models.events import Step
from orchestrator.runstore import RunStore
from tests.run_manifests import write_a_manifest


def test_a_run_in_its_twin_step_is_a_booting_document_with_no_ranks(tmp_path, capsys):
    run = RunStore(tmp_path).create()
    run.append_event(Step(step="twin", detail="simulated twin at scale 1/480"))
    assert main(["status", "--json", "--run", str(run.dir)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["run_id"] == run.id and doc["ranks"] == [] and doc["phase"] == "booting"
    assert doc["phase_detail"].startswith("no ranks yet; twin simulated twin at scale 1/480")
    assert main(["status", "--format", "json", "--run", str(run.dir)]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"] == []


def test_a_run_that_ended_before_its_ranks_is_still_an_error_naming_the_postmortem(
    tmp_path, capsys
):
    run = RunStore(tmp_path).create()
    write_a_manifest(run, "x")
    run.write_json("verdict.json", {"outcome": "PREFLIGHT_REFUSED"})
    assert main(["status", "--json", "--run", str(run.dir)]) == ExitCode.RUN_STORE
    err = capsys.readouterr().err
    assert "never got past preflight" in err and "cluster postmortem" in err
