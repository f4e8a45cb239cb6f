"""vLLM's dialect: `(EngineCore_DP0 pid=441) INFO 11-24 11:43:54 [file.py:N] msg` on stdout.

vLLM prints shard progress on global rank 0 only; the API server prints the serving lines.
"""

from __future__ import annotations

from orchestrator.dialects.base import Milestone as M
from orchestrator.dialects.base import marker

ENGINE = "vllm"

READY = "Application startup complete."  # uvicorn, after the API server's routes (vllm#19613)

MARKERS = (
    marker(M.server_args, ENGINE, "non-default args", r"non-default args:"),
    # the first line any vLLM process prints (on import): an engine starting; a proxy's uvicorn
    # ready before it is not this engine serving (the thirtieth set, f-0008)
    marker(
        M.server_args,
        ENGINE,
        "Automatically detected platform",
        r"Automatically detected platform \w+",
    ),
    marker(M.server_args, ENGINE, "Initializing an LLM engine", r"Initializing an LLM engine"),
    marker(M.server_args, ENGINE, "Initializing a V1 LLM engine"),
    marker(M.dist_begin, ENGINE, "vLLM is using nccl==", r"vLLM is using nccl==\d"),
    # the engine starts with tensor parallelism over several processes: their rendezvous begins
    marker(
        M.dist_begin,
        ENGINE,
        "tensor_parallel_size=",
        r"Initializing an? (?:V[01] )?LLM engine.*tensor_parallel_size=(?:[2-9]|[1-9][0-9])",
    ),
    marker(M.dist_init, ENGINE, "world_size=", r"world_size=\d+ rank=\d+"),
    marker(M.dist_init, ENGINE, "in world size", r"rank \d+ in world size \d+ is assigned as"),
    marker(M.load_begin, ENGINE, "Starting to load model"),
    marker(M.load_end, ENGINE, "Loading weights took"),
    marker(M.load_end, ENGINE, "Model loading took"),
    marker(M.warmup, ENGINE, "Available KV cache memory", r"Available KV cache memory: \d"),
    marker(M.warmup, ENGINE, "GPU KV cache size", r"GPU KV cache size: [\d,]+ tokens"),
    marker(M.warmup, ENGINE, "init engine (profile", r"init engine \(profile"),
    # the executor's KV cache size before V1 (vllm/executor/*: "# %s blocks: %d, # CPU blocks:
    # %d", the device named GPU, cuda, HPU, TPU...)
    marker(M.warmup, ENGINE, "# CPU blocks:", r"# \w+ blocks: \d+, # CPU blocks: \d+"),
    marker(M.warmup, ENGINE, "Capturing CUDA graph", r"Capturing CUDA graphs?"),
    marker(M.ready, ENGINE, "Starting vLLM", r"Starting vLLM (?:API )?server(?: \d+)? on"),
    marker(M.ready, ENGINE, "Available routes are", r"Available routes are:"),
    marker(M.ready, ENGINE, "Route: /", r"\[launcher\.py:\d+\] Route: /\S*, Methods:"),
    # serving: the periodic stats line of a live engine (metrics loggers)
    marker(M.traffic, ENGINE, "Avg prompt throughput", r"Avg prompt throughput: [\d.]+ tokens/s"),
    # a disaggregated decode node's KV connector once transfers ran: printed only while it serves
    # ("KV Transfer metrics: Num successful transfers=2, Avg xfer time (ms)=63.33"; the
    # twenty-sixth set, r-0004)
    marker(
        M.traffic,
        ENGINE,
        "KV Transfer metrics: Num successful transfers=",
        r"KV Transfer metrics: Num successful transfers=[1-9]",
    ),
    # V1's speculative decoding statistics: logged only for drafts proposed since the last
    # line, so only while requests are served ("SpecDecoding metrics: Draft acceptance rate:
    # 88.8%, Mean acceptance length: 5.44, ..."; the forty-fourth set, c-0007)
    marker(
        M.traffic,
        ENGINE,
        "SpecDecoding metrics: ",
        r"SpecDecoding metrics: (?:Draft acceptance rate|Mean acceptance length): [\d.]+",
    ),
)
