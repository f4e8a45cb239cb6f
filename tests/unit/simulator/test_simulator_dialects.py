"""Golden tests: the simulator's formatters give back the real lines of the engine-line corpus.

Each test feeds a corpus line's own values into the formatter that imitates it and expects the
corpus line back, byte for byte. Where the corpus keeps a line as a source quoted it (whitespace
collapsed by a forum, a bar trimmed, a longer line cut), the comparison says so and compares the
fields in order instead.
"""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from orchestrator.simulator import dialects as d
from orchestrator.simulator.faults import SIGNATURES, Memory, SignatureContext
from tests.engine_lines import by_id


def text(entry_id: str) -> str:
    return by_id(entry_id).text


def squash(line: str) -> str:
    """Whitespace runs as one space: what a forum post or a pasted issue does to a line."""
    return re.sub(r"\s+", " ", line).strip()


def ts(year: int, month: int, day: int, h: int, m: int, s: int) -> datetime:
    return datetime(year, month, day, h, m, s)


# -- SGLang ----------------------------------------------------------------------------------


def test_sglang_init_ends_old_format_round_trips() -> None:
    line = d.sglang_record(ts(2025, 10, 16, 9, 6, 9), d.sglang_init_ends(1.77), tp=7)
    assert line == text("sglang-init-torch-distributed-ends")


def test_sglang_init_ends_new_format_has_elapsed_before_mem_usage() -> None:
    # sglang PR #15426's format, as a 2026 multi-GPU log prints it.
    line = d.sglang_record(ts(2026, 8, 7, 17, 33, 28), d.sglang_init_ends(0.01, 5.54), tp=3)
    assert (
        line
        == "[2026-08-07 17:33:28 TP3] Init torch distributed ends. elapsed=5.54 s, mem usage=0.01 GB"
    )


def test_sglang_load_weight_begin_round_trips() -> None:
    line = d.sglang_record(ts(2025, 10, 16, 9, 6, 10), d.sglang_load_begin(137.29), tp=5)
    assert line == text("sglang-load-weight-begin")


def test_sglang_load_weight_end_gb10_round_trips() -> None:
    msg = d.sglang_load_end(
        230.84, "PixtralForConditionalGeneration", "compressed-tensors", 48.02, 65.80
    )
    assert d.sglang_record(ts(2026, 3, 24, 22, 12, 0), msg) == text("sglang-load-weight-end")


def test_sglang_shard_bar_at_start_round_trips() -> None:
    assert d.shard_bar(d.SHARDS_DESC, 0, 30, 0.0, None) == text("sglang-shard-progress-start")


def test_sglang_shard_bar_midway_round_trips() -> None:
    assert d.shard_bar(d.SHARDS_DESC, 120, 163, 37.5, 3.40) == text("sglang-shard-progress-mid")


def test_shard_bar_in_seconds_per_item_round_trips() -> None:
    # 10.19 s/it, past half an hour (sglang#5457 via anchors-launchers.md §4).
    line = d.shard_bar(d.SHARDS_DESC, 159, 163, 31 * 60 + 48, 1 / 10.19)
    assert (
        line
        == "Loading safetensors checkpoint shards:  98% Completed | 159/163 [31:48<00:40, 10.19s/it]"
    )


def test_shard_bar_matches_the_gb10_line_as_the_seed_quotes_it() -> None:
    # Seed 000 quotes the last bar without `Completed` and with its padding collapsed.
    mine = d.shard_bar(d.SHARDS_DESC, 13, 13, 72.3, 1 / 5.56)
    assert squash(mine.replace(" Completed", "")) == text("sglang-shard-progress-gb10-as-quoted")


def test_tqdm_update_starts_with_a_carriage_return_and_pads_over_a_longer_bar() -> None:
    assert d.tqdm_update("abc", 0) == "\rabc"
    assert d.tqdm_update("ab", 4) == "\rab  "


def test_sglang_kv_cache_mla_round_trips() -> None:
    line = d.sglang_record(ts(2026, 3, 24, 22, 12, 2), d.sglang_kv_allocated(910897, 19.55))
    assert line == text("sglang-kv-cache-allocated-mla")


