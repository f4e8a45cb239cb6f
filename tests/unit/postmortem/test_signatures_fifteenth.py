"""The rules mined from the fifteenth unseen set (tests/fixtures/postmortem-fifteenth/, issue 29),
after its score was frozen (36/52 with 631d267).

Each rests on a program's own words (the engine-line corpus's lines, verbatim from the threads
cited there), diagnosed as `cluster postmortem --logs FILE` diagnoses a pasted log. Its one
wrong answer of a kind the rules can fix (a docker inspect State read as an OOM kill because it
says `OOMKilled false`) gave the precision tests at the end.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine_lines import by_id
from tests.unit.postmortem.paste import diagnose_paste


@pytest.mark.parametrize(
    ("line_id", "category"),
    [
        # docker load could not store the archive: the image, not a dataset's disk
        ("docker-load-errors-processing-tar-no-space", "image-unpack-race"),
        # SIGILL, as Go's exec error and as the kernel's trap line say it
        ("ollama-llama-runner-signal-illegal-instruction", "unsupported-arch-kernel"),
        ("kernel-traps-ollama-runner-invalid-opcode", "unsupported-arch-kernel"),
        # torch RPC's own timer
        ("torch-rpc-ran-more-than-set-timeout", "watchdog-timeout"),
        # DeepSpeed's config check
        ("deepspeed-check-batch-related-parameters", "config-validator-refusal"),
        # an accelerator that stopped answering its runtime
        ("ascend-device-status-abnormal-e39009", "gpu-fault"),
        # a model file llama.cpp cannot read
        ("llama-cpp-error-loading-model-unexpected-eof", "weights-files"),
        ("llama-cpp-error-loading-model-format-no-longer-supported", "weights-files"),
        ("llama-cpp-gguf-init-invalid-magic-number", "weights-files"),
        # the launcher's ssh check of a host, in its older form
        ("deepspeed-ssh-hostname-check-exit-255", "rendezvous-network"),
    ],
)
def test_a_mined_wording_names_its_category(tmp_path: Path, line_id: str, category: str) -> None:
    d = diagnose_paste(tmp_path, by_id(line_id).text)
    assert (d.category, d.outcome) == (category, "failed"), d.verdict


@pytest.mark.parametrize(
    "line_id", ["gaudi-syndeviceacquire-synapse-error", "docker-inspect-state-exit-code-132"]
)
def test_a_failure_that_names_no_cause_is_failed_unknown(tmp_path: Path, line_id: str) -> None:
    d = diagnose_paste(tmp_path, "starting", by_id(line_id).text)
    assert (d.category, d.outcome) == ("unknown", "failed-unknown"), d.verdict


def test_a_container_state_that_says_oomkilled_false_is_not_an_oom_kill(tmp_path: Path) -> None:
    # docker inspect's State printed whole: exit 132 (SIGILL), OOMKilled false. Before this set
    # the bare word OOMKilled named out-of-memory: a wrong answer that sends the engineer to
    # the memory of a node that had plenty.
    d = diagnose_paste(
        tmp_path,
        "State",
        by_id("docker-inspect-state-exit-code-132").text,
        by_id("docker-inspect-oomkilled-false").text,
        "Status exited",
    )
    assert d.category != "out-of-memory", d.verdict
    assert d.outcome == "failed-unknown", d.verdict


@pytest.mark.parametrize(
    "text", ['"OOMKilled": false,', "OOMKilled false", "    OOMKilled:  false"]
)
def test_oomkilled_false_in_any_spelling_is_no_oom(tmp_path: Path, text: str) -> None:
    d = diagnose_paste(tmp_path, text)
    assert d.category != "out-of-memory", d.verdict


def test_oomkilled_true_still_is_an_oom_kill(tmp_path: Path) -> None:
    d = diagnose_paste(tmp_path, '            "OOMKilled": true,', '            "ExitCode": 137,')
    assert d.category == "out-of-memory", d.verdict


def test_a_full_disk_outside_an_image_is_still_the_disk(tmp_path: Path) -> None:
    d = diagnose_paste(tmp_path, "OSError: [Errno 28] No space left on device: '/data/cache/x'")
    assert d.category == "disk", d.verdict
