"""The rules mined from the sixteenth unseen set (tests/fixtures/postmortem-sixteenth/, issue 29),
after its score was frozen (40/53 with 66f19b0).

Each rests on a program's own words (the engine-line corpus's lines, verbatim from the threads
cited there), diagnosed as `cluster postmortem --logs FILE` diagnoses a pasted log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine_lines import by_id
from tests.unit.postmortem.paste import diagnose_paste


@pytest.mark.parametrize(
    ("line_id", "category"),
    [
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


def test_a_crash_ucx_reports_is_a_failure_without_a_shown_cause(tmp_path: Path) -> None:
    d = diagnose_paste(
        tmp_path, "loading the model", by_id("ucx-caught-signal-8-integer-divide-by-zero").text
    )
    assert (d.category, d.outcome) == ("unknown", "failed-unknown"), d.verdict


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
