"""The rules mined from the thirteenth unseen set (tests/fixtures/postmortem-thirteenth/,
issue 29), after its score was frozen.

Each rests on a program's own words (the engine-line corpus's lines, verbatim from the threads
cited there): what the postmortem makes of them through `postmortem_logs`, as `cluster
postmortem --logs FILE` calls it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine_lines import by_id
from tests.unit.postmortem.paste import diagnose_paste


@pytest.mark.parametrize(
    ("line_id", "category"),
    [
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
    ],
)
def test_a_thirteenth_set_wording_names_its_category(
    tmp_path: Path, line_id: str, category: str
) -> None:
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
        "localai-llama-cpp-rpc-canceled-fallback",
        "localai-llama-cpp-rpc-unavailable-eof",
        "jan-llama-cpp-process-error",
        "lmstudio-error-loading-model-exit-code",
    ],
)
def test_a_local_runner_that_failed_to_load_is_a_failure_whose_cause_is_not_shown(
    tmp_path: Path, line_id: str
) -> None:
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
