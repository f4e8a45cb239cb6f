"""The rules mined from the fifteenth and sixteenth unseen sets
(tests/fixtures/postmortem-fifteenth/, -sixteenth/, issue 29), each after its score was frozen
(36/52 with 631d267; 40/53 with 66f19b0).

Each rests on a program's own words (the engine-line corpus's lines, verbatim from the threads
cited there), diagnosed as `cluster postmortem --logs FILE` diagnoses a pasted log. The
fifteenth set's wrong answer of a kind the rules can fix (a docker inspect State read as an OOM
kill because it says `OOMKilled false`) gave the precision tests; the sixteenth's tried ready
marker that made an earlier set's start-up `ready` gave the last one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine_lines import by_id
from tests.unit.postmortem.paste import diagnose_paste


@pytest.mark.parametrize(
    ("line_id", "category"),
    [
        # -- the fifteenth set
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
        # -- the sixteenth set
        # Ray's report of an actor its memory monitor killed; a serving framework's actor OOM
        ("ray-actor-died-worker-exit-node-out-of-memory", "out-of-memory"),
        ("xinference-model-actor-is-out-of-memory", "out-of-memory"),
        # a chat template the installed framework does not define
        ("llamafactory-template-does-not-exist", "tokenizer-config"),
        # the fused-MoE module has no kernels for this GPU: the MoE runner, not a flag check
        ("flashinfer-fused-moe-invalid-backend-80", "moe-runner"),
    ],
)
def test_a_mined_wording_names_its_category(tmp_path: Path, line_id: str, category: str) -> None:
    d = diagnose_paste(tmp_path, by_id(line_id).text)
    assert (d.category, d.outcome) == (category, "failed"), d.verdict


@pytest.mark.parametrize(
    "line_id",
    [
        "gaudi-syndeviceacquire-synapse-error",
        "docker-inspect-state-exit-code-132",
        "ucx-caught-signal-8-integer-divide-by-zero",
    ],
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


def test_a_bare_invalid_backend_outside_the_moe_module_is_not_the_moe_runner(
    tmp_path: Path,
) -> None:
    # the moe-runner reading rests on the raising frame being in fused_moe/, not on the words
    d = diagnose_paste(
        tmp_path,
        '  File "/x/attention/backends.py", line 12, in pick',
        '    raise ValueError(f"Invalid backend: {backend}")',
        "ValueError: Invalid backend: 80",
    )
    assert d.category != "moe-runner", d.verdict


def test_tritons_older_grpc_endpoint_line_is_ready(tmp_path: Path) -> None:
    d = diagnose_paste(
        tmp_path,
        "I1204 08:17:44.990000 1 server.cc:118] Initializing Triton Inference Server",
        by_id("triton-2003-started-grpcservice").text,
    )
    assert d.outcome == "ready", d.verdict


def test_ollamas_listening_line_alone_is_not_ready(tmp_path: Path) -> None:
    # ollama's server listens before any model is loaded; the sets label that start-up
    # `no-failure` as often as `ready`, and `ready` for a log that is not is the costliest
    # mistake: the line is no ready marker (twelfth set r-0040)
    d = diagnose_paste(
        tmp_path,
        'time=2025-01-08T11:29:03.590-06:00 level=INFO source=routes.go:1310 msg="Listening on'
        ' 100.100.70.109:11434 (version 0.5.4)"',
    )
    assert d.outcome == "no-failure", d.verdict
