"""Faults on request: a small grammar, and the real failure texts they end with.

A fault is given per rank with `--sim-fault SPEC` (repeatable; it applies to the rank whose
command line carries it) or in the environment, `CLUSTER_SIM_FAULT=SPEC` (shared by all ranks,
so name the rank):

    CLUSTER_SIM_FAULT="rank=3:slow-read=2MB/s;rank=5:exit-at=kv:signature=kv-budget"

    SPEC   := FAULT (";" FAULT)*
    FAULT  := ITEM (":" ITEM)*              one action, its options, and optionally rank=
    ITEM   := KEY "=" VALUE | KEY

    rank=3 | rank=1,5 | rank=*              which node ranks (env default: all; flag default: this)
    slow-read=2MB/s                         cap this rank's weight reads (KB, MB, GB, KiB, MiB, GiB)
    hang-at=PHASE                           stop at PHASE and never go on (sockets stay open)
    exit-at=PHASE[:signature=NAME][:code=N][:signal=KILL]
                                            fail at PHASE with a real failure text, exit N (1)
    hog=SIZE[:at=PHASE]                     the worker really allocates and touches SIZE bytes
    drop-peer[:at=PHASE]                    this rank's rendezvous socket is reset; the rank hangs
    slow-serve=SECONDS[:after=S]            rank 0: every request waits SECONDS more (a slow canary)
    leak=RATE[:after=S][:max=SIZE]          the rank allocates and touches RATE (e.g. 50MB/s) up to
                                            max (default 1GiB): a leak on its node (on the
                                            built-in cluster, modelled in that node's own
                                            reading instead: simulator/nodeview.py)

The `serving` phase is after READY: `exit-at=serving:after=30` dies 30 s after the group serves
(RANK_DIED), `hang-at=serving:after=30` on rank 0 wedges it (the process lives, /health says 200,
requests never finish and the generated-tokens counter stays flat: WEDGED). `after=` is in real
seconds from the moment the rank serves (default 0).

PHASE is one of `PHASES` (SGLang has all of them; vLLM has no barrier, autotune or warmup).
`load` means halfway through this rank's share of the weights. Faults are literal: 2MB/s is 2 MB
per second on this machine and hog=512MiB allocates 512 MiB, whatever the time scale.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from orchestrator.simulator import dialects

ENV_FAULT = "CLUSTER_SIM_FAULT"

# In boot order. Each engine runs the ones it has (see `phases_of`).
PHASES: tuple[str, ...] = (
    "init",  # rendezvous and process-group creation
    "load",  # weights; a fault here fires halfway through this rank's share
    "barrier",  # SGLang's post-load monitored_barrier
    "kv",  # KV cache profiling and allocation (attention backend init)
    "autotune",  # SGLang: FlashInfer autotune (seed 002 boot 3)
    "graph",  # CUDA graph capture
    "http",  # rank 0's HTTP server start
    "warmup",  # SGLang: the warmup forward before "fired up" (seed 002 boot 6)
    "ready",  # serving: fires on the first generation request
    "serving",  # after READY, `after=` seconds into serving (the serving watch's drills)
)
_ENGINE_PHASES = {
    "sglang": PHASES,
    "vllm": ("init", "load", "kv", "graph", "http", "ready", "serving"),
}

Action = Literal["slow-read", "hang-at", "exit-at", "hog", "drop-peer", "slow-serve", "leak"]
_ACTIONS: tuple[Action, ...] = get_args(Action)
_SIGNALS = frozenset({"KILL", "TERM", "ABRT", "SEGV", "BUS", "INT"})


class FaultError(ValueError):
    """A fault spec that does not parse; the message names the item and the grammar."""


@dataclass(frozen=True)
class Fault:
    action: Action
    ranks: frozenset[int] | None = None  # None: every rank
    phase: str | None = None
    rate: float | None = None  # bytes per second (slow-read)
    size: int | None = None  # bytes (hog)
    signature: str | None = None
    code: int = 1
    signal: str | None = None
    after: float = 0.0  # seconds into serving (the `serving` phase, slow-serve, leak)
    delay: float | None = None  # slow-serve: seconds added to each request
    raw: str = ""

    def applies_to(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks


def phases_of(engine: str) -> tuple[str, ...]:
    return _ENGINE_PHASES[engine]


# ---------------------------------------------------------------------------------------------
# Units

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "tb": 10**12,
}
_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str) -> int:
    """`2GiB`, `500MB`, `1.5G`, `4096` -> bytes (KB/MB/GB are decimal, KiB/MiB/GiB binary)."""
    m = _QUANTITY.match(text)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise FaultError(f"{text!r} is not a size (examples: 4096, 500MB, 2GiB)")
    return round(float(m.group(1)) * _UNITS[unit])


def parse_rate(text: str) -> float:
    """`2MB/s`, `16M`, `500KiB/s` -> bytes per second; `0` or `unlimited` -> 0 (no limit)."""
    value = text.strip()
    if value.lower() in ("0", "unlimited", "none", "off"):
        return 0.0
    value = value.removesuffix("/s").removesuffix("ps")
    try:
        return float(parse_size(value))
    except FaultError:
        raise FaultError(f"{text!r} is not a rate (examples: 2MB/s, 16MiB/s, unlimited)") from None


# ---------------------------------------------------------------------------------------------
# The grammar


def parse_faults(spec: str, *, default_ranks: frozenset[int] | None = None) -> list[Fault]:
    """Every fault in `spec`. `default_ranks` applies where a fault names no `rank=`."""
    faults: list[Fault] = []
    for part in spec.split(";"):
        if part.strip():
            faults.append(_parse_one(part.strip(), default_ranks))
    return faults


def _parse_one(text: str, default_ranks: frozenset[int] | None) -> Fault:
    items: dict[str, str | None] = {}
    for item in text.split(":"):
        key, eq, value = item.strip().partition("=")
        key = key.strip()
        if not key:
            raise FaultError(f"{text!r}: empty item (items are KEY=VALUE joined by ':')")
        if key in items:
            raise FaultError(f"{text!r}: {key} given twice")
        items[key] = value.strip() if eq else None
    actions = [k for k in items if k in _ACTIONS]
    unknown = [k for k in items if k not in _ACTIONS and k not in _OPTIONS]
    if unknown:
        raise FaultError(
            f"{text!r}: unknown key {unknown[0]!r} (actions: {', '.join(_ACTIONS)}; "
            f"options: {', '.join(sorted(_OPTIONS))})"
        )
    if len(actions) != 1:
        raise FaultError(f"{text!r}: give exactly one action of {', '.join(_ACTIONS)}")
    action: Action = actions[0]
    arg = items[action]
    ranks = _ranks(items["rank"], text) if "rank" in items else default_ranks
    kw: dict[str, object] = {"action": action, "ranks": ranks, "raw": text}

    def need_value() -> str:
        if not arg:
            raise FaultError(f"{text!r}: {action} needs a value ({action}=...)")
        return arg

    if action == "slow-read":
        kw["rate"] = parse_rate(need_value())
        if kw["rate"] == 0:
            raise FaultError(f"{text!r}: slow-read needs a positive rate")
    elif action in ("hang-at", "exit-at"):
        kw["phase"] = _phase(need_value(), text)
    elif action == "hog":
        kw["size"] = parse_size(need_value())
        kw["phase"] = _phase(items.get("at") or "load", text)
    elif action == "slow-serve":
        kw["delay"] = _seconds(need_value(), text)
        kw["phase"] = "serving"
    elif action == "leak":
        kw["rate"] = parse_rate(need_value())
        if kw["rate"] == 0:
            raise FaultError(f"{text!r}: leak needs a positive rate")
        kw["size"] = parse_size(items.get("max") or "1GiB")
        kw["phase"] = "serving"
    elif action == "drop-peer":
        if arg:
            raise FaultError(f"{text!r}: drop-peer takes no value; use drop-peer:at=PHASE")
        kw["phase"] = _phase(items.get("at") or "load", text)
    allowed = _ALLOWED[action]
    for key in items:
        if key in _OPTIONS and key not in allowed:
            raise FaultError(f"{text!r}: {key} does not apply to {action}")
    if "after" in items:
        if kw.get("phase") != "serving":
            raise FaultError(f"{text!r}: after= applies to the serving phase only")
        kw["after"] = _seconds(items["after"] or "", text)
    if "signature" in items:
        name = items["signature"] or ""
        if name not in SIGNATURES:
            raise FaultError(
                f"{text!r}: unknown signature {name!r} (known: {', '.join(SIGNATURES)})"
            )
        kw["signature"] = name
    if "code" in items:
        raw = items["code"] or ""
        if not raw.isdigit() or not 1 <= int(raw) <= 255:
            raise FaultError(f"{text!r}: code must be 1..255, got {raw!r}")
        kw["code"] = int(raw)
    if "signal" in items:
        sig = (items["signal"] or "").upper().removeprefix("SIG")
        if sig not in _SIGNALS:
            raise FaultError(f"{text!r}: signal must be one of {', '.join(sorted(_SIGNALS))}")
        kw["signal"] = sig
    return Fault(**kw)  # type: ignore[arg-type]


_OPTIONS = frozenset({"rank", "signature", "code", "signal", "at", "after", "max"})
_ALLOWED: dict[str, frozenset[str]] = {
    "slow-read": frozenset({"rank"}),
    "hang-at": frozenset({"rank", "after"}),
    "exit-at": frozenset({"rank", "signature", "code", "signal", "after"}),
    "hog": frozenset({"rank", "at"}),
    "drop-peer": frozenset({"rank", "at"}),
    "slow-serve": frozenset({"rank", "after"}),
    "leak": frozenset({"rank", "after", "max"}),
}


def _seconds(value: str, text: str) -> float:
    raw = value.strip().removesuffix("s")
    try:
        seconds = float(raw)
    except ValueError:
        raise FaultError(
            f"{text!r}: {value!r} is not a number of seconds (e.g. 30 or 2.5s)"
        ) from None
    if seconds < 0 or seconds != seconds:
        raise FaultError(f"{text!r}: seconds must be >= 0, got {value!r}")
    return seconds


def _ranks(value: str | None, text: str) -> frozenset[int] | None:
    if value is None or value == "":
        raise FaultError(f"{text!r}: rank needs a value (rank=3, rank=1,5 or rank=*)")
    if value == "*":
        return None
    try:
        ranks = frozenset(int(v) for v in value.split(","))
    except ValueError:
        raise FaultError(f"{text!r}: rank={value!r} is not a rank list") from None
    if any(r < 0 for r in ranks):
        raise FaultError(f"{text!r}: ranks are >= 0")
    return ranks


def _phase(value: str, text: str) -> str:
    if value not in PHASES:
        raise FaultError(f"{text!r}: unknown phase {value!r} (phases: {', '.join(PHASES)})")
    return value


def faults_for(rank: int, flag_specs: Iterable[str], env: Mapping[str, str]) -> list[Fault]:
    """This rank's faults: its `--sim-fault` flags (default: this rank) and `CLUSTER_SIM_FAULT`."""
    faults = [f for spec in flag_specs for f in parse_faults(spec, default_ranks=frozenset({rank}))]
    faults += parse_faults(env.get(ENV_FAULT, ""))
    return [f for f in faults if f.applies_to(rank)]


