"""`cluster postmortem`: run ids, run directories, loose logs, the newest run; errors as one line.

The checked-in run directories (tests/fixtures/postmortem/runs/) and the Markdown reports of
them (golden/) are kept in step with cases.yaml: `CLUSTER_UPDATE_GOLDENS=1` rewrites both.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from tests.engine_lines import by_id, load_corpus
from tests.fixtures.postmortem.build import HERE, RUNS, build_all, build_case, load_cases

CASES = load_cases()
GOLDEN = HERE / "golden"
UPDATE = os.environ.get("CLUSTER_UPDATE_GOLDENS") == "1"


def _same_tree(a: Path, b: Path) -> list[str]:
    cmp = filecmp.dircmp(a, b)
    diffs = [f"{a}/{n}" for n in cmp.left_only + cmp.right_only + cmp.diff_files]
    for sub in cmp.common_dirs:
        diffs += _same_tree(a / sub, b / sub)
    return diffs


def test_the_checked_in_runs_are_what_cases_yaml_builds(tmp_path: Path) -> None:
    if UPDATE:
        shutil.rmtree(RUNS, ignore_errors=True)
        build_all(RUNS)
    fresh = tmp_path / "runs"
    build_all(fresh)
    assert sorted(p.name for p in RUNS.iterdir()) == sorted(CASES)
    assert _same_tree(RUNS, fresh) == [], "run CLUSTER_UPDATE_GOLDENS=1 pytest ... to rebuild"


def test_every_line_of_every_fixture_run_is_a_real_corpus_line() -> None:
    real = {text for e in load_corpus() for text in (e.lines or (e.line or "",))}
    paraphrases = {e.text for e in load_corpus() if e.paraphrase}
    for log in RUNS.glob("*/rank-*/*.log"):
        for raw in log.read_text(encoding="utf-8").splitlines():
            stamp, _, text = raw.partition(" ")
            assert stamp.endswith("Z"), (log, raw)
            assert text in real and text not in paraphrases, (log, text)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_markdown_report_of_each_fixture_run_matches_its_golden_file(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["postmortem", str(RUNS / name), "--format", "md"])
    out, err = capsys.readouterr()
    assert code == 0, err
    golden = GOLDEN / f"{name}.md"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(out, encoding="utf-8")
    assert golden.exists(), f"no {golden.name}: run with CLUSTER_UPDATE_GOLDENS=1"
    assert out == golden.read_text(encoding="utf-8")


def test_json_output_is_one_document_with_the_diagnosis(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["postmortem", str(RUNS / "barrier-straggler"), "--json"])
    out, _ = capsys.readouterr()
    assert code == 0
    doc = json.loads(out)
    assert (doc["category"], doc["first_failing_rank"]) == ("load-barrier-timeout", 5)
    assert doc["source"]["kind"] == "run" and doc["source"]["run_id"] == "barrier-straggler"


def test_the_rich_report_names_the_rank_and_the_evidence(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["postmortem", str(RUNS / "oom-cascade")])
    out, _ = capsys.readouterr()
    assert code == 0
    assert "out-of-memory" in out and "Rank 3" in out
    assert "rank-3/exit.json:1" in out
    assert "--mem-fraction-static" in out


def test_a_run_is_found_by_its_id_in_the_store_and_the_newest_is_the_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "runs"
    build_case("20261129T100000Z-aaaaaa", CASES["healthy-sglang"], store)
    build_case("20261129T110000Z-bbbbbb", CASES["oom-cascade"], store)
    code = main(["postmortem", "20261129T100000Z-aaaaaa", "--runs-dir", str(store), "--json"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["category"] == "ready"
    code = main(["postmortem", "--runs-dir", str(store), "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["source"]["run_id"], doc["category"]) == (
        "20261129T110000Z-bbbbbb",
        "out-of-memory",
    )


def test_the_default_store_is_the_users_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    build_case("20261129T100000Z-cccccc", CASES["lazy-unpack"], tmp_path / "cluster" / "runs")
    assert main(["postmortem", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["category"] == "image-unpack-race"


def test_a_missing_run_is_a_run_store_error_with_exit_8_and_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["postmortem", "20200101T000000Z-abcdef", "--runs-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 8
    assert "no run 20200101T000000Z-abcdef" in err
    assert "Traceback" not in out + err


def test_an_empty_store_is_a_run_store_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["postmortem", "--runs-dir", str(tmp_path / "none")])
    _, err = capsys.readouterr()
    assert code == 8 and "no runs yet" in err and "Traceback" not in err


def _log(path: Path, ids: list[str]) -> Path:
    path.write_text("".join(by_id(i).text + "\n" for i in ids), encoding="utf-8")
    return path


def test_loose_logs_take_their_rank_from_the_file_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    healthy = ["sglang-load-weight-begin", "sglang-load-weight-end"]
    files = [
        _log(tmp_path / "tp1.txt", [*healthy, "sglang-barrier-unbalanced-loading"]),
        _log(tmp_path / "rank-0.log", [*healthy, "sglang-barrier-unbalanced-loading"]),
        _log(tmp_path / "node-rank3.log", ["sglang-load-weight-begin"]),
        _log(tmp_path / "rank2.log", [*healthy, "sglang-barrier-unbalanced-loading"]),
    ]
    code = main(["postmortem", "--logs", *map(str, files), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["source"]["kind"] == "logs"
    assert [r["rank"] for r in doc["ranks"]] == [0, 1, 2, 3]
    assert (doc["category"], doc["first_failing_rank"]) == ("load-barrier-timeout", 3)
    assert doc["ranks"][3]["last_line"]["file"].endswith("node-rank3.log")


def test_loose_logs_without_a_rank_in_the_name_are_ranked_in_the_order_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _log(tmp_path / "head.txt", ["vllm-kv-cache-estimated-max-model-len"])
    b = _log(tmp_path / "worker.txt", ["torch-nccl-watchdog-collective-timeout-vllm"])
    assert main(["postmortem", "--logs", str(b), str(a), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [Path(r["last_line"]["file"]).name for r in doc["ranks"]] == ["worker.txt", "head.txt"]
    assert (doc["category"], doc["first_failing_rank"]) == ("kv-cache-budget", 1)


def test_a_single_log_file_needs_no_logs_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _log(tmp_path / "boot.log", ["triton-ptxas-sm121a-not-defined"])
    assert main(["postmortem", str(log), "--format", "md"]) == 0
    out = capsys.readouterr().out
    assert "`unsupported-arch-kernel`" in out and "TRITON_PTXAS_PATH" in out


def test_a_missing_log_file_is_a_config_error_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["postmortem", "--logs", str(tmp_path / "rank-0.log")])
    _, err = capsys.readouterr()
    assert code == 2 and "no such log file" in err and "Traceback" not in err


def test_logs_flag_without_files_and_two_runs_at_once_are_usage_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["postmortem", "--logs"]) == 2
    assert "needs at least one log file" in capsys.readouterr().err
    assert main(["postmortem", "a", "b"]) == 2
    assert "one run at a time" in capsys.readouterr().err


def test_one_file_holding_every_ranks_lines_gives_each_match_to_the_rank_its_line_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # torch prefixes lines with [rankN]: ; vLLM workers with (VllmWorker rank=N pid=...)
    merged = tmp_path / "issue-paste.log"
    merged.write_text(
        "[rank0]:[W623 15:37:01.824135523 socket.cpp:485] [c10d] waiting\n"
        "(VllmWorker rank=3 pid=3073) ERROR 03-27 10:29:13 [worker_base.py:620] "
        + by_id("torch-cuda-oom-tried-to-allocate").text
        + "\n"
        + by_id("torch-nccl-watchdog-collective-timeout-sglang").text  # [rank4]:...
        + "\n",
        encoding="utf-8",
    )
    assert main(["postmortem", "--logs", str(merged), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["category"], doc["first_failing_rank"]) == ("out-of-memory", 3)
    assert 4 in doc["cascade_ranks"]
    assert any("several ranks" in n for n in doc["notes"])


def test_a_stopped_runs_saved_full_logs_are_not_read_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = build_case("oom-cascade", CASES["oom-cascade"], tmp_path)
    for stream in ("stdout", "stderr"):  # what `cluster stop` saves beside the followed copy
        shutil.copy(run / "rank-0" / f"{stream}.log", run / "rank-0" / f"full-{stream}.log")
    assert main(["postmortem", str(run), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    barrier = next(s for s in doc["signatures"] if s["id"] == "sglang-post-load-barrier-timeout")
    assert barrier["count"] == 7  # one line on each of the seven finished ranks
