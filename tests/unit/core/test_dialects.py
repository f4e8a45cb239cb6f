"""The engine dialect tables, checked on real lines from the shared corpus, and the simulator
speaking through them."""

from __future__ import annotations

import pytest

from orchestrator.dialects import common, sglang, vllm
from orchestrator.dialects.base import marker
from orchestrator.dialects.reader import PHASE_MARKERS, Milestone, parse_line
from orchestrator.dialects.timestamps import strip_timestamp
from orchestrator.models.run import RankPhase
from orchestrator.simulator import dialects as d
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
    "vllm-available-routes": Milestone.ready,
    "nccl-init-complete-old": Milestone.dist_init,
    "nccl-init-complete-commid": Milestone.dist_init,
    "nccl-connected-all-rings": Milestone.dist_init,
}

# Serving traffic: the postmortem's success evidence, which the supervisor does not watch.
TRAFFIC = (
    "sglang-prefill-batch-serving",
    "sglang-decode-batch-comma-logging-format",
    "sglang-http-generate-200",
    "vllm-v0-metrics-throughput-stats",
)


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


@pytest.mark.parametrize("line_id", TRAFFIC)
def test_serving_traffic_is_a_phase_marker_the_supervisor_leaves_alone(line_id):
    text = by_id(line_id).text
    rows = [m for m in PHASE_MARKERS if m.says(text)]
    assert rows and {m.milestone for m in rows} == {Milestone.traffic}, rows
    assert rows[0].phase is RankPhase.serving
    assert parse_line(text) is None


# Rows the supervisor's table held before the tables were merged, whose real line the corpus
# does not hold yet (the simulator prints them from public captures it cites).
CARRIED_WITHOUT_A_CORPUS_LINE = {"world_size=", "in world size", "Starting to load model"}


def test_every_phase_marker_matches_a_real_line():
    texts = [e.text for e in load_corpus() if not e.paraphrase]
    for row in PHASE_MARKERS:
        if row.keyword in CARRIED_WITHOUT_A_CORPUS_LINE:
            continue
        assert any(row.says(t) for t in texts), (row.milestone, row.keyword)


def test_a_marker_keyword_must_be_literal_text_of_its_regex():
    with pytest.raises(ValueError, match="not literal"):
        marker(Milestone.ready, None, "ready to roll", r"ready to \w+")


def test_no_failure_line_of_the_corpus_reads_as_ready_or_serving():
    for entry in load_corpus():
        if entry.benign or entry.paraphrase:
            continue
        rows = [m for m in PHASE_MARKERS if m.says(entry.text)]
        assert not [m for m in rows if m.phase is RankPhase.serving], entry.id


# The simulator prints each milestone with its own formatter; read back through the tables,
# each must mark the milestone it stands for (the simulator and the readers share the texts).
SIMULATED = [
    (d.sglang_server_args("/models/m", [("tp", 8)]), Milestone.server_args),
    (d.sglang_init_begin(), Milestone.dist_begin),
    (d.sglang_init_ends(0.01, 5.54), Milestone.dist_init),
    (d.sglang_init_ends(1.77), Milestone.dist_init),
    (d.sglang_load_begin(110.5), Milestone.load_begin),
    (d.shard_bar(d.SHARDS_DESC, 3, 8, 12.0, 0.25), Milestone.shards),
    (d.sglang_load_end(230.84, "X", "fp8", 48.02, 65.8), Milestone.load_end),
    (d.sglang_kv_allocated(910897, 19.55), Milestone.warmup),
    (d.sglang_capture_begin(22.0), Milestone.warmup),
    (d.sglang_autotune("/root/x.json"), Milestone.warmup),
    (d.uvicorn(d.sglang_uvicorn_running("0.0.0.0", 30000)), Milestone.ready),
    (d.READY_SGLANG, Milestone.ready),
    (d.sglang_barrier_error(3), Milestone.barrier_failed),
    (d.vllm_non_default_args([("model", "m")]), Milestone.server_args),
    (d.vllm_rank_assigned(3, 4, 3), Milestone.dist_init),
    (d.vllm_starting_to_load("m"), Milestone.load_begin),
    (d.vllm_loading_weights_took(12.5), Milestone.load_end),
    (d.vllm_model_loading_took(2.05, 27.2), Milestone.load_end),
    (d.vllm_available_kv(40.0), Milestone.warmup),
    (d.vllm_kv_cache_size(123456), Milestone.warmup),
    (d.vllm_init_engine_took(90.84), Milestone.warmup),
    (d.vllm_starting_server("0.0.0.0", 8000), Milestone.ready),
    (d.uvicorn(d.READY_VLLM), Milestone.ready),
]


