"""Benchmark: what `cluster bench` itself costs the controller's CPU (issue 19).

    .venv/bin/python bench/serving_client_cpu.py [--decode 32] [--prefill 50000] [--json]

Starts the simulator's HTTP server (orchestrator/simulator/serve.py) in a child process on
loopback, so its CPU is not ours, serving at `--decode` tokens/s per request (32: seed 002's
SGLang lane at c1) and a fast prefill (so the levels are decode-bound, the client's busiest
case: one SSE event per token per request). Then runs `cluster bench`'s own sweep code
(`run_level`) at c1 and at the default sweep's highest level, c32, with pp2048/tg128 at depth 0
and 8192, and prints for each level the client's CPU (user + system of this process, as
`cluster bench` records it per level): seconds, share of one core over the level's wall time,
microseconds per streamed token, and the level's output tok/s. The simulator decodes every
request at its own pace, so c32 streams 32 x 32 = 1,024 tokens/s: more than eight Sparks give
Mistral Large 4 at c32, an upper bound on the client's work. Ratios are from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.models.bench import BenchConfig, LevelResult  # noqa: E402
from orchestrator.serving_bench.sweep import run_level  # noqa: E402

MODEL = "mistral-large-4"
SERVER = """
import sys, threading
from orchestrator.simulator.serve import ServeRates, ServeState, start_server
state = ServeState(engine="sglang", served_model_name=sys.argv[3], model_path="/m", max_len=65536,
                   access_log=lambda *a: None,
                   rates=ServeRates(prefill=float(sys.argv[4]), decode=float(sys.argv[5])))
state.released.set(); state.ready.set()
start_server("127.0.0.1", int(sys.argv[2]), state)
print("serving", flush=True)
threading.Event().wait()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def row(lv: LevelResult) -> dict[str, float | int]:
    return {
        "depth": lv.depth,
        "concurrency": lv.concurrency,
        "requests": lv.requests,
        "errors": lv.errors,
        "wall_s": round(lv.duration_s, 2),
        "output_tok_s": round(lv.output_tok_s, 1),
        "client_cpu_s": round(lv.client_cpu_s, 3),
        "cpu_share_of_core": round(lv.client_cpu_share, 4),
        "cpu_us_per_token": round(1e6 * lv.client_cpu_s / max(lv.generated, 1), 1),
    }


async def measure(url: str, levels: list[tuple[int, int]], requests: int) -> list[LevelResult]:
    cfg = BenchConfig(requests_per_client=requests, timeout_s=600)
    return [await run_level(url, MODEL, cfg, depth, c) for depth, c in levels]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--decode", type=float, default=32.0)
    ap.add_argument("--prefill", type=float, default=50_000.0)
    ap.add_argument("--requests-per-client", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, "serve", str(port), MODEL, str(args.prefill), str(args.decode)],
        env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "serving"
        url = f"http://127.0.0.1:{port}"
        levels = [(0, 1), (0, 32), (8192, 1), (8192, 32)]
        started = time.monotonic()
        results = asyncio.run(measure(url, levels, args.requests_per_client))
        wall = time.monotonic() - started
    finally:
        server.terminate()
        server.wait(timeout=10)
    rows = [row(lv) for lv in results]
    by = {(r["depth"], r["concurrency"]): r for r in rows}
    summary = {
        "decode_tok_s_per_request": args.decode,
        "levels": rows,
        "c32_vs_c1_cpu_per_token_d0": round(
            float(by[(0, 32)]["cpu_us_per_token"]) / float(by[(0, 1)]["cpu_us_per_token"]), 2
        ),
        "c32_share_of_core_d8192": by[(8192, 32)]["cpu_share_of_core"],
        "total_wall_s": round(wall, 1),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(
        f"simulator at {args.decode:g} tok/s per request, prefill {args.prefill:g} tok/s; pp2048/tg128"
    )
    print(
        f"{'depth':>6} {'conc':>5} {'req':>4} {'err':>4} {'wall s':>7} {'tok/s':>7} {'CPU s':>7} {'% core':>7} {'us/token':>9}"
    )
    for r in rows:
        print(
            f"{r['depth']:>6} {r['concurrency']:>5} {r['requests']:>4} {r['errors']:>4} {r['wall_s']:>7} "
            f"{r['output_tok_s']:>7} {r['client_cpu_s']:>7} {100 * float(r['cpu_share_of_core']):>6.1f}% "
            f"{r['cpu_us_per_token']:>9}"
        )
    print(f"CPU per token, c32 / c1 at depth 0: {summary['c32_vs_c1_cpu_per_token_d0']}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
