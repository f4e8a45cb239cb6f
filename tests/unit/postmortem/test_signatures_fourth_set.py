"""The rules mined from the fourth unseen set (tests/fixtures/postmortem-fourth/, issue 29).

Each rule rests on a library's own wording (the lines are the engine-line corpus's, cited there
by URL); these tests pin what the postmortem makes of them, through `postmortem_logs` (what
`cluster postmortem --logs FILE` calls), and the one change to the traceback fallback: NCCL's
"unhandled cuda error" is a CUDA failure inside NCCL, never the network.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.postmortem import postmortem_logs
from orchestrator.postmortem.families import classify, exception_of
from tests.engine_lines import by_id


def _diagnose(tmp_path: Path, *lines: str) -> tuple[str, str]:
    path = tmp_path / "rank-0.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    d = postmortem_logs([path])
    return d.category, d.outcome


@pytest.mark.parametrize(
    ("line_id", "category"),
    [
        # torch elastic's "failed (exitcode: -9)", SGLang's "Exit code: -9": SIGKILL (weak OOM)
        ("torchrun-failed-exitcode-minus-9", "out-of-memory"),
        ("torchrun-failed-exitcode-minus-9-rich", "out-of-memory"),
        ("sglang-exit-code-minus-9", "out-of-memory"),
        # transports between the nodes
        ("ucx-ib-mlx5-transport-retry-count-exceeded", "rendezvous-network"),
        ("nccl-old-call-to-write-failed-reset", "rendezvous-network"),
        ("sglang-pd-could-not-fetch-prefill-parallel-info", "rendezvous-network"),
        # the GPU itself
        ("rocm-hw-exception-gpu-hang", "gpu-fault"),
        ("nvidia-smi-device-handle-unknown-error", "gpu-fault"),
        # the watchdog's own frame, pasted without its message line
        ("torch-nccl-checktimeout-frame", "watchdog-timeout"),
    ],
)
def test_a_library_wording_names_its_category(tmp_path: Path, line_id: str, category: str) -> None:
    assert _diagnose(tmp_path, by_id(line_id).text) == (category, "failed")


@pytest.mark.parametrize(
    "line_id",
    [
        "ray-worker-died-unexpected-system-error",
        "ray-actor-dead-worker-process-died",
        "torch-elastic-child-failed-error-bare",
        "torch-elastic-root-cause-first-observed",
        "torch-watchdog-thread-terminated-cuda-unspecified-launch",
        "torch-watchdog-thread-terminated-cuda-unspecified-launch-2",
        "vllm-nccl-error-unhandled-cuda-error",
        "torch-nccl-unhandled-cuda-error-call-failed",
    ],
)
def test_a_symptom_says_the_boot_failed_without_naming_a_cause(
    tmp_path: Path, line_id: str
) -> None:
    """Ray's worker death, torchrun's summary, a watchdog dying of a CUDA error, NCCL's
    unhandled CUDA error: failed, cause not named (never `no-failure`, never a category the
    words do not state: Ray's list of *possible* causes names the OOM killer)."""
    assert _diagnose(tmp_path, by_id(line_id).text) == ("unknown", "failed-unknown")


def test_a_sigkill_after_a_stated_cause_stays_the_stated_cause(tmp_path: Path) -> None:
    category, _ = _diagnose(
        tmp_path,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        by_id("torchrun-failed-exitcode-minus-9").text,
    )
    assert category == "out-of-memory"
    category, _ = _diagnose(
        tmp_path,
        "ValueError: Total number of attention heads (52) must be divisible by tensor parallel "
        "size (8).",
        by_id("torchrun-failed-exitcode-minus-9").text,
    )
    assert category == "config-validator-refusal"  # the launcher's kill follows the refusal


@pytest.mark.parametrize(
    "line",
    [
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1197, unhandled "
        "cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.3",
        "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        '    raise RuntimeError(f"NCCL error: {error_str}")',
    ],
)
def test_an_nccl_cuda_failure_is_not_the_network(line: str) -> None:
    raised = exception_of(line)
    assert raised is not None
    fam = classify(raised)
    assert fam is None or fam.category != "rendezvous-network"


def test_an_nccl_network_error_is_still_the_network() -> None:
    raised = exception_of(
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1333, remote "
        "process exited or there was a network error, NCCL version 2.18.6"
    )
    assert raised is not None
    fam = classify(raised)
    assert fam is not None and fam.category == "rendezvous-network"


@pytest.mark.parametrize(
    ("line", "cls"),
    [
        (
            "  Value error, Total number of attention heads (64) must be divisible by tensor "
            "parallel size (3). [type=value_error, input_value=ArgsKwargs(()), input_type=ArgsKwargs]",
            "ValueError",
        ),
        ("  Assertion failed, max_model_len must be positive", "AssertionError"),
    ],
)
def test_a_pydantic_validation_error_is_read_as_the_error_it_wraps(line: str, cls: str) -> None:
    """pydantic-core prints a wrapped error as "Value error, {error}" (vLLM's config classes
    are pydantic dataclasses): the fallback reads it as the ValueError it was."""
    raised = exception_of(line)
    assert raised is not None and raised.cls == cls
    if cls == "ValueError":
        fam = classify(raised)
        assert fam is not None and fam.category == "config-validator-refusal"
