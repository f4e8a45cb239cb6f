"""One rank of `cluster nccl-check`: join the rendezvous, all-reduce, time a small sweep.

Runs inside a rank container, as `python3 -c <this file> --rank K --world N --addr HEAD --port P
...`, with the same env, network and rendezvous address as the boot's ranks. Standard library and
torch only. Prints one line per step, `NCCLCHECK <json>`, so the controller can tell how far each
rank got from the container's log alone:

    start     the rank is alive: host, torch version, backend
    store     connected to the rendezvous store on HEAD:PORT (torch.distributed TCPStore)
    joined    the process group is up (Gloo's full mesh / NCCL's communicator)
    allreduce the sum of (rank + 1) over all ranks, and whether it is N(N+1)/2
    bw        one size of the sweep: bytes, seconds, algorithm and bus bandwidth
    done      total seconds
    error     the stage that failed, the exception, and (rank 0 and anyone with a store) the
              ranks that never joined

Bus bandwidth follows nccl-tests: algbw = bytes / time, busbw = algbw * 2 (N - 1) / N.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import sys
import time
import warnings
from datetime import timedelta
from typing import Any

PREFIX = "NCCLCHECK"
# Default sweeps: GPUs over RoCE move hundreds of MB in milliseconds; CPU Gloo over a testbed
# veth is slower by orders of magnitude, so its sweep stays small.
SIZES = {"nccl": (1 << 20, 16 << 20, 128 << 20), "gloo": (4 << 10, 256 << 10, 4 << 20)}
T0 = time.monotonic()


def emit(event: str, **fields: Any) -> None:
    record = {"event": event, "t": round(time.monotonic() - T0, 3), **fields}
    print(PREFIX, json.dumps(record, sort_keys=True), flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="nccl-check")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--addr", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--backend", default="auto", choices=("auto", "nccl", "gloo"))
    parser.add_argument("--sizes", default="", help="comma-separated byte counts")
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args(argv)

    warnings.filterwarnings("ignore")  # torch's "Failed to initialize NumPy" and the like
    emit("start", rank=args.rank, host=socket.gethostname(), pid=os.getpid())
    stage = "import"
    store: Any = None
    try:
        # Imported by name: the controller never needs torch, and type checkers need not see it.
        torch: Any = importlib.import_module("torch")
        dist: Any = importlib.import_module("torch.distributed")

        cuda = torch.cuda.is_available()
        backend = args.backend if args.backend != "auto" else ("nccl" if cuda else "gloo")
        device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
        emit("torch", version=torch.__version__, cuda=cuda, backend=backend)
        timeout = timedelta(seconds=args.timeout)

        stage = "store"
        store = dist.TCPStore(
            args.addr,
            args.port,
            args.world,
            is_master=args.rank == 0,
            timeout=timeout,
            wait_for_workers=False,
        )
        store.set(f"nccl-check/joined/{args.rank}", socket.gethostname())
        emit("store", addr=args.addr, port=args.port)

        stage = "init"
        dist.init_process_group(
            backend, store=store, rank=args.rank, world_size=args.world, timeout=timeout
        )
        emit("joined")

        stage = "allreduce"
        value = torch.full((1024,), float(args.rank + 1), device=device)
        dist.all_reduce(value)
        expected = args.world * (args.world + 1) / 2
        got = float(value[0].item())
        ok = bool(torch.all(value == expected).item())
        emit("allreduce", sum=got, expected=expected, ok=ok)

        stage = "sweep"
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()] or list(SIZES[backend])
        for size in sizes:
            x = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
            dist.all_reduce(x)  # warm-up: connections and buffers
            if device.type == "cuda":
                torch.cuda.synchronize()
            begin = time.perf_counter()
            for _ in range(args.iters):
                dist.all_reduce(x)
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds = (time.perf_counter() - begin) / max(1, args.iters)
            nbytes = x.numel() * 4
            algbw = nbytes / seconds / 1e9
            busbw = algbw * 2 * (args.world - 1) / args.world
            emit("bw", bytes=nbytes, seconds=seconds, algbw_gbps=algbw, busbw_gbps=busbw)
        dist.barrier()
        dist.destroy_process_group()
        emit("done", ok=ok)
        return 0 if ok else 3
    except Exception as exc:  # every failure is reported, with the ranks that never joined
        missing = _missing(store, args.world)
        emit(
            "error",
            stage=stage,
            type=type(exc).__name__,
            message=str(exc).strip().splitlines()[0][:500] if str(exc).strip() else "",
            missing_ranks=missing,
        )
        return 1


def _missing(store: Any, world: int) -> list[int] | None:
    if store is None:
        return None
    try:
        store.set_timeout(timedelta(seconds=2))
        return [r for r in range(world) if not store.check([f"nccl-check/joined/{r}"])]
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
