"""The traceback fallback: an exception no signature names, mapped by family to a category.

When no signature matches, the last words of a failing program are still telling: the type
and message of the exception it died of (`huggingface_hub.errors.GatedRepoError: ...`,
`torch.OutOfMemoryError: ...`, `AttributeError: 'Fp8MoEMethod' object has no attribute ...`).
`exception_of` reads one such line (or a `raise X("...")` line whose message line was cut from
a paste); `classify` maps its class and message to a category by family, with `medium`
confidence when the class or a telling phrase names the family, `low` when only a loose word
does. Families are tried in order, the specific before the general. A line that maps to no
family still shows that the boot failed (it is never `ready`), and stays `unknown`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# `pkg.mod.ClassNameError: message` or `ClassNameError [address=...]: message`, anywhere after a
# prefix (a rank tag, a logger's head, a quote); the class must look like an exception's.
_SUFFIX = r"(?:Error|Exception|Exit|Interrupt|NotFound|IsEnabled|Failure)"
EXCEPTION = re.compile(
    r"(?:^|[\s:\]>|(\"'`])(?P<cls>(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Z][A-Za-z0-9_]*" + _SUFFIX + r")"
    r"(?:\s*\[[^\]]*\])?: +(?P<msg>\S.*)"
)
# a class alone on its line: raised without a message (`AssertionError`, shm_broadcast's
# `raise TimeoutError`), also behind a head that ends in `]`, `:` or `)` (vLLM logs every
# traceback line behind `ERROR 09-01 10:00:00 [core.py:612] `; `[rank0]: `; `(EngineCore pid=1) `)
BARE = re.compile(
    r"^(?:.*[\]:)]\s+|\s*)"
    r"(?P<cls>(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Z][A-Za-z0-9_]*(?:Error|Exception))\s*$"
)
RAISE = re.compile(r"\braise (?P<cls>[A-Z][A-Za-z0-9_]*" + _SUFFIX + r")\((?P<msg>.*)")
# C++ exceptions (`terminate called after throwing ... what():  CUDA error: ...`) and
# TensorRT-LLM's `[TensorRT-LLM][ERROR] ...`: the class is not printed, the message is
NATIVE = re.compile(r"\bwhat\(\): +(?P<msg>\S.*)|\[TensorRT-LLM\]\[ERROR\] +(?P<trt>\S.*)")
# IPython/Jupyter print the class before the traceback: `EntryNotFoundError   Traceback (...)`
NOTEBOOK = re.compile(
    r"^\s*(?P<cls>(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Z][A-Za-z0-9_]*" + _SUFFIX + r")\s{2,}Traceback"
)
# pydantic's ValidationError prints each error under its model's name, the raised error's type
# first: pydantic-core's `value_error` / `assertion_error` templates "Value error, {error}" and
# "Assertion failed, {error}" (vLLM's config classes are pydantic dataclasses since 2025: its
# refusals print "Value error, Total number of attention heads (64) must be divisible ...")
PYDANTIC = re.compile(r"(?:^|[\s:\]>|(\"'`])(?P<kind>Value error|Assertion failed), (?P<msg>\S.*)")
TRACEBACK = "Traceback (most recent call last)"
KEYWORDS: tuple[bytes, ...] = (
    b"what():",
    b"Value error, ",
    b"Assertion failed, ",
    b"Error",
    b"Exception",
    b"NotFound",
    b"IsEnabled",
    TRACEBACK.encode(),
)
"""Literal text every exception line holds: the scan's prefilter for them."""


@dataclass(frozen=True)
class Family:
    category: str
    confidence: str  # medium: the class or a telling phrase; low: a loose word
    cls: re.Pattern[str] | None  # the class name (last dotted part) must match, if given
    msg: re.Pattern[str] | None  # the message (or the class) must match, if given
    why: str
    frames: re.Pattern[str] | None = None  # or: the traceback's file paths match this
    unless: re.Pattern[str] | None = None  # the message says another story: never this family


def _f(
    category: str,
    confidence: str,
    cls: str | None,
    msg: str | None,
    why: str,
    frames: str | None = None,
    unless: str | None = None,
) -> Family:
    return Family(
        category,
        confidence,
        re.compile(cls) if cls else None,
        re.compile(msg) if msg else None,
        why,
        re.compile(frames) if frames else None,
        re.compile(unless) if unless else None,
    )


