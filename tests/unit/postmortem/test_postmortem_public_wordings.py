"""Wordings of torch c10d/gloo/NCCL, the Hugging Face stack and the engines' validators across
versions (issue 15): the signatures and the traceback families must name each, and the healthy
or retrying look-alikes must stay unnamed.

The lines are the sources' format strings filled the way those versions print them (the units
and spellings that differ between releases are the point); the verbatim fixtures are in
`tests/fixtures/engine-lines/postmortem-sources.yaml`.
"""

from __future__ import annotations

import pytest

from orchestrator.postmortem.families import classify, exception_of
from orchestrator.postmortem.signatures import load_signatures

SIGS = load_signatures()


@pytest.mark.parametrize(
    ("text", "sig_id"),
    [
        # torch 2.2-2.4 print the connect timeout in seconds, 2.5+ in ms, some builds in minutes
        (
            "[E socket.cpp:922] The client socket has timed out after 1800s while trying to "
            "connect to (127.0.0.1, 29500).",
            "torch-store-connect-timeout",
        ),
        (
            "The client socket has timed out after 20min while trying to connect to (h, 1).",
            "torch-store-connect-timeout",
        ),
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
            "local network address. The server socket has failed to bind to [::]:29500 "
            "(errno: 98 - Address already in use).",
            "torch-store-server-cannot-listen",
        ),
        # torch 1.x: the watchdog's sentence without "Watchdog "
        (
            "RuntimeError: [Rank 1] Caught collective operation timeout: WorkNCCL(OpType="
            "BROADCAST, Timeout(ms)=1800000) ran for 1800036 milliseconds before timing out.",
            "nccl-watchdog-collective-timeout",
        ),
        (
            "node1:12:34 [0] misc/socket.cc:456 NCCL WARN Net : Connect to 10.0.0.2<43521> "
            "failed : Connection refused",
            "nccl-peer-connection-failed",
        ),
        (
            "node1:12:34 [0] transport/net_socket.cc:46 NCCL WARN NET/Socket : no interface found",
            "nccl-no-socket-interface",
        ),
        (
            "node1:12:34 [0] transport/net_ib.cc:775 NCCL WARN NET/IB : Got completion with "
            "error 12, opcode 0, len 0, vendor err 129",
            "transport-failed-under-a-collective",
        ),
        ("ncclInternalError: Internal check failed.", "nccl-error-result-code"),
        (
            "RuntimeError: Barrier timed out after 30.00 seconds",
            "torch-store-based-barrier-timeout",
        ),
        (
            "OSError: Can't load the configuration of 'meta-llama/Llama-3-8B'. If you were "
            "trying to load it from 'https://huggingface.co/models', make sure you don't have",
            "hf-model-config-not-resolvable",
        ),
        (
            "OSError: /models/llama is not a local folder and is not a valid model identifier "
            "listed on 'https://huggingface.co/models'",
            "hf-model-config-not-resolvable",
        ),
        (
            "ValueError: Tokenizer class LlamaTokenizerFast does not exist or is not currently "
            "imported.",
            "tokenizer-cannot-be-built",
        ),
        (
            "ValueError: Total number of attention heads (40) must be divisible by tensor "
            "parallel size (6).",
            "engine-parallel-split-refused",
        ),
        (
            "api_server.py: error: unrecognized arguments: --enable-foo",
            "engine-cli-arguments-refused",
        ),
        (
            "OSError: Error no file named pytorch_model.bin, model.safetensors, tf_model.h5, "
            "model.ckpt.index or flax_model.msgpack found in directory /models/x.",
            "weight-shard-missing-or-mismatched",
        ),
    ],
)
def test_each_versions_wording_is_named(text: str, sig_id: str) -> None:
    assert SIGS[sig_id] in SIGS.match_text(text), text


@pytest.mark.parametrize(
    "text",
    [
        # retries and notices healthy boots print
        "[W socket.cpp:464] [c10d] The server socket on [::ffff:10.0.0.1]:25000 has timed out, "
        "will retry.",
        "node1:12:34 [0] NCCL INFO NET/IB : No device found.",
        "node1:12:34 [0] NCCL INFO NET/Socket : Using [0]enp1s0f1np1:10.0.0.1<0>",
        "node1:12:34 [0] NCCL INFO Connected all rings",
        "INFO 05-01 10:00:00 [parallel_state.py:1] rank 0 in world size 2 is assigned as DP rank 0",
        # a weight file the tokenizer signature must leave to the weights
        "OSError: /m does not appear to have a file named pytorch_model.bin but there is a file",
    ],
)
def test_healthy_lines_and_look_alikes_are_not_these_signatures(text: str) -> None:
    named = {c.sig.id for c in SIGS.match_text(text)}
    assert not named & {
        "torch-store-connect-timeout",
        "torch-store-server-cannot-listen",
        "nccl-no-socket-interface",
        "nccl-peer-connection-failed",
        "nccl-unhandled-system-error",
        "model-dir-missing-file",
    }, named


@pytest.mark.parametrize(
    ("line", "category"),
    [
        (
            "RuntimeError: Internal: could not parse ModelProto from /m/tokenizer.model",
            "tokenizer-config",
        ),
        (
            "ImportError: LlamaTokenizer requires the SentencePiece library but it was not found",
            "tokenizer-config",
        ),
        ("huggingface_hub.errors.DisabledRepoError: 403 Client Error", "tokenizer-config"),
        ("RuntimeError: NCCL Error 2: unhandled system error", "rendezvous-network"),
        ("RuntimeError: Address already in use", "rendezvous-network"),
        (
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
            "config-validator-refusal",
        ),
    ],
)
def test_the_traceback_families_map_these_exceptions(line: str, category: str) -> None:
    raised = exception_of(line)
    assert raised is not None
    family = classify(raised)
    assert family is not None and family.category == category, (line, family)


def test_nccl_cuda_errors_are_not_taken_for_the_network() -> None:
    raised = exception_of("RuntimeError: NCCL Error 1: unhandled cuda error")
    assert raised is not None
    family = classify(raised)
    assert family is None or family.category != "rendezvous-network"
