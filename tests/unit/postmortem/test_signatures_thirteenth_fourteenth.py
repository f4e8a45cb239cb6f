"""The rules mined from the thirteenth and fourteenth unseen sets
(tests/fixtures/postmortem-thirteenth/, -fourteenth/, issue 29), each after its score was frozen.

Each rests on a program's own words (the engine-line corpus's lines, verbatim from the threads
cited there): what the postmortem makes of them through `postmortem_logs`, as `cluster
postmortem --logs FILE` calls it. The fourteenth set's two `ready` mistakes gave the last two
tests: a serving line before a model load is not the model serving, and a transfer that broke
after the server came up is a failure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine_lines import by_id
from tests.unit.postmortem.paste import diagnose_paste


@pytest.mark.parametrize(
    ("line_id", "category"),
    [
        # -- the thirteenth set
        # TensorRT's own words for a device allocation it did not get
        ("tensorrt-error-code-2-out-of-memory", "out-of-memory"),
        ("tensorrt-requested-gpu-memory-not-allocated", "out-of-memory"),
        # TGI's warmup refusing its prefill token budget
        ("tgi-warmup-not-enough-memory-prefill-tokens", "kv-cache-budget"),
        # the driver could not bring the GPU up
        ("nvrm-rminitadapter-gsp-firmware", "gpu-fault"),
        ("nvrm-cannot-initialize-gsp-firmware", "gpu-fault"),
        ("nvrm-gfw-boot-wait-failed", "gpu-fault"),
        # llama.cpp's registry check, like vLLM's
        ("llama-cpp-unknown-model-architecture", "config-validator-refusal"),
        # the ranks could not reach each other: NCCL's bootstrap, an RDMA peer that never acked
        ("nccl-bootstrap-socket-in-progress-chain", "rendezvous-network"),
        ("mooncake-rdma-transport-retry-counter-exceeded", "rendezvous-network"),
        # the config is not where or what the loader expects
        ("transformers-config-file-not-valid-json-gguf", "tokenizer-config"),
        ("unsloth-no-config-file-found", "tokenizer-config"),
        # the image never reached the node whole
        ("docker-pull-no-matching-manifest-capitalized", "image-unpack-race"),
        ("docker-pull-untar-reexec-unexpected-eof", "image-unpack-race"),
        # -- the fourteenth set
        # the host or the device had not the memory asked for
        ("kernel-memory-cgroup-oom-kill-process-old", "out-of-memory"),
        ("ollama-model-requires-more-system-memory", "out-of-memory"),
        ("onnxruntime-bfcarena-failed-to-allocate", "out-of-memory"),
        # no kernel for this GPU: ggml's build, rocBLAS's Tensile library
        ("ggml-cuda-no-device-code-for-arch", "unsupported-arch-kernel"),
        ("rocblas-tensile-library-illegal-seek-for-arch", "unsupported-arch-kernel"),
        # the library's own check refused the attention implementation
        ("transformers-model-does-not-support-flash-attention-2", "config-validator-refusal"),
        # the vocabulary or the model type
        ("llama-cpp-error-loading-model-vocabulary", "tokenizer-config"),
        ("transformers-checkpoint-very-new-no-release", "tokenizer-config"),
        # a GGUF without the tensors its architecture needs
        ("ollama-missing-tensor-output-weight", "weights-files"),
        ("llama-cpp-wrong-number-of-tensors", "weights-files"),
        # the nodes could not reach each other: KV transfer, ssh, HCCL's sockets, a flushed QP
        ("mooncake-ascend-failed-to-connect-to-target", "rendezvous-network"),
        ("deepspeed-hostfile-host-not-reachable-via-ssh", "rendezvous-network"),
        ("hccl-ei0006-getting-socket-times-out", "rendezvous-network"),
        ("ucx-srd-send-completion-work-request-flushed", "rendezvous-network"),
        # Ascend's collective and stream waits
        ("hccl-ei0002-notify-wait-times-out", "watchdog-timeout"),
        ("ascend-ee1002-stream-synchronize-timeout", "watchdog-timeout"),
    ],
)
def test_a_mined_wording_names_its_category(tmp_path: Path, line_id: str, category: str) -> None:
    d = diagnose_paste(tmp_path, by_id(line_id).text)
    assert (d.category, d.outcome) == (category, "failed"), d.verdict


def test_the_untar_error_is_the_image_though_it_carries_an_exit_status(tmp_path: Path) -> None:
    # "exit status 1" alone is a process that ended badly (cause unknown); beside "Untar
    # re-exec error" it is the layer's unpack, and the answer must say so.
    d = diagnose_paste(tmp_path, by_id("docker-pull-untar-reexec-unexpected-eof").text)
    assert d.category == "image-unpack-race", d.verdict


@pytest.mark.parametrize(
    "line_id",
    [
        # local runners that failed to load (the thirteenth set)
        "localai-llama-cpp-rpc-canceled-fallback",
        "localai-llama-cpp-rpc-unavailable-eof",
        "jan-llama-cpp-process-error",
        "lmstudio-error-loading-model-exit-code",
        # a bare CUDA error, torch elastic's compact summary (the fourteenth set)
        "torch-elastic-root-cause-exitcode-1-compact",
        "ggml-cuda-error-invalid-argument",
        "cuda-failed-with-error-invalid-argument",
    ],
)
def test_a_failure_that_names_no_cause_is_failed_unknown(tmp_path: Path, line_id: str) -> None:
    d = diagnose_paste(tmp_path, "loading the model", by_id(line_id).text)
    assert (d.category, d.outcome) == ("unknown", "failed-unknown"), d.verdict


@pytest.mark.parametrize(
    "text",
    [
        "(Exit code: 0). Model unloaded.",
        "g105:26921:27058 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.5<0>",
        "Selected architecture: 'llama'",
    ],
)
def test_the_same_words_without_a_failure_are_no_failure(tmp_path: Path, text: str) -> None:
    d = diagnose_paste(tmp_path, text)
    assert d.outcome == "no-failure", d.verdict


def test_a_cuda_error_that_names_its_cause_keeps_its_category(tmp_path: Path) -> None:
    d = diagnose_paste(tmp_path, "CUDA error: out of memory")
    assert d.category == "out-of-memory", d.verdict


def test_lm_studios_server_line_is_ready(tmp_path: Path) -> None:
    d = diagnose_paste(
        tmp_path,
        "[LM STUDIO SERVER] Verbose server logs are DISABLED",
        by_id("lmstudio-server-success-http-listening").text,
    )
    assert d.category == "ready", d.verdict


def test_a_servers_start_before_its_model_loads_is_not_ready(tmp_path: Path) -> None:
    # A controller's uvicorn comes up, then the model worker starts loading its shards: the
    # model does not serve yet and nothing failed (the fourteenth set's v-0053).
    lines = [
        "INFO:     Application startup complete.",
        "INFO:     Uvicorn running on http://0.0.0.0:20000 (Press CTRL+C to quit)",
        "2024-04-12 00:09:25 | INFO | model_worker | Loading the model ['chatglm3-6b'] ...",
        "Loading checkpoint shards:   0%|          | 0/7 [00:00<?, ?it/s]",
    ]
    d = diagnose_paste(tmp_path, *lines)
    assert d.outcome == "no-failure" and d.category != "ready", d.verdict
    # ... and once the load ends and the server says it serves again, it is ready.
    more = [
        "Loading checkpoint shards: 100%|██████████| 7/7 [00:20<00:00,  2.9s/it]",
        "INFO:     Uvicorn running on http://0.0.0.0:21002 (Press CTRL+C to quit)",
    ]
    assert diagnose_paste(tmp_path, *lines, *more).category == "ready"


def test_a_transfer_that_broke_after_the_server_served_is_a_failure_not_ready(
    tmp_path: Path,
) -> None:
    d = diagnose_paste(
        tmp_path,
        '127.0.0.1:41950 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        by_id("ucx-srd-send-completion-work-request-flushed").text,
    )
    assert (d.category, d.outcome) == ("rendezvous-network", "failed"), d.verdict
