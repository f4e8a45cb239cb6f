"""The rules mined from the sixth, seventh and eighth unseen sets (tests/fixtures/postmortem-sixth/,
-seventh/ and -eighth/, issue 29).

Each rests on a library's or server's own words (the engine-line corpus's lines, cited there by
URL) or on the boot's order: what the postmortem makes of them, through `postmortem_logs` (what
`cluster postmortem --logs FILE` calls), and the kernel wing's reading of the driver's GPU-lost
status.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.kernel.read import classify, parse_line, signature_of
from tests.engine_lines import by_id
from tests.unit.postmortem.paste import diagnose_paste


@pytest.mark.parametrize(
    ("line_id", "category"),
    [
        # docker's answer hard-wrapped by the user after "archive/tar:"
        ("docker-load-untar-invalid-tar-header-wrapped", "image-unpack-race"),
        # HIP's name for "invalid device function": no code object for this ISA
        ("hip-launch-kernel-invalid-device-function", "unsupported-arch-kernel"),
        # ggml could not allocate the model's buffer
        ("ggml-cpu-buffer-alloc-failed", "out-of-memory"),
        ("llama-unable-to-allocate-cpu-buffer", "out-of-memory"),
        # DeepSpeed's launcher: a rank SIGKILLed with nothing else said (weak OOM, as torchrun's)
        ("deepspeed-launcher-return-code-minus-9", "out-of-memory"),
        # a node agent's Xid 79, in NVIDIA's words
        ("gpud-xid-79-fallen-off-the-bus", "gpu-fault"),
        # seventh set: a full disk, an image for another platform, Paddle's OOM, vLLM CPU's KV
        # refusal, transformers' bf16 refusal
        ("python-errno-28-no-space-left", "disk"),
        ("windows-os-error-112-disk-full", "disk"),
        ("docker-found-but-does-not-provide-platform", "image-unpack-race"),
        ("paddle-out-of-memory-error-on-gpu", "out-of-memory"),
        ("vllm-cpu-kv-cache-less-than-requested", "kv-cache-budget"),
        ("transformers-setup-does-not-support-bf16", "config-validator-refusal"),
        # eighth set: vLLM's zero "cuda" blocks, candle's allocator, safetensors' reason alone,
        # ROCm's invalid ISA, Rust's ENOSPC, llama.cpp's unknown pre-tokenizer
        ("vllm-cuda-blocks-zero", "kv-cache-budget"),
        ("candle-allocation-would-exceed-allowed-memory", "out-of-memory"),
        ("safetensors-header-metadata-incomplete-bare", "weights-files"),
        ("rocm-hsa-status-error-invalid-isa", "unsupported-arch-kernel"),
        ("rust-os-error-28-no-space-left", "disk"),
        ("llama-cpp-unknown-pre-tokenizer-refact", "tokenizer-config"),
    ],
)
def test_a_library_wording_names_its_category(tmp_path: Path, line_id: str, category: str) -> None:
    d = diagnose_paste(tmp_path, by_id(line_id).text)
    assert (d.category, d.outcome) == (category, "failed")


def test_deepspeeds_launcher_killing_its_ranks_is_a_failure_with_no_cause_named(
    tmp_path: Path,
) -> None:
    d = diagnose_paste(tmp_path, by_id("deepspeed-launcher-killing-subprocess").text)
    assert (d.category, d.outcome) == ("unknown", "failed-unknown")


def test_a_hub_404_for_a_weights_file_is_the_weights_not_the_tokenizer(tmp_path: Path) -> None:
    # requests' HTTPError, which huggingface_hub chains its EntryNotFoundError from
    d = diagnose_paste(
        tmp_path,
        "HTTPError: 404 Client Error: Not Found for url: "
        "https://huggingface.co/org/model/resolve/main/unet/diffusion_pytorch_model.bin",
    )
    assert (d.category, d.outcome) == ("weights-files", "failed")
    d = diagnose_paste(
        tmp_path,
        "HTTPError: 404 Client Error: Not Found for url: "
        "https://huggingface.co/org/model/resolve/main/tokenizer_config.json",
    )
    assert d.category == "tokenizer-config"


def test_ollamas_runner_started_and_a_chat_answered_is_ready(tmp_path: Path) -> None:
    d = diagnose_paste(
        tmp_path,
        by_id("ollama-llama-runner-started").text,
        by_id("ollama-gin-post-api-chat-200").text,
    )
    assert d.category == "ready"


def test_gin_answering_head_slash_is_no_model_serving(tmp_path: Path) -> None:
    d = diagnose_paste(
        tmp_path,
        '[GIN] 2026/01/20 - 23:15:46 | 200 |     971.777µs |       127.0.0.1 | HEAD     "/"',
        '[GIN] 2026/01/20 - 23:15:46 | 200 |    1.193025ms |       127.0.0.1 | GET      "/api/ps"',
    )
    assert d.category != "ready"


def test_old_vllms_kv_cache_blocks_line_is_past_the_rendezvous(tmp_path: Path) -> None:
    """vLLM before V1 printed the KV cache size as "# GPU blocks: N, # CPU blocks: M": a log cut
    there had loaded its weights, and is no rendezvous that never completed."""
    d = diagnose_paste(
        tmp_path,
        "INFO 01-04 11:10:36 llm_engine.py:70] Initializing an LLM engine with config: "
        "model='/data/Yi-34b-Chat', tokenizer='/data/Yi-34b-Chat', tensor_parallel_size=4, seed=0)",
        by_id("vllm-gpu-blocks-cpu-blocks").text,
    )
    assert d.outcome == "no-failure", d.category
    assert d.no_failure is not None and d.no_failure.furthest_phase == "warming"


WRAPPER_FRONT_END = (
    "2023-11-21 21:15:20 | ERROR | stderr | INFO:     Started server process [2563]",
    "2023-11-21 21:15:20 | ERROR | stderr | INFO:     Application startup complete.",
    "2023-11-21 21:15:20 | ERROR | stderr | INFO:     Uvicorn running on http://0.0.0.0:20000",
    "INFO 11-21 21:15:21 llm_engine.py:72] Initializing an LLM engine with config: "
    "model='/models/chatglm2-6b', tokenizer='/models/chatglm2-6b', seed=0)",
)


def test_a_wrappers_front_end_up_before_its_engine_starts_is_not_ready(tmp_path: Path) -> None:
    """Langchain-Chatchat's API (uvicorn, its own port) is up first; the vLLM engine under it is
    only starting when the log ends: nothing failed, and nothing is ready."""
    d = diagnose_paste(tmp_path, *WRAPPER_FRONT_END)
    assert d.outcome == "no-failure" and d.category != "ready", d.category


def test_the_engines_own_ready_after_the_wrappers_still_counts(tmp_path: Path) -> None:
    d = diagnose_paste(
        tmp_path,
        *WRAPPER_FRONT_END,
        "INFO 11-21 21:16:40 llm_engine.py:196] # GPU blocks: 2040, # CPU blocks: 512",
        "INFO:     Application startup complete.",
    )
    assert d.category == "ready"


def test_a_full_disk_under_an_image_layer_is_not_called_the_disk(tmp_path: Path) -> None:
    """An image store's ENOSPC is the image that could not be stored (image.yaml's wordings);
    the generic disk-full rule stands aside for it."""
    d = diagnose_paste(
        tmp_path,
        "failed to register layer: Error processing tar file(exit status 1): write "
        "/usr/lib/x86_64-linux-gnu/libcudnn.so.8: [Errno 28] No space left on device",
    )
    assert d.category != "disk"


@pytest.mark.parametrize(
    "line_id",
    [
        "triton-started-http-service",
        "llama-server-json-http-server-listening",
    ],
)
def test_a_servers_own_ready_line_is_ready(tmp_path: Path, line_id: str) -> None:
    assert diagnose_paste(tmp_path, by_id(line_id).text).category == "ready"


def test_comfyuis_gui_line_is_ready(tmp_path: Path) -> None:
    d = diagnose_paste(tmp_path, "Starting server", by_id("comfyui-to-see-the-gui").text)
    assert d.category == "ready"


def test_the_drivers_gpu_lost_status_is_a_hardware_xid_79_in_the_kernel_wing() -> None:
    text = by_id("nvrm-gpu-lost-from-the-bus-assert").text
    ev = classify(parse_line(1, text, year=2025))
    assert ev is not None and (ev.family, ev.cause, ev.xid) == ("xid", True, 79)
    assert signature_of(ev) == "nvrm-xid"


def test_a_paste_that_ends_on_a_request_answered_500_after_ready_is_a_failure(
    tmp_path: Path,
) -> None:
    started = by_id("ollama-llama-runner-started").text
    answered = by_id("ollama-gin-post-api-chat-200").text
    failed = answered.replace("| 200 |", "| 500 |")
    d = diagnose_paste(tmp_path, started, answered, failed)
    assert (d.category, d.outcome) == ("unknown", "failed-unknown")
    assert diagnose_paste(tmp_path, started, failed, answered).category == "ready"