def test_sglang_cuda_graph_lines_round_trip() -> None:
    begin = d.sglang_record(ts(2026, 3, 24, 22, 12, 3), d.sglang_capture_begin(28.02))
    assert begin == text("sglang-capture-cuda-graph-begin")
    end = d.sglang_record(ts(2026, 3, 24, 22, 13, 8), d.sglang_capture_end(65.47, 1.95))
    assert end == text("sglang-capture-cuda-graph-end")


def test_sglang_capture_bar_has_the_seed_fields_in_order() -> None:
    mine = d.default_bar(d.sglang_capture_desc(48), 23, 23, 63.7, 1 / 2.77)
    assert "|██████████|" in mine  # tqdm's 10-column bar off a terminal
    without_bar = re.sub(r" \d+%\|[^|]*\|", "", mine)
    assert squash(without_bar) == text("sglang-capturing-batches-progress-as-quoted")


def test_sglang_max_total_num_tokens_round_trips() -> None:
    msg = d.sglang_max_total_num_tokens(910897, 65536, 22.77)
    assert d.sglang_record(ts(2026, 3, 24, 22, 13, 31), msg) == text("sglang-max-total-num-tokens")


def test_sglang_autotune_line_round_trips() -> None:
    msg = d.sglang_autotune(d.sglang_autotune_cache(2))
    assert d.sglang_record(ts(2026, 6, 28, 13, 36, 54), msg, tp=2) == text(
        "sglang-flashinfer-autotune-begin"
    )


def test_sglang_uvicorn_lines_match_the_seed_modulo_uvicorn_padding() -> None:
    complete = d.sglang_record(
        ts(2026, 3, 24, 22, 13, 36), d.uvicorn("Application startup complete.")
    )
    assert "INFO:     Application" in complete  # uvicorn pads the level to 9 columns
    assert squash(complete) == text("sglang-uvicorn-startup-complete")
    running = d.sglang_record(
        ts(2026, 3, 24, 22, 13, 36), d.uvicorn(d.sglang_uvicorn_running("0.0.0.0", 30000))
    )
    assert squash(running).startswith(text("sglang-uvicorn-running"))


def test_sglang_ready_line_is_the_real_constant() -> None:
    assert text("sglang-ready-to-roll") == d.READY_SGLANG


def test_sglang_server_args_dump_starts_like_the_real_dict() -> None:
    line = d.sglang_record(
        ts(2026, 9, 12, 0, 22, 13), d.sglang_server_args("/models/qwen3.8-27b-nvfp4", [])
    )
    assert line.startswith(text("sglang-server-args-dump-dict"))


def test_sglang_server_args_dump_echoes_unknown_flags_after_the_known_ones() -> None:
    line = d.sglang_server_args("/m", [("tp", 8), ("moe_runner_backend", "flashinfer_cutlass")])
    assert "'tp_size': 8" in line
    assert line.index("'moe_runner_backend': 'flashinfer_cutlass'") > line.index("'node_rank'")


def test_sglang_launch_server_warning_round_trips() -> None:
    assert d.sglang_launch_server_warning() == text("sglang-launch-server-entrypoint-warning")


def test_sglang_custom_allreduce_line_round_trips() -> None:
    assert d.sglang_custom_allreduce_disabled() == text(
        "sglang-custom-allreduce-disabled-multinode"
    )


def test_sglang_barrier_value_error_is_exact() -> None:
    assert d.sglang_barrier_error(1) == text("sglang-barrier-unbalanced-loading")


def test_sglang_scheduler_exception_header_round_trips() -> None:
    line = d.sglang_record(ts(2026, 6, 28, 13, 36, 54), d.sglang_scheduler_exception(), tp=2)
    assert line == text("sglang-scheduler-hit-exception")


def test_sglang_sigquit_line_matches_modulo_the_old_sources_extra_spaces() -> None:
    # The corpus line (2025-06) has three spaces from a line continuation that later releases
    # removed; the wording is the same.
    line = d.sglang_record(ts(2025, 6, 22, 16, 14, 0), d.sglang_sigquit())
    assert squash(line) == squash(text("sglang-received-sigquit-from-child"))


