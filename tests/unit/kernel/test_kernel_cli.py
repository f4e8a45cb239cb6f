"""`cluster postmortem --logs ... --kernel-log RANK=FILE` (issue 28): the on-call engineer pastes
a node's `journalctl -k` beside the rank logs, or drops it among them (told by its form)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from tests.engine_lines import by_id

KERNEL = Path(__file__).resolve().parents[2] / "fixtures" / "kernel"


def _logs(tmp_path: Path) -> list[Path]:
    """Two ranks: rank 0 times out in a collective (an echo), rank 1 printed nothing wrong."""
    watchdog = by_id("torch-nccl-watchdog-collective-timeout-vllm").text
    a = tmp_path / "rank-0.log"
    a.write_text(by_id("sglang-load-weight-begin").text + "\n" + watchdog + "\n")
    b = tmp_path / "rank-1.log"
    b.write_text(by_id("sglang-load-weight-begin").text + "\n")
    return [a, b]


def test_a_named_kernel_log_blames_the_rank_whose_node_logged_the_xid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = _logs(tmp_path)
    code = main(
        [
            "postmortem",
            "--logs",
            *map(str, logs),
            "--kernel-log",
            f"1={KERNEL / 'xid.log'}",
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["first_failing_rank"], doc["category"]) == (1, "gpu-fault")
    assert doc["root_cause"]["signature"] == "nvrm-xid"
    assert any(f"rank 1: kernel log {KERNEL / 'xid.log'}" == n for n in doc["source"]["notes"])


def test_a_kernel_log_among_the_rank_logs_is_told_by_its_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = _logs(tmp_path)
    pasted = tmp_path / "rank1-dmesg.txt"
    pasted.write_bytes((KERNEL / "oom.log").read_bytes())
    assert main(["postmortem", "--logs", *map(str, logs), str(pasted), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["first_failing_rank"], doc["category"]) == (1, "out-of-memory")
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]  # not a third "rank" of its own


@pytest.mark.parametrize(
    ("arg", "says"),
    [
        ("spark-x=/nowhere", "expected RANK=FILE"),
        ("1", "expected RANK=FILE"),
        ("1=/no/such/dmesg.txt", "no such kernel log"),
    ],
)
def test_a_bad_kernel_log_argument_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arg: str, says: str
) -> None:
    logs = _logs(tmp_path)
    code = main(["postmortem", "--logs", *map(str, logs), "--kernel-log", arg])
    err = capsys.readouterr().err
    assert code == 2
    assert says in err and "Traceback" not in err


def test_a_kernel_log_without_a_rank_in_its_name_asks_for_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = _logs(tmp_path)
    pasted = tmp_path / "journal.txt"
    pasted.write_bytes((KERNEL / "disk.log").read_bytes())
    assert main(["postmortem", "--logs", *map(str, logs), str(pasted)]) == 2
    err = capsys.readouterr().err
    assert "its name says no rank" in err and f"--kernel-log RANK={pasted}" in err