_MOE_FRAMES = (
    r"fused_moe|/moe/|_moe\.py|moe_runner|moe_gemm|/deep_ep/|/deep_gemm/|_moe_|/moe_|"
    r"[a-z_]*experts?\.py|/ep_moe/|/fused_marlin|/cutlass_moe|/flashinfer/fused_moe"
)
# the wordings MoE code raises (vLLM fused_moe/*, quantization/*_moe.py, SGLang srt/layers/moe/*,
# FlashInfer fused_moe): a MoE class, method or runner, experts, the router's top-k ids, the
# fused w13/w2 weights, DeepEP/DeepGEMM grouped GEMMs, the Marlin/CUTLASS MoE kernels
_MOE_WORDS = (
    r"MoE|Moe[A-Z]|[Ee]xperts?\b|moe_|[Ff]used_?[Mm]o[Ee]|DeepEP|deep_ep|[Gg]rouped ?GEMM|"
    r"[Mm]arlin ?MoE|[Cc]utlass ?MoE|TritonExperts|topk_ids|top_?k.*experts|w13_|w2_weight|"
    r"expert_map|num_experts|MoE(?:Runner|Method)|ep_size|moe_align|"
    # FlashInfer's kernel names (`trtllm_fp8_block_scale_moe`), MegaMOE, env flags (`..._MOE_FP4`),
    # the expert classes spelled together (`CPUExpertsFp8`, `CutlassExpertsW4A8Fp8`)
    # (not a quoted model type: `KeyError: 'qwen3_moe'` is a transformers too old for the model)
    r"_moe\b(?!')|_MOE_|\bMOE\b|Mega ?MOE|[A-Za-z]Experts[A-Z0-9]"
)
# the weight files themselves or the loader's shape checks (vLLM weight_utils / default_loader,
# SGLang model_loader/weight_utils, safetensors, torch.load): a shard, a tensor that does not fit
# its parameter ("Attempted to load weight (...) into parameter (...)"), a missing/unexpected
# checkpoint key, torch's weights-only unpickler
_WEIGHT_WORDS = (
    r"\.safetensors|[Ss]afe[Tt]ensors|state_dict|\bshards?\b|model weights|weights? file|"
    r"PytorchStreamReader|zip archive|central directory|invalid load key|loaded_weight|"
    r"\.bin\b|\.pt\b|\.gguf\b|checkpoint|index\.json|pytorch_model|[Aa]ttempted to load weight|"
    r"into parameter|size mismatch for|[Mm]issing key\(?s\)?|[Uu]nexpected key\(?s\)?|"
    r"no module or parameter named|params_dict|weight_loader|[Ww]eights only load|"
    r"[Nn]o such tensor|missing tensor|tensor .* not found|\.weight'|_scale_inv'|qweight|"
    r"\bconsolidated\b|weight_map"
)

# the engines' argument and config checks (vLLM arg_utils / config/*.py / platforms/*.py, SGLang
# server_args.py): an exception raised there is the validator's refusal, whatever it names
ARG_CHECK_FRAMES = (
    r"/engine/arg_utils\.py|/server_args\.py|/vllm/config/[a-z_]+\.py|/vllm/config\.py|"
    r"_verify_[a-z_]+|/platforms/[a-z_]+\.py"
)

# NCCL's result codes that are not the network: ncclUnhandledCudaError ("unhandled cuda error
# (run with NCCL_DEBUG=INFO for details)", NCCL's ncclGetErrorString; "Call to CUDA function
# failed", torch's NCCLUtils; "Cuda failure 'X'", NCCL's CUDACHECK) is a CUDA call that failed
# inside NCCL (a GPU fault, a driver/runtime problem, an NVLS/IPC setup), and vLLM's
# pynccl_wrapper raise line `raise RuntimeError(f"NCCL error: {error_str}")` is a template that
# names no result at all. ncclInvalidUsage ("invalid usage (run with NCCL_DEBUG=WARN for
# details)") is the caller's misuse of NCCL (two ranks on one GPU: "Duplicate GPU detected"; a
# wrong rank or count), never the network (the fortieth set, a-0003). A DistBackendError or an
# "NCCL error" saying so is not a network error.
_NOT_THE_NETWORK = (
    r"unhandled cuda error|ncclUnhandledCudaError|Call to CUDA function failed|[Cc]uda failure|"
    r"NCCL error: \{error_str\}|'invalid usage|ncclInvalidUsage"
)