def test_sglang_scheduler_watchdog_round_trips() -> None:
    assert d.sglang_watchdog(300) == text("sglang-scheduler-watchdog-timeout-new")


# -- vLLM ------------------------------------------------------------------------------------


def test_vllm_loading_weights_took_round_trips() -> None:
    line = d.vllm_record(
        ts(2025, 12, 12, 22, 31, 21),
        "INFO",
        d.VLLM_SRC["weights"],
        d.vllm_loading_weights_took(0.20),
        "RayWorkerWrapper",
        1480,
    )
    assert line == text("vllm-loading-weights-took")


def test_vllm_model_loading_took_round_trips() -> None:
    line = d.vllm_record(
        ts(2025, 11, 24, 11, 43, 54),
        "INFO",
        d.VLLM_SRC["model"],
        d.vllm_model_loading_took(2.0513, 27.200487),
        "EngineCore_DP0",
        441,
    )
    assert line == text("vllm-model-loading-took")


def test_vllm_kv_lines_round_trip() -> None:
    kv = d.vllm_record(
        ts(2025, 11, 24, 11, 44, 17),
        "INFO",
        d.VLLM_SRC["kv_mem"],
        d.vllm_available_kv(33.31),
        "EngineCore_DP0",
        441,
    )
    assert kv == text("vllm-available-kv-cache-memory")
    size = d.vllm_record(
        ts(2025, 11, 24, 11, 44, 18), "INFO", d.VLLM_SRC["kv_size"], d.vllm_kv_cache_size(1587648)
    )
    assert size == text("vllm-gpu-kv-cache-size")
    conc = f"[{d.VLLM_SRC['concurrency']}] {d.vllm_max_concurrency(2048, 775.22)}"
    assert conc == text("vllm-max-concurrency")


def test_vllm_init_engine_and_api_server_lines_round_trip() -> None:
    init = d.vllm_record(
        ts(2025, 6, 2, 11, 3, 55), "INFO", d.VLLM_SRC["init_engine"], d.vllm_init_engine_took(90.84)
    )
    assert init == text("vllm-init-engine-took")
    api = d.vllm_record(
        ts(2026, 3, 20, 1, 43, 40),
        "INFO",
        d.VLLM_SRC["api"],
        d.vllm_starting_server("0.0.0.0", 8000),
        "APIServer",
        1,
    )
    assert api == text("vllm-api-server-starting")


def test_vllm_ready_line_is_uvicorns() -> None:
    assert d.uvicorn(d.READY_VLLM) == text("vllm-application-startup-complete")


def test_vllm_shard_bar_round_trips() -> None:
    line = d.shard_bar(d.SHARDS_DESC, 1, 2, 1.96, 1 / 1.96)
    assert line == text("vllm-shard-progress")


def test_vllm_worker_progress_splits_like_the_pasted_capture() -> None:
    raw = d.vllm_prefix("Worker_TP0", 1440) + d.tqdm_update(
        d.shard_bar(d.SHARDS_DESC, 75, 141, 352.0, 1 / 4.36), 0
    )
    assert raw.split("\r") == list(by_id("vllm-shard-progress-worker-prefix").lines or ())


def test_vllm_engine_core_init_failed_round_trips() -> None:
    line = d.vllm_prefix("APIServer", 1179246) + d.vllm_engine_init_failed()
    assert line == text("vllm-engine-core-init-failed")


def test_vllm_kv_budget_refusal_round_trips() -> None:
    line = d.vllm_prefix("EngineCore_DP0", 1094) + d.vllm_kv_budget_error(262144, 24.0, 3.18, 34736)
    assert text("vllm-kv-cache-estimated-max-model-len") == line


def test_vllm_non_default_args_lists_model_tag_first_and_parses_json_flags() -> None:
    msg = d.vllm_non_default_args(
        [("model_tag", "/m"), ("served_model_name", "x"), ("speculative_config", '{"k": 3}')]
    )
    assert (
        msg
        == "non-default args: {'model_tag': '/m', 'served_model_name': ['x'], 'speculative_config': {'k': 3}, 'model': '/m'}"
    )