# ---------------------------------------------------------------------------------------------
# Failure texts. Each is the last line of the traceback the real engine printed, copied from the
# source cited; the golden tests compare them with tests/fixtures/engine-lines/.


@dataclass(frozen=True)
class Memory:
    """What a failure text may quote: this node's memory as a GB10 reports it (MemFree)."""

    total: int
    free: int


@dataclass(frozen=True)
class SignatureContext:
    engine: str
    max_len: int  # --context-length / --max-model-len (512K when not given)
    memory: Memory
    mem_fraction: float | None = None  # --mem-fraction-static / --gpu-memory-utilization


@dataclass(frozen=True)
class Signature:
    name: str
    text: Callable[[SignatureContext], str]
    source: str
    corpus_id: str
    default_phase: str
    paraphrase: bool = False
    notes: str = ""
    where: dict[str, str] = field(default_factory=dict)  # vllm: "worker" or "engine_core"


def _trtllm_fmha(_: SignatureContext) -> str:
    # flashinfer-ai/flashinfer#3263 (SGLang 0.5.10): TllmGenFmhaRunner accepts SM100/SM103 only;
    # seed 002 boot 3 died this way autotuning `trtllm fmha` on GB10 (sm_121).
    return (
        "RuntimeError: Error in function 'TllmGenFmhaRunner' at "
        "/workspace/include/flashinfer/trtllm/fmha/fmhaRunner.cuh:30: Unsupported architecture"
    )