# Python's words for a call that does not fit the function it calls (a TypeError)
_CALL_MISMATCH = (
    r"got an unexpected keyword argument|missing [0-9]+ required (?:positional|keyword-only) "
    r"argument|takes [0-9]+ positional arguments? but [0-9]+ (?:were|was) given"
)

# (nor a model refused by its architecture's name: `Unknown architecture Glm4MoeForCausalLM in
# .../config.json` is a loader that does not know the model, whatever its class is called; the
# forty-seventh set's e-0003 was read as the MoE runner)
_ARCHITECTURE_REFUSED = (
    r"[Uu]nknown architecture|[Aa]rchitectures? .{0,120}(?:are|is) not supported"
    r"|does not recognize this architecture"
    # SGLang's registry lists every architecture it knows, MoE ones among them (the fifty-first
    # set's d-0008: "Unsupported architectures: ChatGLMForConditionalGeneration. Supported list")
    r"|[Uu]nsupported architectures?: "
)

FAMILIES: tuple[Family, ...] = (
    _f("out-of-memory", "medium", r"OutOfMemory|^MemoryError$", None, "an out-of-memory error"),
    _f(
        "out-of-memory",
        "medium",
        None,
        r"(?i)out of memory|\bOOM\b",
        "memory ran out",
        # SGLang's launcher names the OOM killer only as the cause of exit code -9; beside any
        # other exit code its hint is not evidence of memory (the fifty-second set's m-0006)
        unless=r"exit code: -(?!9\))[0-9]+\)\. If exit code is -9",
    ),
    # an allocator that could not allocate says so without "out of memory" (cuBLAS's workspace,
    # the CUDA runtime's code names, the caching allocator, C++ bad_alloc, ENOMEM): issue 29
    _f(
        "out-of-memory",
        "medium",
        None,
        r"CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|"
        r"[Ff]ailed to allocate (?:memory|[0-9])|[Cc]annot allocate memory|std::bad_alloc|"
        r"\bbad_alloc\b|cudaMalloc(?:Async|Host)? (?:failed|returned)|NVML_ERROR_MEMORY|\bENOMEM\b",
        "an allocator that could not allocate",
    ),
    # a KeyError raised by transformers' Auto mappings: the model_type (or config class) is one
    # this transformers does not know, i.e. the model is newer than the image's transformers
    _f(
        "tokenizer-config",
        "medium",
        r"^KeyError$",
        None,
        "a model type the installed transformers does not know",
        frames=r"models/auto/(?:configuration_auto|tokenization_auto|auto_factory)\.py",
    ),
    # a ValueError raised by transformers' own config code (the innermost frame a model's
    # configuration_*.py, configuration_auto.py or configuration_utils.py): the installed
    # transformers cannot load this model's config, whichever engine asked (a llama3-style
    # `rope_scaling` an older LlamaConfig refuses; a remote config whose name is already
    # registered; the forty-third set), not the engine refusing a flag
    _f(
        "tokenizer-config",
        "medium",
        r"^ValueError$",
        None,
        "the installed transformers cannot load this model's config",
        frames=r"transformers/(?:models/[a-z0-9_]+/configuration_[a-z0-9_]+|configuration_utils)"
        r"\.py$",
    ),
    # a library the tokenizer's code imports is missing, raised inside the tokenizer's load
    # (tiktoken's `import blobfile` for Kimi-K2; the thirty-fourth set)
    _f(
        "tokenizer-config",
        "medium",
        r"^(?:ModuleNotFoundError|ImportError)$",
        None,
        "a library the tokenizer needs is missing",
        frames=r"tiktoken/|/tokenization_[A-Za-z0-9_]+\.py|sentencepiece",
    ),
    # a KeyError whose message is a per-layer parameter path ('model.layers.3.mlp.experts.
    # w2_weight_scale', 'layers.35.mlp.gate.g_idx'): the loader looked a checkpoint tensor up in
    # the model's parameters and it is not there (a quantized checkpoint the model class does
    # not lay out that way): the weights', even when the path names experts (issue 29)
    _f(
        "weights-files",
        "medium",
        r"^KeyError$",
        r"^KeyError: ['\"]?(?:[A-Za-z_][A-Za-z0-9_]*\.)*(?:layers?|h|blocks?)\.[0-9]+\."
        r"[A-Za-z0-9_.]+['\"]?\s*$",
        "a checkpoint tensor the model's parameters do not have",
    ),
    # raised inside the fused-MoE code, whatever it says (an arch or shape refusal there is
    # the MoE runner's: the corpus README's rule, and the runners' own asserts say nothing)
    _f("moe-runner", "medium", None, None, "the MoE runner", frames=_MOE_FRAMES),
    # any class (a TypeError, a Triton CompilationError, a C++ what()) whose message names the
    # MoE code, before the architecture family: `W4AFP8 MoE is unsupported on SM89` is a MoE
    # runner without kernels for this GPU (the corpus README's rule), not a kernel image
    # (not a call that does not fit the function it calls: `FusedMoE.__init__() got an
    # unexpected keyword argument 'reduce_results'` is a model file or plugin written for another
    # release of the engine, an API drift that says nothing of the runner chosen; a wrong
    # category costs more than `unknown`, the fortieth set's d-0005)
    _f(
        "moe-runner",
        "medium",
        None,
        _MOE_WORDS,
        "the MoE layer or runner",
        unless=_CALL_MISMATCH + "|" + _ARCHITECTURE_REFUSED,
    ),
    # Triton refusing FP8 E4M3 below sm_89/sm_90 (`type fp8e4nv not supported in this
    # architecture`): the engines' Triton FP8 kernels on such GPUs are the fused-MoE ones (dense
    # FP8 takes Marlin/CUTLASS there), so the MoE runner cannot run here (the corpus README's
    # rule); low, since other FP8 Triton kernels (block-scaled GEMMs, some attention) exist
    # (not when the message names the attention path: vLLM's Triton attention/MLA backends refuse
    # an FP8 KV cache below SM89 in the same words, and that is the GPU's, not the MoE runner's)
    _f(
        "moe-runner",
        "low",
        None,
        r"^(?!.*(?:[Aa]ttention|KV cache|MLA backend)).*(?:fp8e4nv|f8e4m3nv)",
        "a Triton FP8 MoE kernel below sm_90",
    ),
    # a size the tensor-parallel degree does not divide ("The choosen size 50432 is not
    # compatible with sharding on 3 shards", "... must be divisible by tensor parallel size"):
    # the engine refusing the TP flag for this model, even though it says "shards" (issue 29)
    _f(
        "config-validator-refusal",
        "medium",
        r"AssertionError|ValueError|RuntimeError|NotImplementedError",
        r"not compatible with sharding|(?:must be|is not|isn't|be) (?:evenly )?divisible by|"
        r"not divisible by",
        "a size the tensor-parallel degree does not divide",
    ),
    # who refused decides: an argument/config check of the engine (its traceback ends in
    # arg_utils.py, server_args.py or config/*.py) refusing a backend *because of* the GPU is the
    # validator's refusal (change the flag), even when its words name the architecture; a kernel
    # failing at run time is the architecture's (below). The message still says the GPU part.
    _f(
        "config-validator-refusal",
        "medium",
        r"^(?:ValueError|NotImplementedError|AssertionError|VLLMValidationError|TypeError)$",
        None,
        "the engine's argument checks (they name the GPU, but the flag is what to change)",
        frames=ARG_CHECK_FRAMES,
    ),
    _f(
        "unsupported-arch-kernel",
        "medium",
        None,
        r"no kernel image|(?i:\bsm[_ ]?(?:1[0-2][0-9x]|[89][0-9x])[af]?\b)|compute capability|"
        r"(?i:unsupported (?:gpu |cuda )?arch)|not compiled for|invalid device function|"
        r"NO_BINARY_FOR_GPU|(?i:ptxas)|[Bb]lackwell|[Hh]opper|cubin|fatbin|"
        r"(?i:not supported on (?:this|your) (?:gpu|device)|gpu architecture|illegal instruction)|"
        r"(?i:supported in this architecture|unsupported (?:sm|architecture)|no binary for gpu)|"
        r"cudaErrorNoKernelImageForDevice|CUDA_ERROR_NO_BINARY_FOR_GPU|named symbol not found|"
        r"cudaErrorSymbolNotFound|computeCapability not supported|(?i:PTX \.?version)|"
        r"_STATUS_ARCH_MISMATCH|[Uu]nsupported GPU\b|UNSUPPORTED_PTX_VERSION|UnsupportedPtxVersion|"
        # ROCm's spellings of the same (HIP runtime codes, a gfx target the build lacks)
        r"NoBinaryForGpu|hipErrorInvalidDeviceFunction|HSA_STATUS_ERROR_INVALID_ISA|"
        r"(?i:no (?:kernel|code object) (?:image )?(?:found |available )?for (?:gfx|target))|"
        # a kernel's dispatcher at run time, the words the other way round: TensorRT-LLM's
        # CUTLASS runners, "Arch unsupported for CUTLASS FP4 GEMM" (the forty-ninth set's d-0001)
        r"\bArch unsupported for\b",
        "a kernel or build that does not run on this GPU",
        # the engine's dtype check names the compute capability too, but it is the validator's
        # refusal (dtype-needs-compute-capability; the fifty-first set's m-0001: vLLM's
        # "Bfloat16 is only supported on GPUs with compute capability of at least 8.0")
        unless=r"Bfloat16 is only supported on GPUs|doesn't support bf16",
    ),
    # raised while reading the weight files, whatever it says (a shape assert, a bare error)
    _f(
        "weights-files",
        "low",
        None,
        None,
        "the weight loader",
        frames=r"weight_utils\.py|/model_loader/(?:default|gguf|sharded_state|bitsandbytes)_loader\.py|"
        r"/model_loader/loader\.py|/safetensors/|/gguf/|_load_state_dict|/torch/serialization\.py",
    ),
    # the safetensors/unpickler classes are about the weight files whatever they say
    _f(
        "weights-files",
        "medium",
        r"SafetensorError|HeaderTooLarge|MetadataIncompleteBuffer|InvalidHeaderDeserialization|"
        r"UnpicklingError",
        None,
        "the weight files (safetensors or torch.load)",
    ),
    # a hub lookup (or a missing local file) for a weight shard is the weights', not the config's
    # (requests' HTTPError is what the hub client chains its EntryNotFoundError from: a 404 on
    # `.../resolve/main/unet/diffusion_pytorch_model.bin`)
    _f(
        "weights-files",
        "medium",
        r"EntryNotFound|LocalEntryNotFound|FileNotFound|HfHubHTTP|OSError|IncompleteSnapshot|"
        r"^HTTPError$",
        r"\.safetensors|\.bin\b|\.pt\b|\.gguf\b|\.pth\b|model weights|\bshards?\b",
        "a weight shard that is not there",
    ),
    _f(
        "tokenizer-config",
        "medium",
        r"EntryNotFound|RepositoryNotFound|RevisionNotFound|GatedRepo|HFValidation|HfHubHTTP|"
        r"OfflineModeIsEnabled|CacheNotFound|TokenizerError|ConfigError$|JSONDecodeError|"
        r"DisabledRepo|RevisionResolution|LocalTokenNotFound|CorruptedCache|CachedRepoTreeNotFound|"
        r"IncompleteSnapshot|TokenizerException|MistralCommonException|"
        r"^Template(?:Syntax|Runtime)?Error$|^UndefinedError$",
        None,
        "the Hugging Face hub, the model config or its chat template",
    ),
    _f(
        "weights-files",
        "medium",
        r"Safetensor|FileNotFoundError|OSError|ValueError|KeyError|RuntimeError|EOFError|"
        r"UnpicklingError|AssertionError|IndexError|TypeError",
        _WEIGHT_WORDS,
        "the weight files",
    ),
    _f(
        "tokenizer-config",
        "medium",
        r"OSError|ValueError|KeyError|TypeError|FileNotFoundError|HTTPError|Exception|"
        r"ReadTimeout|ConnectTimeout|MaxRetryError|RuntimeError|ImportError|ModuleNotFoundError",
        r"huggingface\.co|[Tt]okenizer|config\.json|params\.json|chat.template|[Rr]epo id|"
        r"config format|gated repo|is restricted|preprocessor_config|generation_config|"
        r"model type|does not recognize this architecture|Unrecognized model|"
        r"Unrecognized configuration class|(?i:sentencepiece)|(?i:tiktoken)|vocab|ModelProto|"
        r"trust_remote_code|[Rr]epository [Nn]ot [Ff]ound|valid model identifier|tekken|"
        r"mistral_common",
        "the tokenizer or the model config",
    ),
    _f(
        "rendezvous-network",
        "medium",
        r"DistNetworkError|DistStoreError|DistBackendError|Connection\w*Error|IoException|"
        r"gaierror|socket\.timeout|^timeout$|^Rendezvous\w*(?:Error|Closed)",
        None,
        "torch.distributed's rendezvous or a peer connection",
        unless=_NOT_THE_NETWORK,
    ),
    _f(
        "rendezvous-network",
        "medium",
        None,
        r"nccl(?:Internal|System|Remote)|(?i:NCCL error)(?!.*unhandled cuda)|[Gg]loo|"
        r"Connection (?:refused|reset|closed|timed out)|TCPStore|rendezvous|MASTER_ADDR|"
        r"[Ss]ocket|[Nn]etwork is unreachable|[Nn]o route to host|Address already in use|"
        r"IoException|c10d",
        "the network between the ranks",
        unless=_NOT_THE_NETWORK,
    ),
    # a timeout class is a timer that fired, whatever it says (vLLM's shm_broadcast and RPC
    # waits raise a bare `TimeoutError`; Ray's `GetTimeoutError`; `subprocess.TimeoutExpired`)
    _f(
        "watchdog-timeout",
        "low",
        r"^(?:TimeoutError|Timeout|TimeoutExpired|GetTimeoutError|DeadlineExceeded|"
        r"WaitTimeoutError|FutureTimeoutError|EngineTimeoutError)$",
        None,
        "a timer that fired",
    ),
    _f(
        "watchdog-timeout",
        "low",
        r"Timeout|TimeoutError",
        r"[Tt]imed? ?out|[Tt]imeout|[Ww]atchdog|[Hh]eartbeat",
        "a timer that fired",
    ),
    _f(
        "watchdog-timeout",
        "low",
        None,
        r"[Ww]atchdog|[Hh]eartbeat|[Tt]imed[ -]?out\b|timeout of [0-9]|[Tt]imeout (?:error|expired|"
        r"reached|exceeded)|(?:not|stopped) responding|did not respond|[Dd]eadline exceeded|"
        r"took too long|within [0-9]+ ?s(?:econds)?\b|after [0-9]+ ?s(?:econds)? of",
        "a timer that fired",
    ),
    _f(
        "config-validator-refusal",
        "low",
        r"NotImplementedError|ValueError|AssertionError|TypeError|RuntimeError|AttributeError|"
        r"Exception",
        r"(?i)not supported|does not support|unsupported|not implemented|divisible by|"
        r"head ?(?:size|dim)|backend|quantization|dtype|is not valid|only supports?|"
        r"invalid|requires|not compatible|incompatible|does not yet support|not yet supported|"
        r"mutually exclusive|cannot be combined",
        "the engine refusing the flags or backend for this model",
        # a device runtime's error code is not the engine refusing a flag ("level_zero backend
        # failed with error: 20 (UR_RESULT_ERROR_DEVICE_LOST)": the twenty-fifth set)
        # (an NCCL result is the collective library's, never the engine's argument check: its
        # "invalid usage" says "invalid"; the fortieth set)
        unless=r"backend failed with error|_RESULT_ERROR_|CUDA error|HIP error|NCCL error",
    ),
    # a ValueError in the engine's argument/config checks says what a value must be (vLLM
    # config/*.py, arg_utils: "must be greater than", "can only be set with", "Cannot set both")
    _f(
        "config-validator-refusal",
        "low",
        r"^(?:ValueError|VLLMValidationError|ArgumentTypeError|ArgumentError)$",
        r"\bmust (?:be|not|have|match|contain|declare)\b|\bcan only be (?:set|used)\b|"
        r"[Cc]annot (?:set|use|specify|combine|enable)\b|should only be set|exceeds the maximum|"
        r"is only (?:applicable|allowed|valid)|\bmust divide\b|is required when|"
        r"should be (?:in range|a|an|one of)\b|has no effect without|\bneeds --|"
        # "Tensor parallel size (16) cannot be larger than the number of available GPUs (8)"
        r"cannot be (?:larger|greater|bigger|smaller|less|more) than",
        "the engine's argument checks refusing a value",
    ),
    _f(
        "config-validator-refusal",
        "low",
        r"^ValidationError$",
        r"validation errors? for [A-Za-z]*(?:Config|Args)\b",
        "the engine's config classes refusing a value",
    ),
)


