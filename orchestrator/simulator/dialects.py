"""The engines' log dialects, line for line: pure formatters with explicit inputs.

Every function here reproduces a line shape a real engine printed; the comment above it cites
where the shape was seen (`tests/fixtures/engine-lines/` ids, seeds, public logs). The golden tests
feed a corpus line's own values back into these functions and expect the corpus line back, byte
for byte, so a formatter that drifts from the real dialect fails a test.

Streams (what the real programs do, so the orchestrator's followers see the same split):
- SGLang logs with Python logging's default handler, tqdm and uvicorn: all on stderr.
- vLLM logs on stdout (its logging config streams to sys.stdout); tqdm and uvicorn's startup
  lines on stderr; every line of a vLLM process carries its `(Name pid=N) ` prefix.

File:line tags in vLLM records (`[default_loader.py:267]`) are the ones in the cited captures;
where no capture shows a line, the tag is marked unverified next to its constant.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime

from orchestrator.dialects import common, sglang, vllm

# ---------------------------------------------------------------------------------------------
# Record prefixes


def sglang_record(t: datetime, msg: str, tp: int | None = None) -> str:
    """`[2025-10-16 09:06:10 TP5] msg` (sglang PR #11716); no ` TPk` from the launcher or tp=1
    (seed 000's single-GPU log has none)."""
    rank = f" TP{tp}" if tp is not None else ""
    return f"[{t:%Y-%m-%d %H:%M:%S}{rank}] {msg}"


def vllm_prefix(proc: str | None, pid: int | None) -> str:
    """`(Worker_TP0 pid=1440) `: vLLM decorates each process's output (vllm#46367)."""
    return f"({proc} pid={pid}) " if proc else ""


def vllm_record(
    t: datetime, level: str, src: str, msg: str, proc: str | None = None, pid: int | None = None
) -> str:
    """`(EngineCore_DP0 pid=441) INFO 11-24 11:43:54 [gpu_model_runner.py:3341] msg` (PR #29335)."""
    return f"{vllm_prefix(proc, pid)}{level} {t:%m-%d %H:%M:%S} [{src}] {msg}"


def uvicorn(msg: str, level: str = "INFO") -> str:
    """uvicorn's `%(levelprefix)s %(message)s`: `INFO:` padded to 9 columns (vllm#19613)."""
    return f"{level}:{' ' * (8 - len(level))} {msg}"


def uvicorn_access(host: str, port: int, method: str, path: str, status: int) -> str:
    """uvicorn's access format: `INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 200 OK`."""
    phrase = _HTTP_PHRASES.get(status, "")
    return uvicorn(f'{host}:{port} - "{method} {path} HTTP/1.1" {status} {phrase}'.rstrip())


_HTTP_PHRASES = {200: "OK", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}


def torch_glog(rank: int, severity: str, t: datetime, nanos: int, src: str, msg: str) -> str:
    """c10d's glog lines: `[rank1]:[W623 15:37:01.824135523 socket.cpp:485] msg` (sglang#7478);
    the month is not zero-padded (`W623`, `E304`, `W1120`), the day is."""
    return f"[rank{rank}]:[{severity}{t.month}{t.day:02d} {t:%H:%M:%S}.{nanos:09d} {src}] {msg}"


def nccl_debug(host: str, pid: int, tid: int, dev: int, kind: str, msg: str, src: str = "") -> str:
    """`node2:22555:22555 [0] NCCL INFO msg` (nccl#1232); WARN lines carry `file:line`
    (`rcvlab-A6000x4-0:223645:223645 [0] bootstrap.cc:45 NCCL WARN Bootstrap : no socket
    interface found`, a public training log)."""
    where = f"{src} " if src else ""
    return f"{host}:{pid}:{tid} [{dev}] {where}NCCL {kind} {msg}"


# ---------------------------------------------------------------------------------------------
# tqdm, as the engines configure it


def format_interval(seconds: float) -> str:
    """tqdm.format_interval: `MM:SS`, or `H:MM:SS` past an hour."""
    mins, secs = divmod(int(seconds), 60)
    hours, mins = divmod(mins, 60)
    return f"{hours:d}:{mins:02d}:{secs:02d}" if hours else f"{mins:02d}:{secs:02d}"


def _rate_and_remaining(n: int, total: int, rate: float | None) -> tuple[str, str]:
    if not rate:
        return "?it/s", "?"
    inv = 1 / rate
    rate_fmt = f"{inv:5.2f}s/it" if inv > 1 else f"{rate:5.2f}it/s"
    return rate_fmt, format_interval((total - n) / rate if total else 0)


def shard_bar(desc: str, n: int, total: int, elapsed: float, rate: float | None) -> str:
    """The weight loaders' `_BAR_FORMAT` (vLLM weight_utils.py, copied by SGLang):
    `Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.96s/it]`
    (ai-dynamo/dynamo#288, sglang PR #11716). The format ends in a newline, and tqdm starts each
    refresh with a carriage return: raw, an update is `\\r<bar>\\n` (see `tqdm_update`)."""
    pct = n / total * 100 if total else 0.0
    rate_fmt, remaining = _rate_and_remaining(n, total, rate)
    return (
        f"{desc}: {pct:3.0f}% Completed | {n}/{total} "
        f"[{format_interval(elapsed)}<{remaining}, {rate_fmt}]"
    )


_BAR_CHARS = " " + "".join(chr(c) for c in range(0x258F, 0x2587, -1))  # " ▏▎▍▌▋▊▉█"


def _bar(frac: float, width: int = 10) -> str:
    nsyms = len(_BAR_CHARS) - 1
    full, part = divmod(int(frac * width * nsyms), nsyms)
    text = _BAR_CHARS[-1] * full
    if full < width:
        text += _BAR_CHARS[part] + _BAR_CHARS[0] * (width - full - 1)
    return text


def default_bar(desc: str, n: int, total: int, elapsed: float, rate: float | None) -> str:
    """tqdm's default `{l_bar}{bar}{r_bar}` with the 10-column bar it draws off a terminal:
    `Capturing batches (bs=48): 100%|██████████| 23/23 [01:03<00:00,  2.77s/it]` (seed 000 quotes
    the fields; the bar was trimmed in the post)."""
    frac = n / total if total else 0.0
    rate_fmt, remaining = _rate_and_remaining(n, total, rate)
    return (
        f"{desc}: {frac * 100:3.0f}%|{_bar(frac)}| {n}/{total} "
        f"[{format_interval(elapsed)}<{remaining}, {rate_fmt}]"
    )


def tqdm_update(bar: str, last_len: int) -> str:
    """One refresh as tqdm writes it: `\\r`, the bar, spaces over a longer previous bar."""
    return "\r" + bar + " " * max(last_len - len(bar), 0)


SHARDS_DESC = common.SHARDS_DESC  # the readers' table holds the texts both sides share

# ---------------------------------------------------------------------------------------------
# SGLang messages (what follows the record prefix)

# The first keys of SGLang's server-args dump, with their defaults, in the order a 2026 release
# prints them (noonghunna/club-3090#1261); given flags override and unknown flags follow.
_SGLANG_ARG_DEFAULTS: tuple[tuple[str, object], ...] = (
    ("model_path", None),
    ("tokenizer_path", None),
    ("tokenizer_mode", "auto"),
    ("tokenizer_backend", "huggingface"),
    ("tokenizer_worker_num", 1),
    ("detokenizer_worker_num", 1),
    ("skip_tokenizer_init", False),
    ("load_format", "auto"),
    ("trust_remote_code", False),
    ("context_length", None),
    ("host", "127.0.0.1"),
    ("port", 30000),
    ("mem_fraction_static", None),
    ("tp_size", 1),
    ("watchdog_timeout", 300),
    ("dist_timeout", None),
    ("served_model_name", None),
    ("dist_init_addr", None),
    ("nnodes", 1),
    ("node_rank", 0),
)
_SGLANG_ALIASES = {"model": "model_path", "tp": "tp_size", "tensor_parallel_size": "tp_size"}


def sglang_server_args(model_path: str, given: Sequence[tuple[str, object]]) -> str:
    """`server_args={'model_path': '/models/...', 'tokenizer_path': ..., ...}`: the newer dict
    form (club-3090#1261); older releases printed `server_args=ServerArgs(...)` (sglang#7227)."""
    args: dict[str, object] = dict(_SGLANG_ARG_DEFAULTS)
    args["model_path"] = model_path
    args["tokenizer_path"] = model_path
    args["served_model_name"] = model_path
    for key, value in given:
        args[_SGLANG_ALIASES.get(key, key)] = value
    return f"server_args={args!r}"


def sglang_launch_server_warning() -> str:
    """`python -m sglang.launch_server` still works but warns (club-3090#1261)."""
    return (
        "/sgl-workspace/sglang/python/sglang/launch_server.py:63: UserWarning: "
        "'python -m sglang.launch_server' is still supported, but 'sglang serve' is the "
        "recommended entrypoint."
    )


def sglang_init_begin() -> str:
    return "Init torch distributed begin."  # a public SGLang log of 2026-02 (see init_ends)


def sglang_init_ends(mem_usage_gb: float, elapsed_s: float | None = None) -> str:
    """`Init torch distributed ends. elapsed=5.54 s, mem usage=0.01 GB` (model_runner.py since
    sglang PR #15426); older: `Init torch distributed ends. mem usage=1.77 GB` (PR #11716)."""
    if elapsed_s is None:
        return f"Init torch distributed ends. mem usage={mem_usage_gb:.2f} GB"
    return (
        f"Init torch distributed ends. elapsed={elapsed_s:.2f} s, mem usage={mem_usage_gb:.2f} GB"
    )


def gloo_connected(rank: int, peers: int) -> str:
    """Gloo's own print when a process group connects (public SGLang and vLLM logs)."""
    return (
        f"[Gloo] Rank {rank} is connected to {peers} peer ranks. "
        f"Expected number of connected peer ranks is : {peers}"
    )


def sglang_custom_allreduce_disabled() -> str:
    """Every multi-node boot (MiaAI-Lab/Qwen3.8-Flash-Next-Dual-DGX-Sparks#3)."""
    return "CustomAllreduce is disabled because this process group spans across nodes."


def sglang_load_begin(avail_gb: float) -> str:
    """model_runner.py: `Load weight begin. avail mem={...:.2f} GB` (sglang PR #11716). On a GB10
    the figure is the CUDA free memory, which tracks MemFree."""
    return f"Load weight begin. avail mem={avail_gb:.2f} GB"


def sglang_load_end(
    elapsed_s: float, arch: str, quant: str | None, avail_gb: float, usage_gb: float
) -> str:
    """seed 000 (GB10): `Load weight end. elapsed=230.84 s, type=PixtralForConditionalGeneration,
    quant=compressed-tensors, avail mem=48.02 GB, mem usage=65.80 GB.` (`quant=` only for quantized
    checkpoints)."""
    q = f" quant={quant}," if quant else ""
    return (
        f"Load weight end. elapsed={elapsed_s:.2f} s, type={arch},{q} "
        f"avail mem={avail_gb:.2f} GB, mem usage={usage_gb:.2f} GB."
    )


def sglang_kv_allocated(tokens: int, kv_gb: float) -> str:
    """MLA models print one KV size (seed 000): `KV Cache is allocated. #tokens: 910897, KV size:
    19.55 GB`."""
    return f"KV Cache is allocated. #tokens: {tokens}, KV size: {kv_gb:.2f} GB"


def sglang_autotune(cache_path: str) -> str:
    """sglang#29562: `Running FlashInfer autotune with cache: /root/.cache/...json`."""
    return f"Running FlashInfer autotune with cache: {cache_path}"


def sglang_autotune_cache(tp_rank: int) -> str:
    return (
        "/root/.cache/sglang/flashinfer/autotune/0.6.12/sm120/88ed2caa135f6803/"
        f"rank_tp{tp_rank}_pp0_dp0.json"
    )


def sglang_capture_begin(avail_gb: float) -> str:
    return f"Capture cuda graph begin. avail mem={avail_gb:.2f} GB"  # seed 000


def sglang_capture_desc(bs: int) -> str:
    return f"Capturing batches (bs={bs})"  # seed 000 quotes `Capturing batches (bs=48):`


def sglang_capture_end(elapsed_s: float, usage_gb: float) -> str:
    """seed 000: `Capture cuda graph end. Time elapsed: 65.47 s. mem usage=1.95 GB.`"""
    return f"Capture cuda graph end. Time elapsed: {elapsed_s:.2f} s. mem usage={usage_gb:.2f} GB."


def sglang_max_total_num_tokens(tokens: int, context_len: int, avail_gb: float) -> str:
    """seed 000: `max_total_num_tokens=910897, context_len=65536, available_gpu_mem=22.77 GB`."""
    return (
        f"max_total_num_tokens={tokens}, context_len={context_len}, "
        f"available_gpu_mem={avail_gb:.2f} GB"
    )


def sglang_uvicorn_running(host: str, port: int) -> str:
    """uvicorn's `Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)`; seed 000 quotes
    it without the parenthesis."""
    return f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)"


READY_SGLANG = sglang.READY  # http_server.py, after warmup


def sglang_scheduler_exception() -> str:
    """scheduler.py run_scheduler_process: `Scheduler hit an exception: Traceback (most recent
    call last):` (sglang#29562), then the traceback lines unprefixed."""
    return "Scheduler hit an exception: Traceback (most recent call last):"


def sglang_sigquit() -> str:
    """The launcher's SIGQUIT handler (engine.py; Soft-Thinking#10)."""
    return "Received sigquit from a child process. It usually means the child failed."


def sglang_scheduler_dead(rank: int) -> list[str]:
    """engine.py `_launch_subprocesses` when a scheduler pipe hits EOF (the scheduler was killed,
    e.g. by the OOM killer, before it could say why)."""
    return [f"Rank {rank} scheduler is dead. Please check if there are relevant logs."]


def sglang_exit_code(code: int | None) -> str:
    return f"Exit code: {code}"


def sglang_barrier_error(tp_rank: int) -> str:
    """load_model_utils.py `dist_barrier_after_load` (sglang#4503): raised on the ranks that DID
    finish when the monitored_barrier fails (window closed, or a peer gone)."""
    return (
        f"ValueError: TP rank {tp_rank} could finish the model loading, but there are other ranks "
        "that didn't finish loading. It is likely due to unexpected failures (e.g., OOM) or a slow "
        "node."
    )


def sglang_watchdog(timeout_s: float) -> str:
    """sglang#33393: `Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)`."""
    return f"Scheduler watchdog timeout (self.watchdog_timeout={timeout_s:g}, self.soft=False)"


# ---------------------------------------------------------------------------------------------
# vLLM messages

VLLM_SRC = {
    "args": "utils.py:233",  # `non-default args: {...}` (vLLM 0.11 and 0.19 captures)
    "rank": "parallel_state.py:1208",  # vLLM 0.11 captures
    "load_start": "gpu_model_runner.py:2602",  # unverified line number (vllm-ascend: 2627)
    "weights": "default_loader.py:267",  # dynamo#4941, vLLM 0.11 captures
    "model": "gpu_model_runner.py:3341",  # vllm PR #29335
    "kv_mem": "gpu_worker.py:348",  # vllm PR #29335
    "kv_size": "kv_cache_utils.py:1234",  # vllm PR #29335
    "concurrency": "kv_cache_utils.py:1239",  # vllm PR #29335
    "init_engine": "core.py:167",  # runai-model-streamer#67
    "api": "api_server.py:599",  # eugr/spark-vllm-docker#116
    "core_failed": "core.py:708",  # vLLM 0.11 EngineCore failed to start (public capture)
    "core_fatal": "core.py:720",  # kvcached#191
    "worker_start_failed": "multiproc_executor.py:597",  # vllm#26328
    "worker_exception": "multiproc_executor.py:671",  # vllm-ascend capture (vLLM 0.11)
    "worker_died": "multiproc_executor.py:231",  # public capture (2026-02)
}


def vllm_non_default_args(given: Sequence[tuple[str, object]]) -> str:
    """`non-default args: {'model_tag': ..., 'host': '0.0.0.0', ...}` (vLLM 0.11 / 0.19)."""
    args: dict[str, object] = {}
    for key, value in given:
        if key == "served_model_name":
            value = [value]
        elif key == "speculative_config" and isinstance(value, str) and value.startswith("{"):
            with contextlib.suppress(ValueError):
                value = json.loads(value)
        elif key == "tp":
            key = "tensor_parallel_size"
        args[key] = value
    if "model_tag" in args and "model" not in args:
        args["model"] = args["model_tag"]
    return f"non-default args: {args!r}"


def vllm_rank_assigned(rank: int, world: int, tp_rank: int) -> str:
    """parallel_state.py: `rank 3 in world size 4 is assigned as DP rank 0, PP rank 0, TP rank 3,
    EP rank 3` (vLLM 0.11; EP rank = TP rank without data parallelism)."""
    return (
        f"rank {rank} in world size {world} is assigned as DP rank 0, PP rank 0, "
        f"TP rank {tp_rank}, EP rank {tp_rank}"
    )


def vllm_starting_to_load(model: str) -> str:
    return f"Starting to load model {model}..."  # vLLM V0/V1 model runners (public captures)


def vllm_loading_weights_took(seconds: float) -> str:
    return f"Loading weights took {seconds:.2f} seconds"  # dynamo#4941


def vllm_model_loading_took(gib: float, seconds: float) -> str:
    """vllm PR #29335: `Model loading took 2.0513 GiB memory and 27.200487 seconds`."""
    return f"Model loading took {gib:.4f} GiB memory and {seconds:.6f} seconds"


def vllm_available_kv(gib: float) -> str:
    return f"Available KV cache memory: {gib:.2f} GiB"  # vllm PR #29335


def vllm_kv_cache_size(tokens: int) -> str:
    return f"GPU KV cache size: {tokens:,} tokens"  # vllm PR #29335


def vllm_max_concurrency(max_len: int, times: float) -> str:
    return f"Maximum concurrency for {max_len:,} tokens per request: {times:.2f}x"  # PR #29335


def vllm_init_engine_took(seconds: float) -> str:
    """runai-model-streamer#67: `init engine (profile, create kv cache, warmup model) took
    90.84 seconds`."""
    return f"init engine (profile, create kv cache, warmup model) took {seconds:.2f} seconds"


def vllm_starting_server(host: str, port: int) -> str:
    """eugr/spark-vllm-docker#116 (2026): `Starting vLLM server on http://0.0.0.0:8000`; releases
    of 2025 said `Starting vLLM API server on ...` (runai-model-streamer#67)."""
    return f"Starting vLLM server on http://{host}:{port}"


READY_VLLM = vllm.READY  # uvicorn, vllm#19613


def vllm_engine_core_failed() -> str:
    return "EngineCore failed to start."  # vLLM 0.11 (public capture, core.py:708)


def vllm_engine_core_fatal() -> str:
    return "EngineCore encountered a fatal error."  # kvcached#191


def vllm_worker_failed_to_start() -> str:
    return "WorkerProc failed to start."  # vllm#26328


def vllm_worker_hit_exception() -> str:
    return "WorkerProc hit an exception."  # vLLM 0.11 capture


def vllm_worker_died(index: int) -> str:
    """`Worker proc VllmWorker-0 died unexpectedly, shutting down executor.` (public capture)."""
    return f"Worker proc VllmWorker-{index} died unexpectedly, shutting down executor."


def vllm_engine_init_failed(failed: Mapping[str, int] | None = None) -> str:
    """vllm#23176: the API server's summary; the cause is earlier in the log."""
    procs = "{}" if not failed else repr(dict(failed))
    return (
        "RuntimeError: Engine core initialization failed. See root cause above. "
        f"Failed core proc(s): {procs}"
    )


# ---------------------------------------------------------------------------------------------
# torch.distributed, NCCL and Gloo: the same words under both engines


def dist_client_timeout(addr: str, port: int, timeout_s: float) -> str:
    """vllm#19670: a rank never reached the TCPStore on the head."""
    return (
        f"torch.distributed.DistNetworkError: The client socket has timed out after "
        f"{timeout_s * 1000:.0f}ms while trying to connect to ({addr}, {port})."
    )


def dist_store_timeout(timeout_s: float, joined: int, world: int) -> str:
    """eugr/spark-vllm-docker#335: the head's side of a rendezvous a rank never joined."""
    return (
        f"torch.distributed.DistStoreError: Timed out after {int(timeout_s) + 1} seconds waiting "
        f"for clients. {joined}/{world} clients joined."
    )


def dist_recv_closed() -> str:
    """TCPStore's client when the server (rank 0) is gone (public torch logs)."""
    return (
        "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely "
        "closed. Did the remote server shutdown or crash?"
    )


def dist_listen_failed(port: int, errno_name: str, errno_code: int, message: str) -> str:
    """TCPStore server bind failure (torch's c10d socket.cpp wording)."""
    return (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
        f"network address. port: {port}, useIpv6: false, code: -{errno_code}, name: "
        f"{errno_name}, message: {message}"
    )


def tcpstore_should_dump_warning(rank: int) -> str:
    """ProcessGroupNCCL's heartbeat monitor when the TCPStore server (rank 0) went away (public
    torch 2.x logs); a warning, the rank keeps going."""
    return (
        f'[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Failed to check the "should dump" flag on '
        "TCPStore, (maybe TCPStore server has shut down too early), with error: Failed to recv, "
        "got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?"
    )


def gloo_closed_by_peer(addr: str, port: int) -> str:
    """A peer died mid-collective (public torch 2.x logs; older builds print `../third_party`)."""
    return (
        "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] "
        f"Connection closed by peer [{addr}]:{port}"
    )


def gloo_full_mesh_failed() -> str:
    """sgl-project/sglang#3226: a peer vanished while the Gloo group connected."""
    return (
        "RuntimeError: Gloo connectFullMesh failed with "
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error"
    )


def gloo_no_address(iface: str) -> str:
    """gloo/transport/tcp/device.cc lookupAddrForIface: GLOO_SOCKET_IFNAME names no interface
    with an address (`RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/
    device.cc:83] ifa != nullptr. Unable to find address for: vx00`, public torch logs)."""
    return (
        "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] "
        f"ifa != nullptr. Unable to find address for: {iface}"
    )


NCCL_VERSION = "2.27.7"


def nccl_no_interface_error() -> list[str]:
    """NCCL's bootstrapNetInit returns ncclInvalidUsage after `WARN("Bootstrap : no socket
    interface found")`; torch raises with NCCL's last error appended (the `ncclInternalError:
    Internal check failed. / Last error: / ...` shape of nccl#1837 and the transformers docs)."""
    return [
        "torch.distributed.DistBackendError: NCCL error in: "
        "/pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, invalid usage (run with "
        f"NCCL_DEBUG=WARN for details), NCCL version {NCCL_VERSION}",
        "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
        "Last error:",
        "Bootstrap : no socket interface found",
    ]


def nccl_watchdog_timeout(
    rank: int, seq: int, op: str, numel_in: int, numel_out: int, timeout_ms: int, ran_ms: int
) -> str:
    """ProcessGroupNCCL's watchdog (sglang#3932), after the glog prefix."""
    return (
        f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
        f"OpType={op}, NumelIn={numel_in}, NumelOut={numel_out}, Timeout(ms)={timeout_ms}) ran "
        f"for {ran_ms} milliseconds before timing out."
    )


def vllm_kv_budget_error(
    max_len: int, needed_gib: float, available_gib: float, estimate: int
) -> str:
    """The refusal since vllm PR #16168 (vllm#34076, 0.15.2): the needed size is printed as a
    plain float (`24.0 GiB`), the available one with two decimals."""
    return (
        f"ValueError: To serve at least one request with the models's max seq len ({max_len}), "
        f"({round(needed_gib, 2)} GiB KV cache is needed, which is larger than the available KV "
        f"cache memory ({available_gib:.2f} GiB). Based on the available memory, the estimated "
        f"maximum model length is {estimate}. Try increasing `gpu_memory_utilization` or "
        "decreasing `max_model_len` when initializing the engine."
    )


def sglang_kv_budget_error() -> str:
    """SGLang's memory pool configurator when no KV token fits (model_runner / pool_configurator:
    `max_total_num_tokens <= 0`)."""
    return "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
