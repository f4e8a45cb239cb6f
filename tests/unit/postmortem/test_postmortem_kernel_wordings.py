"""Issue 15, second pass: the arch-kernel, KV-budget, tokenizer and validator wordings added
from public logs and the engines' sources, each read the way `cluster postmortem --logs FILE`
reads it (`postmortem_logs`), and the traceback-fallback families widened with them."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.postmortem import postmortem_logs
from orchestrator.postmortem.families import Raised, classify
from tests.engine_lines import by_id


def _category(tmp_path: Path, text: str) -> str:
    log = tmp_path / "excerpt.log"
    log.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    return postmortem_logs([log]).category


@pytest.mark.parametrize(
    ("entry_id", "category"),
    [
        ("ptxas-ptx-version-does-not-support-target-sm120a", "unsupported-arch-kernel"),
        ("ptxas-unsupported-ptx-version-current", "unsupported-arch-kernel"),
        ("triton-accelerate-matmul-compute-capability-not-supported", "unsupported-arch-kernel"),
        ("torch-accelerator-error-named-symbol-not-found-b200", "unsupported-arch-kernel"),
        ("tvm-cuda-error-no-binary-for-gpu", "unsupported-arch-kernel"),
        ("cublas-status-arch-mismatch", "unsupported-arch-kernel"),
        ("shell-illegal-instruction-core-dumped-vllm", "unsupported-arch-kernel"),
        ("sglang-cutedsl-dual-gemm-requires-sm10x", "unsupported-arch-kernel"),
        ("sglang-cutedsl-paged-mqa-logits-only-sm100-family", "unsupported-arch-kernel"),
        ("sglang-nunchaku-currently-only-supported-on-ampere-sm12x", "unsupported-arch-kernel"),
        ("torch-current-install-supports-capabilities-sm120", "unsupported-arch-kernel"),
        ("sglang-not-enought-memory-typo", "kv-cache-budget"),
        ("vllm-to-serve-at-least-one-request-head", "kv-cache-budget"),
        ("trtllm-executor-kv-cache-component-not-created", "kv-cache-budget"),
        ("sglang-swa-pool-cannot-hold-one-request", "kv-cache-budget"),
        ("vllm-external-weights-exceed-utilization", "kv-cache-budget"),
        ("trtllm-executor-additional-resources-not-created", "out-of-memory"),
        ("transformers-incorrect-path-or-model-id", "tokenizer-config"),
        ("vllm-mistral-tokenizer-no-attribute", "tokenizer-config"),
        ("vllm-qwen2-tokenizer-no-attribute-transformers5", "tokenizer-config"),
        ("transformers-config-mapping-keyerror-qwen2", "tokenizer-config"),
        ("vllm-unrecognized-image-processor", "tokenizer-config"),
        ("transformers-does-not-appear-to-have-files-named-shards", "weights-files"),
        ("vllm-pydantic-value-error-limit-mm-per-prompt", "config-validator-refusal"),
    ],
)
def test_each_new_public_wording_names_its_category(
    tmp_path: Path, entry_id: str, category: str
) -> None:
    assert _category(tmp_path, by_id(entry_id).text) == category


@pytest.mark.parametrize(
    "entry_id",
    ["torch-gb10-cuda-capability-range-warning", "torch-gb10-does-not-include-kernels-warning"],
)
def test_torchs_gb10_capability_warnings_are_not_failures(tmp_path: Path, entry_id: str) -> None:
    # healthy DGX Spark boots print them (sm_120 kernels run on sm_121)
    assert _category(tmp_path, by_id(entry_id).text) in ("unknown", "ready")


def test_a_keyerror_is_a_model_type_only_when_transformers_auto_mapping_raised_it() -> None:
    frames = "/site-packages/transformers/models/auto/configuration_auto.py"
    fam = classify(Raised("KeyError", "'qwen2'"), frames)
    assert fam is not None and fam.category == "tokenizer-config"
    # a MoE model type is still a model type there, not the MoE runner
    moe_type = classify(Raised("KeyError", "'qwen3_moe'"), frames)
    assert moe_type is not None and moe_type.category == "tokenizer-config"
    assert classify(Raised("KeyError", "'qwen3_moe'")) is None
    other = classify(Raised("KeyError", "'qwen2'"), "/site-packages/vllm/engine/arg_utils.py")
    assert other is None or other.category != "tokenizer-config"


@pytest.mark.parametrize(
    ("cls", "msg", "category"),
    [
        ("jinja2.exceptions.TemplateSyntaxError", "expected token 'end of print statement'", "tokenizer-config"),
        ("jinja2.exceptions.TemplateError", "Conversation roles must alternate user/assistant", "tokenizer-config"),
        ("RuntimeError", "CUDA error: named symbol not found", "unsupported-arch-kernel"),
        ("RuntimeError", "PTX .version 8.4 does not support .target sm_120a", "unsupported-arch-kernel"),
        ("RuntimeError", "CUDA driver error: CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "unsupported-arch-kernel"),
        ("AssertionError", "Unsupported GPU: NVIDIA GB10", "unsupported-arch-kernel"),
        ("RuntimeError", "cutedsl_bf16_gemm requires an SM10x GPU", "unsupported-arch-kernel"),
        ("ValueError", "FP8 KV cache is not supported by the Triton attention backend on NVIDIA A10 (compute capability 86); native FP8 (fp8e4nv) requires SM89+.", "unsupported-arch-kernel"),
        ("ValueError", "type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')", "moe-runner"),
        # vLLM config/arg_utils checks: what a value must be, what can only be set with what
        ("ValueError", "--mamba-block-size can only be set with --enable-prefix-caching", "config-validator-refusal"),
        ("ValueError", "Expected num_speculative_tokens to be greater than zero (0).", None),
        ("ValueError", "Cannot set both `pooling_type` and `seq_pooling_type`", "config-validator-refusal"),
        # SGLang server_args checks
        ("ValueError", "--enable-lmcache and --enable-hierarchical-cache are mutually exclusive", "config-validator-refusal"),
        ("ValueError", "--dcp-size 4 must divide --tp-size 6.", "config-validator-refusal"),
        # vLLM fused_moe / FlashInfer: kernel names ending in _moe, MegaMOE, expert classes
        ("ImportError", "Can't import trtllm_fp8_block_scale_moe from flashinfer. Please check flashinfer version.", "moe-runner"),
        ("NotImplementedError", "CPUExpertsFp8 does not support apply_router_weight_on_input=True.", "moe-runner"),
        ("NotImplementedError", "FlashInfer MegaMOE does not support LoRA because it requires a fused path.", "moe-runner"),
    ],
)  # fmt: skip
def test_the_fallback_families_know_the_new_classes_and_phrases(
    cls: str, msg: str, category: str | None
) -> None:
    fam = classify(Raised(cls, msg))
    assert (fam.category if fam is not None else None) == category