@dataclass(frozen=True)
class Raised:
    cls: str  # the full dotted class name as printed
    msg: str

    @property
    def name(self) -> str:
        return self.cls.rsplit(".", 1)[-1]


def exception_of(text: str) -> Raised | None:
    """The exception a line states (`Cls: message`, or a `raise Cls(...)` line), if any."""
    if m := RAISE.search(text):
        return Raised(m.group("cls"), m.group("msg").strip().rstrip(")"))
    m = EXCEPTION.search(text)
    if m is not None:
        return Raised(m.group("cls"), m.group("msg").strip())
    if m := PYDANTIC.search(text):
        cls = "ValueError" if m.group("kind") == "Value error" else "AssertionError"
        return Raised(cls, m.group("msg").strip())
    # only a line that ends in the class can be one (and BARE's head backtracks over the line)
    if text.rstrip().endswith(("Error", "Exception")) and (m := BARE.match(text)):
        return Raised(m.group("cls"), "")
    if m := NATIVE.search(text):
        return Raised("what()", (m.group("msg") or m.group("trt") or "").strip())
    if m := NOTEBOOK.search(text):
        return Raised(m.group("cls"), "")
    if TRACEBACK in text:  # a traceback whose last line was cut: it failed, saying not why
        return Raised("Traceback", "(most recent call last)")
    return None


