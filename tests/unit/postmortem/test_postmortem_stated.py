"""A line that says something failed, in words no rule names: `failed-unknown`, not "no failure".

Fakes only: short logs written to tmp_path, diagnosed through `postmortem_logs` (what
`cluster postmortem --logs FILE` calls). The level of a line decides first (stated.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.postmortem import postmortem_logs
from orchestrator.postmortem.learned import features
from orchestrator.postmortem.stated import states_failure
from orchestrator.postmortem.timeline import KEEP_STATED

LOADING = (
    "[2025-03-09 00:50:00 TP0] Load weight begin. avail mem=78.00 GB\n"
    "[2025-03-09 00:51:00 TP0] Load weight end. type=Qwen3ForCausalLM, avail mem=40.00 GB\n"
)


def _log(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rank-0.log"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "line",
    [
        "2024-01-18 21:27:53,300 acme.core.model 35043 ERROR    The worker went away.",
        'time=2024-05-01T10:00:00Z level=error msg="runner process has terminated: exit status 2"',
        '{"levelname": "ERROR", "message": "replica 3 is gone"}',
        "[2026-05-04 14:06:10][error] backend stopped",
        "E1204 10:11:12.123456  4504 worker.cc:240] Could not start the worker",
        "panic: runtime error: invalid memory address or nil pointer dereference",
        "Segmentation fault (core dumped)",
        "server exited with code 1",
        "Error: model load did not complete",
        "the model actor is out of memory",
        # llama-server's own words when its port is taken (the eighteenth set's m-0012)
        "main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080",
        "Could not resolve Linux kernel version",
    ],
)
def test_a_line_stating_a_failure_is_read_as_one(line: str) -> None:
    assert states_failure(line)


@pytest.mark.parametrize(
    "line",
    [
        "INFO 11-24 11:43:54 [utils.py:12] Failed to import triton, falling back",
        "WARNING 11-24 11:43:54 [config.py:9] failed to read the generation config",
        'time=2024-05-01T10:00:00Z level=warn msg="retry failed, trying again"',
        "W1204 10:11:12.123456  4504 worker.cc:240] connect failed, retrying",
        "2026-01-12 [W:onnxruntime:Default, device_discovery.cc:164] discovery failed",
        "vllm/connections.py:8: RuntimeWarning: Failed to read commit hash:",
        "2024-01-01 | ERROR | stderr | Loading checkpoint shards:  50%|#####     | 1/2",
        "=== 120 passed, 0 failed in 3.2s ===",
        "retry the download if it fails",
        "Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
        # torch's c10d warning behind its rank prefix: "[W122" is the level, not the words
        "[rank1]:[W122 20:05:19.749124012 socket.cpp:204] [c10d] The hostname of the client"
        " socket cannot be retrieved. err=-3",
        # ollama on a Jetson (the seventeenth set's n-0013): a warning in its own words
        "2023/11/28 13:49:20 routes.go:716: Warning: GPU support may not be enabled, check you"
        " have installed GPU drivers: nvidia-smi command failed",
    ],
)
def test_a_quiet_level_or_words_that_say_nothing_failed_are_not_a_failure(line: str) -> None:
    assert not states_failure(line)


def test_a_log_whose_only_failure_is_stated_in_words_failed_with_the_line_named(
    tmp_path: Path,
) -> None:
    said = "2025-03-09 00:52:00 acme.worker 4242 ERROR    The worker went away during warm-up."
    d = postmortem_logs([_log(tmp_path, LOADING + said + "\n")])
    assert d.outcome == "failed-unknown"  # nothing named it, but it failed: not "no failure"
    assert d.category == "unknown"
    assert d.no_failure is None
    assert d.verdict.startswith("Failed, cause not named: a line says something failed")
    assert "rank-0.log:3" in d.verdict
    assert "The worker went away" in d.verdict


def test_the_same_words_at_warning_level_are_no_failure(tmp_path: Path) -> None:
    said = "[2025-03-09 00:52:00 TP0] WARNING The worker went away, failed once, retrying."
    d = postmortem_logs([_log(tmp_path, LOADING + said + "\n")])
    assert d.outcome == "no-failure"
    assert "No failure found; furthest phase" in d.verdict


def test_the_scan_keeps_the_last_stated_lines_and_the_model_reads_their_words(
    tmp_path: Path,
) -> None:
    from orchestrator.postmortem.collect import collect_logs
    from orchestrator.postmortem.signatures import load_signatures

    many = "".join(f"ERROR step {i} did not finish\n" for i in range(KEEP_STATED + 5))
    collected = collect_logs([_log(tmp_path, LOADING + many)], load_signatures())
    (rank,) = collected.ranks
    assert len(rank.stated) == KEEP_STATED
    assert rank.stated[-1].text == f"ERROR step {KEEP_STATED + 4} did not finish"
    assert rank.stated[0].line == 3 + 5  # the first five fell out: the last ones are kept
    assert "f=finish" in features([rank])
