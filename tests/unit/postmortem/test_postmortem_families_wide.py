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
        # triton/language/semantic.py: `type fp8e4nv not supported in this architecture`; on
        # the engines the Triton FP8 kernels pre-Hopper GPUs compile are the fused-MoE ones
        ("ValueError: type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')", "", "moe-runner", "low"),
        # ... and raised from the fused-MoE code it is the runner's, with medium confidence
        ("ValueError: type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')", f"{VLLM}/model_executor/layers/fused_moe/fused_moe.py", "moe-runner", "medium"),
        # TensorRT-LLM _torch/modules/fused_moe/quantization.py: a MoE quantization without
        # kernels for this SM is the MoE runner's, not a kernel-image failure
        ("NotImplementedError: W4AFP8 MoE is unsupported on SM89.", "", "moe-runner", "medium"),
        # transformers' own config class refusing the model's config (the forty-third set,
        # runpod-workers/worker-vllm#88): the installed transformers cannot load it, even when
        # an engine's config code is further up the stack
        (
            "ValueError: `rope_scaling` must be a dictionary with two fields, `type` and `factor`",
            "/usr/local/lib/python3.10/dist-packages/vllm/config.py "
            "/usr/local/lib/python3.10/dist-packages/transformers/models/llama/configuration_llama.py",
            "tokenizer-config",
            "medium",
        ),
        # ... but not when transformers' config code is only further up the stack
        (
            "ValueError: Total number of attention heads (64) must be divisible by tensor parallel size (3).",
            "/usr/local/lib/python3.10/dist-packages/transformers/configuration_utils.py "
            f"{VLLM}/config.py",
            "config-validator-refusal",
            "medium",
        ),
        # a no-kernel-image error outside MoE code stays the architecture's
        ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "", "unsupported-arch-kernel", "medium"),
        # vllm quantization/compressed_tensors/compressed_tensors_moe.py
        ("RuntimeError: Unsupported FusedMoe scheme: None, None", "", "moe-runner", "medium"),
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
        # a call that does not fit the MoE function it calls is an API drift between vLLM and a
        # plugin or a patched model file (find_string id 41837839771; the fortieth set's d-0005,
        # labelled `unknown`), not the runner chosen: read as the MoE runner's until then
        "TypeError: fused_experts() got an unexpected keyword argument 'quant_config'",
        "TypeError: FusedMoE.__init__() got an unexpected keyword argument 'reduce_results'",
    ],
)
def test_an_exception_outside_every_family_stays_unmapped(line: str) -> None:
    raised = exception_of(line)
    assert raised is not None and classify(raised) is None


@pytest.mark.parametrize(
    "line",
    [
        # vLLM logs each traceback line behind its logger head; shm_broadcast.py (0.19.0, line
        # 561) raises TimeoutError with no message while the engine waits for its workers
        "ERROR 09-01 10:00:00 [core.py:612] TimeoutError",
        "(EngineCore_DP0 pid=2251) ERROR 09-01 10:00:00 [core.py:612] TimeoutError",
        "[rank0]: TimeoutError",
        "    TimeoutError",
    ],
)
def test_a_class_raised_without_a_message_is_read_behind_a_log_head(line: str) -> None:
    raised = exception_of(line)
    assert raised is not None and (raised.cls, raised.msg) == ("TimeoutError", "")
    fam = classify(raised)
    assert fam is not None and fam.category == "watchdog-timeout"


@pytest.mark.parametrize(
    "line",
    [
        "INFO 09-01 10:00:00 [core.py:612] raised a TimeoutError",  # prose, not a class alone
        "INFO 09-01 10:00:00 [api_server.py:1] Waiting for EngineCore",
        "retrying after TimeoutError",  # no head that ends in ] : or )
    ],
)
def test_a_sentence_that_ends_in_a_class_name_is_no_bare_exception(line: str) -> None:
    raised = exception_of(line)
    assert raised is None or raised.cls != "TimeoutError" or raised.msg