_DISABLED: set[int] = set()
"""Indices of FAMILIES that `classify` skips: only ever set by `without_families` (the
leave-one-source-out bench scores a tracker family without the rules written from it)."""


@contextmanager
def without_families(indices: frozenset[int] | set[int]) -> Iterator[None]:
    """Within the block, `classify` ignores these FAMILIES (by index). Not for product code."""
    before = set(_DISABLED)
    _DISABLED.update(indices)
    try:
        yield
    finally:
        _DISABLED.clear()
        _DISABLED.update(before)


def family_index(fam: Family) -> int:
    """The family's index in FAMILIES: its id in `calibration.json` (regenerated with it)."""
    return next(i for i, f in enumerate(FAMILIES) if f is fam)


# words that make what follows a guess or an example, not a statement: SGLang's barrier error
# says "It is likely due to unexpected failures (e.g. OOM) or a slow node", which is no OOM
_HEDGE = re.compile(
    r"(?i)(?:\be\.g\.?|\bi\.e\.?|such as|for example|possibly|perhaps|maybe|might|may be|"
    r"could be|likely|if you see|check (?:for|whether|if))[^.;:]{0,40}$"
)


def _stated(pattern: re.Pattern[str], subject: str) -> bool:
    """`pattern` matches `subject` somewhere it is not hedged (an example, a guess)."""
    return any(not _HEDGE.search(subject[: m.start()]) for m in pattern.finditer(subject))