@pytest.mark.parametrize(("line", "milestone"), SIMULATED, ids=[str(m) for _, m in SIMULATED])
def test_the_simulators_milestone_lines_read_back_as_their_milestone(line, milestone):
    p = parse_line(line)
    assert p is not None and p.milestone is milestone, line


def test_the_simulator_prints_the_readiness_texts_of_the_tables():
    assert d.READY_SGLANG == sglang.READY and d.READY_VLLM == vllm.READY
    assert d.SHARDS_DESC == common.SHARDS_DESC


# -- the supervisor's batch reading (issue 31: one scan per batch, not a parse per line) -------


def _batch_corpus() -> list[str]:
    chatter = "Decode batch. #running-req: 8, #token: 1234, gen throughput (token/s): 412.33"
    lines = []
    for k, e in enumerate(load_corpus()):
        stamp = ("2026-11-29T10:00:00Z ", f"2026-11-29T10:00:01.{k:09d}Z ", "")[k % 3]
        lines += [f"{stamp}{e.text}", f"2026-11-29T10:00:02.5+01:00 {chatter}"]
    return [*lines, "", "\r", "x\rLoad weight begin\r", "ERROR then Traceback on one line"]


def test_the_prefilter_lets_through_every_line_a_keyword_is_on() -> None:
    import re

    from orchestrator.dialects.reader import _WATCHED, anchor, keyword_pattern, may_mark

    words = [m.keyword for m in _WATCHED]
    flat = re.compile("|".join(re.escape(w) for w in words))
    assert all(anchor(w) in w and len(anchor(w)) >= min(4, len(w)) for w in words)
    assert anchor("checkpoint shards") == "kpoint shards"
    lines = _batch_corpus() + words + [w[:-1] for w in words] + [w[1:] for w in words]
    for line in lines:
        if flat.search(line):
            assert may_mark(line), line  # a superset: parse_line decides
    # On real lines it lets through no line the keywords would not: no parse wasted.
    assert [x for x in _batch_corpus() if may_mark(x)] == [
        x for x in _batch_corpus() if flat.search(x)
    ]
    trie = re.compile(keyword_pattern(["ab", "abc", "b"]))
    assert trie.fullmatch("ab") and trie.fullmatch("abc") and trie.fullmatch("b")
    assert not trie.fullmatch("a") and not trie.search("ac")


def test_the_marked_lines_of_a_batch_are_its_lines_that_may_mark_in_order() -> None:
    from orchestrator.dialects.reader import marked_lines, may_mark

    text = "\n".join(_batch_corpus())
    assert marked_lines(text) == [line for line in text.split("\n") if may_mark(line)]
    assert marked_lines("") == [] and marked_lines("Traceback") == ["Traceback"]


def test_stripping_a_batch_is_stripping_each_line() -> None:
    from orchestrator.dialects.timestamps import strip_timestamps

    lines = _batch_corpus()
    for batch in (lines, lines[:1], [""], ["2026-11-29T10:00:00Z ", "2026-11-29T10:00:00Z x"]):
        text = "\n".join(batch)
        assert strip_timestamps(text) == "\n".join(strip_timestamp(x)[1] for x in batch)