def _g1_scale_c(_: SignatureContext) -> str:
    # seeds/002 boot 6: NVFP4 MoE auto-routed to the TensorRT-LLM runner on SM12x. The seed quotes
    # the message; Python prints an AttributeError's message after `AttributeError: `.
    return "AttributeError: 'FusedMoE' object has no attribute 'g1_scale_c'"


def _sparse_mla(_: SignatureContext) -> str:
    # seeds/002 boot 5: the validator's real ValueError (corpus sglang-flashinfer-sparse-mla-
    # validator, from SGLang's _validate_flashinfer_sparse_mla_backend), with this model's arch.
    return (
        "ValueError: flashinfer_sparse_mla supports only GLM DSA with FP8 KV cache on NVIDIA "
        "SM120/SM121; got model_arch=MistralLarge4ForCausalLM"
    )


def _kv_budget(ctx: SignatureContext) -> str:
    if ctx.engine == "sglang":
        # Seed 002 boot 2's KV-budget refusal on the SGLang lane.
        return dialects.sglang_kv_budget_error()
    # Seed 002's vLLM lane at GMU 0.85: one 512K request needs 25 GiB, the budget after weights
    # and graph profiling is 23.63 GiB, "estimated maximum model length is 495296". Other
    # context lengths scale those numbers linearly.
    ratio = ctx.max_len / 524288
    return dialects.vllm_kv_budget_error(ctx.max_len, 25.0 * ratio, 23.63, int(495296 * ratio))