def test_vllm_rank_assignment_line() -> None:
    assert d.vllm_rank_assigned(3, 4, 3) == (
        "rank 3 in world size 4 is assigned as DP rank 0, PP rank 0, TP rank 3, EP rank 3"
    )


# -- torch.distributed, NCCL, Gloo -------------------------------------------------------------


def test_torch_rendezvous_errors_round_trip() -> None:
    assert d.dist_client_timeout("172.17.0.9", 46229, 600) == text(
        "torch-dist-network-error-client-timeout"
    )
    assert d.dist_store_timeout(600, 1, 2) == text("torch-dist-store-error-clients-joined")


def test_torch_glog_prefix_and_nccl_watchdog_round_trip() -> None:
    msg = d.nccl_watchdog_timeout(4, 151721, "_ALLGATHER_BASE", 8080, 129280, 600000, 600049)
    line = d.torch_glog(
        4, "E", ts(2025, 3, 4, 12, 54, 52), 122900428, "ProcessGroupNCCL.cpp:616", msg
    )
    assert line == text("torch-nccl-watchdog-collective-timeout-sglang")


def test_torch_glog_prefix_matches_c10d_socket_lines() -> None:
    corpus = text("torch-c10d-wait-for-input-timeout")
    prefix = d.torch_glog(1, "W", ts(2025, 6, 23, 15, 37, 1), 824135523, "socket.cpp:485", "")
    assert corpus.startswith(prefix)


def test_gloo_errors_round_trip() -> None:
    assert d.gloo_full_mesh_failed() == text("gloo-connect-full-mesh-failed-sglang")
    assert text("gloo-connect-full-mesh-failed-vllm").endswith(d.gloo_full_mesh_failed())


def test_nccl_no_interface_error_carries_the_bootstrap_text_as_last_error() -> None:
    lines = d.nccl_no_interface_error()
    assert lines[-2:] == ["Last error:", text("nccl-bootstrap-no-socket-interface")]


def test_nccl_debug_lines_round_trip() -> None:
    assert d.nccl_debug("user", 852750, 852802, 0, "INFO", "Using network Socket") == text(
        "nccl-using-network-socket"
    )
    using = d.nccl_debug(
        "node2", 22555, 22555, 0, "INFO", "Bootstrap : Using enp10s0:10.10.7.109<0>"
    )
    assert text("nccl-bootstrap-using-interface").endswith(using)


# -- fault signatures --------------------------------------------------------------------------

CTX = SignatureContext("sglang", 524288, Memory(total=128 * 2**30, free=2 * 2**30))


@pytest.mark.parametrize(
    "name", [n for n, s in SIGNATURES.items() if s.corpus_id and s.name != "kv-budget"]
)
def test_every_signature_with_a_corpus_entry_prints_that_entry(name: str) -> None:
    sig = SIGNATURES[name]
    assert text(sig.corpus_id) in sig.text(CTX)


def test_no_fault_prints_a_paraphrase_the_postmortem_could_not_match() -> None:
    for sig in SIGNATURES.values():
        assert not sig.paraphrase, sig.name
        if sig.corpus_id:
            assert not by_id(sig.corpus_id).paraphrase, sig.name


def test_kv_budget_speaks_each_engines_words() -> None:
    sglang = SIGNATURES["kv-budget"].text(CTX)
    assert (
        sglang == "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    )
    vllm = SIGNATURES["kv-budget"].text(SignatureContext("vllm", 524288, CTX.memory))
    assert "models's max seq len (524288), (25.0 GiB KV cache is needed" in vllm
    assert "available KV cache memory (23.63 GiB)" in vllm


def test_cuda_oom_quotes_the_nodes_memory_as_torch_formats_it() -> None:
    msg = SIGNATURES["cuda-oom"].text(CTX)
    assert msg.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    assert "total capacity of 128.00 GiB of which 2.00 GiB is free" in msg
    assert "fragmentation.  See documentation for Memory Management  (https://" in msg