def _holds(fam: Family, raised: Raised, subject: str, frames: str) -> bool:
    if fam.cls is not None and not fam.cls.search(raised.name):
        return False
    if fam.unless is not None and fam.unless.search(subject):
        return False
    if fam.msg is None and fam.frames is not None:  # known only by where it was raised
        return fam.frames.search(frames) is not None
    if fam.msg is None or _stated(fam.msg, subject):
        return True
    return fam.frames is not None and fam.frames.search(frames) is not None


def classify(raised: Raised, frames: str = "") -> Family | None:
    """The first family whose class pattern holds and whose message pattern holds (or, for a
    family that knows where its errors are raised, whose frames match `frames`)."""
    subject = f"{raised.cls}: {raised.msg}"
    for i, fam in enumerate(FAMILIES):
        if _DISABLED and i in _DISABLED:
            continue
        if _holds(fam, raised, subject, frames):
            return fam
    return None


def holding(raised: Raised, frames: str = "") -> list[int]:
    """Every family (index) whose patterns hold for this exception, not only the first: which
    rules a corpus case supports (the provenance the leave-one-source-out bench needs)."""
    subject = f"{raised.cls}: {raised.msg}"
    return [i for i, fam in enumerate(FAMILIES) if _holds(fam, raised, subject, frames)]
