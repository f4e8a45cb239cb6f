"""The systemd user unit `cluster supervise RUN --systemd-unit` prints, read by systemd's own
parser (`systemd-analyze verify`, from the systemd package that .ci/system-deps.sh installs): a
unit systemd would refuse or half-ignore (an unknown key is only a warning) keeps no watcher
alive across a controller reboot, whatever the docs say."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.errors import ExitCode
from orchestrator.run.watch import systemd_unit
from orchestrator.runstore import RunStore


def verify(unit: Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.fail("systemd-analyze is missing: run `bash .ci/system-deps.sh` (package systemd)")
    return subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=60)


def test_the_printed_unit_is_one_systemd_reads_without_a_word_of_complaint(tmp_path, monkeypatch):
    run = RunStore(tmp_path / "runs").create()
    (tmp_path / "inv.yml").write_text("all: {}\n")
    monkeypatch.chdir(tmp_path)
    text = systemd_unit(run, "inv.yml")
    unit = tmp_path / "cluster-watch.service"
    unit.write_text(text)
    checked = verify(unit)
    assert checked.returncode == 0 and checked.stderr.strip() == "", checked.stderr
    # systemd starts the unit in the user's home: the inventory is named by its absolute path.
    assert f"-i {tmp_path / 'inv.yml'}" in text
    assert f"supervise {run.dir}" in text


def test_the_unit_restarts_a_crashed_watcher_but_not_one_that_ended_on_a_final_incident(tmp_path):
    run = RunStore(tmp_path).create()
    keys = dict(line.split("=", 1) for line in systemd_unit(run).splitlines() if "=" in line[:40])
    assert keys["Restart"] == "on-failure"  # a crash (exit 1) or a kill comes back
    kept_down = {int(c) for c in keys["RestartPreventExitStatus"].split()}
    assert kept_down == {int(ExitCode.BOOT_FAILED), int(ExitCode.CONFIG), int(ExitCode.RUN_STORE)}
    assert int(ExitCode.INTERNAL) not in kept_down
    # No storm: systemd gives up after 5 starts in 10 minutes.
    assert (keys["StartLimitBurst"], keys["StartLimitIntervalSec"]) == ("5", "600")


def test_a_unit_systemd_would_half_ignore_is_caught(tmp_path):
    """The check above can fail: a misspelt key is only a warning to systemd, but not here."""
    unit = tmp_path / "bad.service"
    unit.write_text(
        systemd_unit(RunStore(tmp_path).create()).replace("RestartSec=", "RestartSecs=")
    )
    checked = verify(unit)
    assert "Unknown key" in checked.stderr
