"""What each engine prints at each step of a simulated boot, in its own words.

SGLang logs everything on stderr, launcher lines without a rank and scheduler lines with ` TPk`;
vLLM splits its API server, engine core and workers, each with its own prefix. The texts come
from `dialects.py`; a voice only decides which line is said when, and on which stream.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import KW_ONLY, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from orchestrator.dialects import sglang as sglang_dialect
from orchestrator.dialects import vllm as vllm_dialect
from orchestrator.dialects.common import SHARDS_DESC
from orchestrator.simulator import dialects as d
from orchestrator.simulator.weights import WeightsInfo

if TYPE_CHECKING:
    from orchestrator.simulator.cli_args import EngineArgs


class Rank(Protocol):
    """What a voice reads of the rank it speaks for (simulator/runner.py's Rank has it): the
    engine's arguments, where lines go, the weight reader's pid, when the KV cache began."""

    args: EngineArgs
    out: Out
    child_pid: int | None
    kv_started: float


KV_BYTES_PER_TOKEN = 23045  # seed 000: 19.55 GB of MLA KV for 910897 tokens
GIB = float(1 << 30)


@dataclass(eq=False, repr=False)  # compares and prints as an exception does
class Failure(Exception):
    """The rank dies. `exc_lines` end its traceback; `lines` are printed instead of a traceback
    (a C++ abort such as the NCCL watchdog)."""

    exc_lines: list[str]
    _: KW_ONLY
    code: int = 1
    sig: str | None = None
    lines: list[str] | None = None
    where: str = "worker"

    def __post_init__(self) -> None:
        super().__init__((self.exc_lines or self.lines or ["failure"])[-1])


class Out:
    """stdout and stderr, line-buffered by hand and safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def write(self, stream: str, text: str) -> None:
        f = sys.stdout if stream == "out" else sys.stderr
        with self._lock:
            f.write(text)
            f.flush()

    def line(self, stream: str, text: str) -> None:
        self.write(stream, text + "\n")


def now() -> datetime:
    return datetime.now()


# ---------------------------------------------------------------------------------------------
# Voices: what each engine prints at each step


class Voice(Protocol):
    engine: str

    def startup(self) -> None: ...
    def init_begin(self) -> None: ...
    def init_end(self, elapsed: float, mem_gb: float) -> None: ...
    def load_begin(self, avail_gb: float) -> None: ...
    def shard_bar(self, n: int, total: int, elapsed: float, last: bool) -> None: ...
    def load_end(self, elapsed: float, nbytes: int, avail_gb: float, info: WeightsInfo) -> None: ...
    def kv(self, avail_gb: float, max_len: int) -> None: ...
    def autotune(self) -> None: ...
    def graph_begin(self, avail_gb: float) -> None: ...
    def graph_step(self, n: int, total: int, elapsed: float) -> None: ...
    def graph_end(self, elapsed: float, usage_gb: float, avail_gb: float, max_len: int) -> None: ...
    def http_begin(self) -> None: ...
    def http_end(self) -> None: ...
    def ready(self) -> None: ...
    def access(self, host: str, port: int, method: str, path: str, status: int) -> None: ...
    def failure(self, failure: Failure, serving: bool) -> None: ...
    def child_died(self, code: int, serving: bool) -> None: ...
    def bind_failed(self, host: str, port: int, exc: OSError) -> None: ...
    def watchdog(self, timeout_s: float) -> None: ...


@dataclass
class TqdmState:
    last_len: int = 0
    last_print: float = 0.0


class SGLangVoice:
    """SGLang: launcher lines without a rank, scheduler lines with ` TPk`, all on stderr."""

    engine = "sglang"

    def __init__(self, rank: Rank) -> None:
        self.r = rank
        self.tp = rank.args.tp_rank if rank.args.tp > 1 else None
        self._bar = TqdmState()
        self._cap = TqdmState()

    def _log(self, msg: str, tp: bool = True) -> None:
        self.r.out.line("err", d.sglang_record(now(), msg, self.tp if tp else None))

    def startup(self) -> None:
        if self.r.args.subcommand in ("launch_server", "sglang.launch_server"):
            self.r.out.line("err", d.sglang_launch_server_warning())
        self._log(d.sglang_server_args(self.r.args.model_path, self.r.args.given), tp=False)

    def init_begin(self) -> None:
        self._log(d.sglang_init_begin())

    def init_end(self, elapsed: float, mem_gb: float) -> None:
        if self.r.args.world > 1:
            self.r.out.line("err", d.gloo_connected(self.r.args.node_rank, self.r.args.world - 1))
            self._log(d.sglang_custom_allreduce_disabled())
        self._log(d.sglang_init_ends(mem_gb, elapsed))

    def load_begin(self, avail_gb: float) -> None:
        self._log(d.sglang_load_begin(avail_gb))

    def shard_bar(self, n: int, total: int, elapsed: float, last: bool) -> None:
        rate = n / elapsed if n and elapsed > 0 else None
        bar = d.shard_bar(SHARDS_DESC, n, total, elapsed, rate)
        self.r.out.write("err", d.tqdm_update(bar, self._bar.last_len) + "\n")
        self._bar.last_len = len(bar)

    def load_end(self, elapsed: float, nbytes: int, avail_gb: float, info: WeightsInfo) -> None:
        self._log(d.sglang_load_end(elapsed, info.architecture, info.quant, avail_gb, nbytes / GIB))

    def kv(self, avail_gb: float, max_len: int) -> None:
        kv_gb = max(avail_gb * 0.5, 0.01)
        self._log(d.sglang_kv_allocated(int(kv_gb * GIB / KV_BYTES_PER_TOKEN), kv_gb))

    def autotune(self) -> None:
        self._log(d.sglang_autotune(d.sglang_autotune_cache(self.r.args.tp_rank)))

    def graph_begin(self, avail_gb: float) -> None:
        self._log(d.sglang_capture_begin(avail_gb))

    def graph_step(self, n: int, total: int, elapsed: float) -> None:
        if self.r.args.tp_rank != 0:
            return  # tqdm is shown on TP0 only
        bs = 48 * max(n, 1) // total
        rate = n / elapsed if n and elapsed > 0 else None
        bar = d.default_bar(d.sglang_capture_desc(bs), n, total, elapsed, rate)
        end = "\n" if n == total else ""
        self.r.out.write("err", d.tqdm_update(bar, self._cap.last_len) + end)
        self._cap.last_len = len(bar)

    def graph_end(self, elapsed: float, usage_gb: float, avail_gb: float, max_len: int) -> None:
        self._log(d.sglang_capture_end(elapsed, usage_gb))
        kv_gb = max(avail_gb * 0.5, 0.01)
        tokens = int(kv_gb * GIB / KV_BYTES_PER_TOKEN)
        self._log(d.sglang_max_total_num_tokens(tokens, max_len, avail_gb))

    def http_begin(self) -> None:
        self._log(d.uvicorn(f"Started server process [{os.getpid()}]"), tp=False)
        self._log(d.uvicorn("Waiting for application startup."), tp=False)

    def http_end(self) -> None:
        a = self.r.args
        self._log(d.uvicorn("Application startup complete."), tp=False)
        self._log(d.uvicorn(d.sglang_uvicorn_running(a.host, a.port)), tp=False)

    def ready(self) -> None:
        self._log(sglang_dialect.READY, tp=False)

    def access(self, host: str, port: int, method: str, path: str, status: int) -> None:
        self._log(d.uvicorn_access(host, port, method, path, status), tp=False)

    def failure(self, failure: Failure, serving: bool) -> None:
        if failure.lines is not None:
            for line in failure.lines:
                self.r.out.line("err", line)
        else:
            self._log(d.sglang_scheduler_exception())
            self.r.out.line(
                "err",
                '  File "/cluster-sim/sglang/srt/managers/scheduler.py", line 1, in '
                "run_scheduler_process",
            )
            for line in failure.exc_lines:
                self.r.out.line("err", line)
        self._log(d.sglang_sigquit(), tp=False)

    def child_died(self, code: int, serving: bool) -> None:
        if serving:
            self._log(
                f"Child process unexpectedly failed with exitcode={code}. pid={self.r.child_pid}",
                tp=False,
            )
            return
        for line in d.sglang_scheduler_dead(0):
            self._log(line, tp=False)
        self._log(d.sglang_exit_code(code), tp=False)

    def bind_failed(self, host: str, port: int, exc: OSError) -> None:
        self._log(
            d.uvicorn(
                f"[Errno {exc.errno}] error while attempting to bind on address "
                f"({host!r}, {port}): {(exc.strerror or '').lower()}",
                level="ERROR",
            ),
            tp=False,
        )

    def watchdog(self, timeout_s: float) -> None:
        self._log(d.sglang_watchdog(timeout_s))


class VLLMVoice:
    """vLLM: `(Name pid=N) LEVEL mm-dd hh:mm:ss [file:line] msg` on stdout; tqdm and uvicorn on
    stderr. Rank 0 has the API server and the engine core; ranks > 0 (headless) workers only."""

    engine = "vllm"

    def __init__(self, rank: Rank) -> None:
        self.r = rank
        self.k = rank.args.tp_rank
        self.worker = f"Worker_TP{self.k}"
        self._bar = TqdmState()

    def _rec(
        self,
        proc: str | None,
        pid: int | None,
        src: str,
        msg: str,
        level: str = "INFO",
        stream: str = "out",
    ) -> None:
        self.r.out.line(stream, d.vllm_record(now(), level, d.VLLM_SRC[src], msg, proc, pid))

    def _api(self, src: str, msg: str, level: str = "INFO") -> None:
        headless = self.r.args.node_rank > 0
        self._rec(
            None if headless else "APIServer", None if headless else os.getpid(), src, msg, level
        )

    def _core(self, src: str, msg: str, level: str = "INFO") -> None:
        self._rec("EngineCore_DP0", os.getpid(), src, msg, level)

    def _work(self, src: str, msg: str, level: str = "INFO") -> None:
        self._rec(self.worker, self.r.child_pid, src, msg, level)

    def startup(self) -> None:
        self._api("args", d.vllm_non_default_args(self.r.args.given))

    def init_begin(self) -> None:
        return None

    def init_end(self, elapsed: float, mem_gb: float) -> None:
        a = self.r.args
        if a.world > 1:
            self.r.out.line("out", d.gloo_connected(a.node_rank, a.world - 1))
        self._work("rank", d.vllm_rank_assigned(self.k, a.tp, self.k))

    def load_begin(self, avail_gb: float) -> None:
        self._work("load_start", d.vllm_starting_to_load(self.r.args.model_path))

    def shard_bar(self, n: int, total: int, elapsed: float, last: bool) -> None:
        rate = n / elapsed if n and elapsed > 0 else None
        bar = d.shard_bar(SHARDS_DESC, n, total, elapsed, rate)
        prefix = d.vllm_prefix(self.worker, self.r.child_pid)
        self.r.out.write("err", prefix + d.tqdm_update(bar, self._bar.last_len) + "\n")
        self._bar.last_len = len(bar)
        if last:
            self.r.out.write("err", prefix + "\n")

    def load_end(self, elapsed: float, nbytes: int, avail_gb: float, info: WeightsInfo) -> None:
        self._work("weights", d.vllm_loading_weights_took(elapsed))
        self._work("model", d.vllm_model_loading_took(nbytes / GIB, elapsed * 1.02))

    def kv(self, avail_gb: float, max_len: int) -> None:
        gib = max(avail_gb * (self.r.args.mem_fraction or 0.9) * 0.5, 0.01)
        self._work("kv_mem", d.vllm_available_kv(gib))
        if self.r.args.node_rank == 0:
            tokens = int(gib * GIB / KV_BYTES_PER_TOKEN)
            self._core("kv_size", d.vllm_kv_cache_size(tokens))
            self._core("concurrency", d.vllm_max_concurrency(max_len, tokens / max_len))

    def autotune(self) -> None:
        return None

    def graph_begin(self, avail_gb: float) -> None:
        return None

    def graph_step(self, n: int, total: int, elapsed: float) -> None:
        return None

    def graph_end(self, elapsed: float, usage_gb: float, avail_gb: float, max_len: int) -> None:
        if self.r.args.node_rank == 0:
            self._core("init_engine", d.vllm_init_engine_took(time.monotonic() - self.r.kv_started))

    def http_begin(self) -> None:
        a = self.r.args
        self._api("api", d.vllm_starting_server(a.host, a.port))
        prefix = d.vllm_prefix("APIServer", os.getpid())
        self.r.out.line("err", prefix + d.uvicorn(f"Started server process [{os.getpid()}]"))
        self.r.out.line("err", prefix + d.uvicorn("Waiting for application startup."))

    def http_end(self) -> None:
        prefix = d.vllm_prefix("APIServer", os.getpid())
        self.r.out.line("err", prefix + d.uvicorn(vllm_dialect.READY))

    def ready(self) -> None:
        return None

    def access(self, host: str, port: int, method: str, path: str, status: int) -> None:
        prefix = d.vllm_prefix("APIServer", os.getpid())
        self.r.out.line("out", prefix + d.uvicorn_access(host, port, method, path, status))

    def _block(self, proc: str, pid: int | None, src: str, head: str, exc: list[str]) -> None:
        self._rec(proc, pid, src, head, "ERROR")
        self._rec(proc, pid, src, "Traceback (most recent call last):", "ERROR")
        frame = (
            '  File "/cluster-sim/vllm/v1/executor/multiproc_executor.py", line 1, in worker_main'
        )
        self._rec(proc, pid, src, frame, "ERROR")
        for line in exc:
            self._rec(proc, pid, src, line, "ERROR")

    def failure(self, failure: Failure, serving: bool) -> None:
        if failure.lines is not None:
            for line in failure.lines:
                self.r.out.line("err", line)
        head0 = self.r.args.node_rank == 0
        if failure.where == "engine_core" and head0:
            src = "core_fatal" if serving else "core_failed"
            head = d.vllm_engine_core_fatal() if serving else d.vllm_engine_core_failed()
            self._block("EngineCore_DP0", os.getpid(), src, head, failure.exc_lines)
        elif failure.lines is None:
            src = "worker_exception" if serving else "worker_start_failed"
            head = d.vllm_worker_hit_exception() if serving else d.vllm_worker_failed_to_start()
            self._block(self.worker, self.r.child_pid, src, head, failure.exc_lines)
        if head0 and not serving:
            self.r.out.line(
                "err", d.vllm_prefix("APIServer", os.getpid()) + d.vllm_engine_init_failed()
            )

    def child_died(self, code: int, serving: bool) -> None:
        proc = "EngineCore_DP0" if self.r.args.node_rank == 0 else None
        self._rec(
            proc, os.getpid() if proc else None, "worker_died", d.vllm_worker_died(0), "ERROR"
        )
        if self.r.args.node_rank == 0 and not serving:
            self.r.out.line(
                "err",
                d.vllm_prefix("APIServer", os.getpid())
                + d.vllm_engine_init_failed({"EngineCore_DP0": 1}),
            )

    def bind_failed(self, host: str, port: int, exc: OSError) -> None:
        self.r.out.line(
            "err",
            d.vllm_prefix("APIServer", os.getpid())
            + d.uvicorn(
                f"[Errno {exc.errno}] error while attempting to bind on address "
                f"({host!r}, {port}): {(exc.strerror or '').lower()}",
                level="ERROR",
            ),
        )

    def watchdog(self, timeout_s: float) -> None:
        return None  # vLLM has no scheduler watchdog of this kind