def torch_size(nbytes: float) -> str:
    """torch's `format_size` for its OOM message: MiB under 1 GiB, else GiB."""
    if nbytes < 2**30:
        return f"{nbytes / 2**20:.2f} MiB"
    return f"{nbytes / 2**30:.2f} GiB"


def _cuda_oom(ctx: SignatureContext) -> str:
    # torch 2.x's CUDA OOM message (its two double spaces included), as printed in public logs
    # (e.g. "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 11.91 GiB of which 406.38
    # MiB is free..."). On a GB10 the capacity and free figures are MemTotal and MemFree.
    total, free = ctx.memory.total, ctx.memory.free
    in_use = max(total - free, 0)
    allocated = in_use * 0.97
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        f"total capacity of {torch_size(total)} of which {torch_size(free)} is free. Including "
        f"non-PyTorch memory, this process has {torch_size(in_use)} memory in use. Of the "
        f"allocated memory {torch_size(allocated)} is allocated by PyTorch, and "
        f"{torch_size(in_use - allocated)} is reserved by PyTorch but unallocated. If reserved "
        "but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def _triton_jit(_: SignatureContext) -> str:
    # seeds/000: Triton JIT race in the EAGLE draft at concurrency >= 32 on GB10.
    return "RuntimeError: Triton Error [CUDA]: operation not permitted"


SIGNATURES: dict[str, Signature] = {
    s.name: s
    for s in (
        Signature(
            "trtllm-fmha",
            _trtllm_fmha,
            "https://github.com/flashinfer-ai/flashinfer/issues/3263; seeds/002 boot 3",
            "flashinfer-trtllm-fmha-unsupported-architecture",
            "autotune",
        ),
        Signature(
            "g1-scale-c",
            _g1_scale_c,
            "seeds/002 boot ledger, boot 6",
            "sglang-fusedmoe-no-g1-scale-c",
            "warmup",
        ),
        Signature(
            "sparse-mla",
            _sparse_mla,
            "seeds/002 boot ledger, boot 5; SGLang's validator text",
            "sglang-flashinfer-sparse-mla-validator",
            "kv",
        ),
        Signature(
            "kv-budget",
            _kv_budget,
            "SGLang pool_configurator; https://github.com/vllm-project/vllm/issues/34076; "
            "seeds/002 'GMU boot-1 lesson'",
            "vllm-kv-cache-estimated-max-model-len",
            "kv",
            where={"vllm": "engine_core"},
        ),
        Signature(
            "cuda-oom",
            _cuda_oom,
            "torch CUDACachingAllocator OutOfMemoryError text (public logs)",
            "",
            "load",
        ),
        Signature(
            "triton-jit",
            _triton_jit,
            "seeds/000 'Bug: Triton JIT Crash at Concurrency >= 32'",
            "triton-jit-cuda-operation-not-permitted",
            "ready",
        ),
    )
}

# exit-at=PHASE without a signature: the failure seed 002 saw at that phase.
DEFAULT_SIGNATURE: dict[str, str] = {
    "init": "cuda-oom",
    "load": "cuda-oom",
    "barrier": "cuda-oom",
    "kv": "kv-budget",
    "autotune": "trtllm-fmha",
    "graph": "cuda-oom",
    "http": "cuda-oom",
    "warmup": "g1-scale-c",
    "ready": "triton-jit",
    "serving": "triton-jit",
}


def signature_for(fault: Fault) -> Signature:
    return SIGNATURES[fault.signature or DEFAULT_SIGNATURE[fault.phase or "load"]]
