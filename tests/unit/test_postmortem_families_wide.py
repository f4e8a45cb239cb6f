"""The widened traceback families (issue 15, generalization): wordings the engines' own sources
raise, and where they raise them, map to the family's category with its fallback confidence.

Each line is a wording quoted from a public source (cited beside it); a traceback's frames are
the file paths the engines raise from."""

from __future__ import annotations

import pytest

from orchestrator.postmortem.families import classify, exception_of

VLLM = "/usr/local/lib/python3.12/dist-packages/vllm"
SGLANG = "/sgl-workspace/sglang/python/sglang/srt"


@pytest.mark.parametrize(
    ("line", "frames", "category", "confidence"),
    [
        # vllm model_executor/layers/linear.py + sglang weight_loader asserts; the wording as a
        # public SGLang integration note quotes it (find_string id 44365126103)
        ("AssertionError: Attempted to load weight (torch.Size([640, 6912]))", "", "weights-files", "medium"),
        # a bare assert raised inside vLLM's weight iterator
        ("AssertionError", f"{VLLM}/model_executor/model_loader/weight_utils.py", "weights-files", "low"),
        # torch/serialization.py: torch.load(weights_only=True) refusing a pickle
        ("_pickle.UnpicklingError: Weights only load failed. This file can still be loaded", "", "weights-files", "medium"),
        # triton/language/semantic.py: `type fp8e4nv not supported in this architecture`
        ("ValueError: type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')", "", "unsupported-arch-kernel", "medium"),
        # ... the same refusal raised while compiling the fused-MoE Triton kernel is the runner's
        ("ValueError: type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')", f"{VLLM}/model_executor/layers/fused_moe/fused_moe.py", "moe-runner", "medium"),
        # vllm quantization/compressed_tensors/compressed_tensors_moe.py
        ("RuntimeError: Unsupported FusedMoe scheme: None, None", "", "moe-runner", "medium"),
        # any class naming the MoE code: an API drift between vLLM and a plugin (find_string id 41837839771)
        ("TypeError: fused_experts() got an unexpected keyword argument 'quant_config'", "", "moe-runner", "medium"),
        # sglang srt/layers/moe/*: an assert with no message
        ("AssertionError", f"{SGLANG}/layers/moe/ep_moe/layer.py", "moe-runner", "medium"),
        # vLLM v1 shm_broadcast / RPC waits raise a bare TimeoutError
        ("TimeoutError", "", "watchdog-timeout", "low"),
        # vllm/v1/executor/multiproc_executor.py: `raise TimeoutError(f"RPC call to {method} timed out.")`
        ("TimeoutError: RPC call to execute_model timed out.", "", "watchdog-timeout", "low"),
        # any class saying a wait timed out (SGLang/vLLM engine waits)
        ("RuntimeError: Engine core initialization timed out after 600 seconds", "", "watchdog-timeout", "low"),
        # a hub timeout reaching huggingface.co is the hub's (tokenizer/config), not a watchdog
        ("urllib3.exceptions.ReadTimeoutError: HTTPSConnectionPool(host='huggingface.co', port=443): Read timed out. (read timeout=10)", "", "tokenizer-config", "medium"),
    ],
)  # fmt: skip
def test_a_wider_wording_maps_to_its_family(
    line: str, frames: str, category: str, confidence: str
) -> None:
    raised = exception_of(line)
    assert raised is not None
    fam = classify(raised, frames)
    assert fam is not None and (fam.category, fam.confidence) == (category, confidence)


@pytest.mark.parametrize(
    "line",
    [
        "IndexError: list index out of range",
        "KeyError: 'foo'",
    ],
)
def test_an_exception_outside_every_family_stays_unmapped(line: str) -> None:
    raised = exception_of(line)
    assert raised is not None and classify(raised) is None
