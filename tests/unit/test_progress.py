"""Load-progress parsing, checked on real lines from the shared corpus."""

from __future__ import annotations

import pytest

from orchestrator.supervisor.progress import Milestone, parse_line, strip_timestamp
from tests.engine_lines import by_id, load_corpus

EXPECTED = {
    "sglang-server-args-dump-repr": Milestone.server_args,
    "sglang-init-torch-distributed-ends": Milestone.dist_init,
    "sglang-load-weight-begin": Milestone.load_begin,
    "sglang-load-weight-end": Milestone.load_end,
    "sglang-load-weight-end-old": Milestone.load_end,
    "sglang-kv-cache-allocated-mla": Milestone.warmup,
    "sglang-memory-pool-end": Milestone.warmup,
    "sglang-capture-cuda-graph-begin": Milestone.warmup,
    "sglang-ready-to-roll": Milestone.ready,
    "sglang-uvicorn-running": Milestone.ready,
    "sglang-barrier-unbalanced-loading": Milestone.barrier_failed,
    "sglang-scheduler-hit-exception": Milestone.error,
}


@pytest.mark.parametrize("line_id", sorted(EXPECTED))
def test_a_real_sglang_line_marks_its_milestone(line_id):
    progress = parse_line(by_id(line_id).text)
    assert progress is not None and progress.milestone is EXPECTED[line_id]


def test_shard_bars_from_both_engines_give_done_and_total():
    mid = parse_line(by_id("sglang-shard-progress-mid").text)
    assert mid is not None and (mid.milestone, mid.done, mid.total) == (Milestone.shards, 120, 163)
    start = parse_line(by_id("sglang-shard-progress-start").text)
    assert start is not None and (start.done, start.total) == (0, 30)
    vllm = [e for e in load_corpus() if e.engine == "vllm" and "checkpoint shards" in e.text]
    assert vllm
    for entry in vllm:
        p = parse_line(entry.text)
        assert p is not None and p.milestone is Milestone.shards, entry.id


def test_vllm_load_end_warmup_and_ready_lines_are_recognised():
    texts = {e.id: e.text for e in load_corpus() if e.engine in ("vllm", "uvicorn")}
    found = {
        m: [i for i, t in texts.items() if (p := parse_line(t)) and p.milestone is m]
        for m in Milestone
    }
    assert any(
        "loading-weights-took" in i or "model-loading-took" in i for i in found[Milestone.load_end]
    )
    assert found[Milestone.warmup]
    assert found[Milestone.ready]


def test_the_eagle_draft_load_end_is_not_the_main_weights_end():
    assert parse_line(by_id("sglang-load-weight-end-eagle-draft").text) is None


def test_benign_lines_never_read_as_a_barrier_failure_or_load_end():
    for entry in load_corpus():
        if entry.benign:
            p = parse_line(entry.text)
            assert p is None or p.milestone not in (Milestone.barrier_failed,), entry.id


def test_the_docker_timestamp_prefix_is_split_off():
    ts, text = strip_timestamp(
        "2026-11-29T15:31:25.123456789Z [2026-11-29 15:31:25 TP3] Load weight begin."
    )
    assert ts == "2026-11-29T15:31:25.123456789Z"
    assert text.startswith("[2026-11-29 15:31:25 TP3]")
    assert strip_timestamp("no prefix") == (None, "no prefix")
