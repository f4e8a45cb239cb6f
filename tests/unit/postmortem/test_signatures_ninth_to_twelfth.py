"""The rules mined from the ninth to twelfth unseen sets (tests/fixtures/postmortem-ninth/,
-tenth/, -eleventh/, -twelfth/, issue 29), each after its set was frozen.

Each rests on a program's own words (the engine-line corpus's lines, cited there by URL): what
the postmortem makes of them through `postmortem_logs` (what `cluster postmortem --logs FILE`
calls). Two kinds: a library's wording that names a category, and a process that ended badly
in the words of whatever started it, which is a failure whose cause the log does not show
(`failed-unknown`, never "no failure found").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine_lines import by_id
from tests.unit.postmortem.paste import diagnose_paste


@pytest.mark.parametrize(
    ("line_id", "category"),
    [
        # the device could not give the memory asked for: TensorFlow on ROCm, Gaudi, Slurm's cgroup
        ("tf-rocm-failed-to-allocate-from-device", "out-of-memory"),
        ("gaudi-synhelper-workspace-allocation-failed", "out-of-memory"),
        ("slurm-detected-oom-kill-events", "out-of-memory"),
        # the GPU itself: the driver wants a reset, an AMD ring or queue hung
        ("nvrm-nv-err-reset-required", "gpu-fault"),
        ("amdgpu-ring-gfx-timeout", "gpu-fault"),
        ("amdgpu-qcm-fence-wait-timeout", "gpu-fault"),
        # no code for this GPU: ptxas's refusal without its usual prefix, rocBLAS's Tensile
        ("ptxas-sm121a-not-defined-bare", "unsupported-arch-kernel"),
        ("ptxas-blackwell-sm110a-not-defined", "unsupported-arch-kernel"),
        ("rocblas-no-tensile-library-for-gfx1103", "unsupported-arch-kernel"),
        # a GGUF file cut short or lacking a tensor
        ("llama-cpp-tensor-not-within-file-bounds", "weights-files"),
        ("llama-cpp-create-tensor-not-found", "weights-files"),
        ("llama-cpp-tensor-missing-from-model", "weights-files"),
        # the image never reached the node: a refused pull, a layer stream cut
        ("docker-pull-unauthorized-authentication-required", "image-unpack-race"),
        ("docker-load-loading-layer-then-unexpected-eof", "image-unpack-race"),
        ("docker-pull-download-complete-then-unexpected-eof", "image-unpack-race"),
        ("tar-unexpected-eof-retrieving-image", "image-unpack-race"),
        # ENOSPC in C's and Go's words; a model's "blobs" directory is not an image store
        ("gnu-tar-cannot-write-no-space-left", "disk"),
        ("go-write-no-space-left-on-device", "disk"),
        ("ollama-create-blob-write-no-space-left", "disk"),
        # the group never formed: Ray's GCS, an unresolvable MASTER_ADDR
        ("ray-couldnt-reconnect-to-gcs-server", "rendezvous-network"),
        ("torch-env-rendezvous-host-not-found", "rendezvous-network"),
    ],
)
def test_a_library_wording_names_its_category(tmp_path: Path, line_id: str, category: str) -> None:
    d = diagnose_paste(tmp_path, by_id(line_id).text)
    assert (d.category, d.outcome) == (category, "failed"), d.verdict


def test_an_image_layer_that_cannot_be_written_is_still_the_image_not_the_disk(
    tmp_path: Path,
) -> None:
    d = diagnose_paste(tmp_path, by_id("podman-writing-blob-no-space").text)
    assert d.category == "image-unpack-race"


@pytest.mark.parametrize(
    "line_id",
    [
        "vllm-worker-died-exit-code-minus-9",
        "torchrun-root-cause-exitcode-minus-9",
    ],
)
def test_a_sigkill_with_nothing_else_said_is_read_as_the_oom_killer(
    tmp_path: Path, line_id: str
) -> None:
    d = diagnose_paste(tmp_path, by_id(line_id).text)
    assert d.category == "out-of-memory" or d.closest == "out-of-memory", d.verdict
    assert d.outcome != "no-failure"


@pytest.mark.parametrize(
    "line_id",
    [
        "ollama-runner-terminated-exit-status-2",
        "compose-exited-with-code-139",
        "bash-segmentation-fault-core-dumped",
        "zsh-segmentation-fault-core-dumped",
        "glog-check-failed-cuda-driver-shutting-down",
        "tgi-launcher-error-webserver-failed",
        "python-traceback-frame-csv-quotes",
    ],
)
def test_a_process_that_ended_badly_is_a_failure_whose_cause_is_not_shown(
    tmp_path: Path, line_id: str
) -> None:
    d = diagnose_paste(tmp_path, "starting the server", by_id(line_id).text)
    assert (d.category, d.outcome) == ("unknown", "failed-unknown"), d.verdict


@pytest.mark.parametrize(
    "line",
    [
        "worker exited with code 0",
        "process finished: exit status 0",
        "exitcode  : 0 (pid: 12)",
    ],
)
def test_a_clean_exit_is_no_failure(tmp_path: Path, line: str) -> None:
    d = diagnose_paste(tmp_path, "starting the server", line)
    assert d.outcome == "no-failure", d.verdict


# -- mined from the twelfth set (tests/fixtures/postmortem-twelfth/), after its freeze ---------


@pytest.mark.parametrize(
    ("line_id", "category"),
    [
        ("tgi-router-could-not-find-tokenizer", "tokenizer-config"),
        ("tgi-router-hub-model-has-no-tokenizer", "tokenizer-config"),
        ("dynamo-unable-to-create-lease-etcd", "rendezvous-network"),
        ("torch-load-state-dict-size-mismatch", "weights-files"),
    ],
)
def test_a_twelfth_set_wording_names_its_category(
    tmp_path: Path, line_id: str, category: str
) -> None:
    d = diagnose_paste(tmp_path, by_id(line_id).text)
    assert (d.category, d.outcome) == (category, "failed"), d.verdict


def test_a_panic_whose_message_names_etcd_is_the_rendezvous(tmp_path: Path) -> None:
    d = diagnose_paste(
        tmp_path,
        by_id("rust-thread-panicked-dynamo-kv").text,
        by_id("dynamo-unable-to-create-lease-etcd").text,
    )
    assert d.category == "rendezvous-network", d.verdict


@pytest.mark.parametrize(
    "line_id",
    [
        "rust-thread-panicked-dynamo-kv",
        "tgi-launcher-webserver-crashed",
        "gunicorn-worker-sent-code-139",
        "vllm-engine-core-died-unexpectedly-quoted",
        "localai-could-not-load-model-rpc-error",
    ],
)
def test_a_twelfth_set_process_death_is_a_failure_whose_cause_is_not_shown(
    tmp_path: Path, line_id: str
) -> None:
    d = diagnose_paste(tmp_path, "starting the server", by_id(line_id).text)
    assert (d.category, d.outcome) == ("unknown", "failed-unknown"), d.verdict


def test_go_reporting_sigkill_is_read_as_the_oom_killer(tmp_path: Path) -> None:
    d = diagnose_paste(tmp_path, by_id("ollama-llama-server-terminated-signal-killed").text)
    assert d.category == "out-of-memory" or d.closest == "out-of-memory", d.verdict


def test_the_old_llama_cpp_servers_model_loaded_line_is_ready(tmp_path: Path) -> None:
    d = diagnose_paste(
        tmp_path,
        "llama_new_context_with_model: n_ctx      = 512",
        by_id("llama-cpp-server-json-model-loaded").text,
        "all slots are idle and system prompt is empty, clear the KV cache",
    )
    assert d.category == "ready", d.verdict
