"""Benchmark: the serving watch's CPU with 8 ranks serving, quiet and chatty (issue 27 item 7).

    .venv/bin/python bench/serving_watch.py [--seconds 60] [--rate 200] [--json]

No root, no ports of the built-in cluster: eight local rank processes under the process runtime
(the launcher, its docker-logs-shaped files), each printing SGLang's serving chatter (decode and
prefill batch lines) at `--rate` lines/s, or nothing ("quiet"); a stand-in head in its own
process (so its CPU is not the watcher's, as on a real cluster where the head is another
machine) answering /health, the canary (/v1/completions) and /metrics with SGLang's metric names.

Three windows of `--seconds` each, in one run, this process's CPU (user + system, psutil) as a
share of one core:

- boot:    the boot supervisor (supervise.py's loop: every rank followed into rank-<k>/, the
           samplers, the watchers judged and status.json/metrics.prom written every tick) on
           8 ranks x RATE lines/s: the figure the watch is compared with;
- chatty:  the serving watch (serving_watch.ServingWatch: the same followers, bounded, the
           samplers, the canary + /health + /metrics every 15 s, the serving judge) on the same
           8 x RATE lines/s. Goal: <= 15% of one core;
- quiet:   the serving watch on 8 ranks that print nothing. Goal: <= 2% of one core.

It prints each figure and the ratios to the boot supervisor's. The followers here read local
files (the process runtime); on Sparks they read `docker logs -f` over SSH, whose cost
bench/supervisor_logs.py measures (the floor it prints) and which adds to both the boot's and
the watch's figures alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.inventory import load_inventory  # noqa: E402
from orchestrator.models.run import HeadReady, RunPhase  # noqa: E402
from orchestrator.paths import builtin_simulated_inventory  # noqa: E402
from orchestrator.runstore import RunStore  # noqa: E402
from orchestrator.runtime.base import RankSpec  # noqa: E402
from orchestrator.runtime.process import ProcessRuntime  # noqa: E402
from orchestrator.supervisor.serving import ServeWatchConfig  # noqa: E402
from orchestrator.supervisor.serving_watch import ServingWatch  # noqa: E402
from orchestrator.supervisor.state import reduce  # noqa: E402
from orchestrator.supervisor.supervise import SuperviseConfig, Supervisor  # noqa: E402
from orchestrator.supervisor.watchers import WatchConfig  # noqa: E402

# One rank: RATE lines/s of SGLang serving chatter for SECS, paced on the monotonic clock in
# 10 ms batches, then alive (silent) for HOLD more seconds: a serving rank never exits.
RANK = r"""
import os, sys, time
rank, rate, secs, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
total = int(rate * secs)
batch = max(rate // 100, 1)
def line(i):
    now = time.strftime("%Y-%m-%d %H:%M:%S")
    if i % 7 == 0:
        return (f"[{now} TP{rank}] Prefill batch. #new-seq: 1, #new-token: 512, #cached-token: 0, "
                f"token usage: 0.01, #running-req: 7, #queue-req: 0 seq={i}\n")
    return (f"[{now} TP{rank}] Decode batch. #running-req: 8, #token: {i % 9000 + 1000}, "
            f"token usage: 0.02, gen throughput (token/s): 412.33, #queue-req: 0 seq={i}\n")
os.write(2, f"[{time.strftime('%Y-%m-%d %H:%M:%S')} TP{rank}] The server is fired up\n".encode())
t0 = time.monotonic()
i = 0
while i < total:
    delay = t0 + i / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    n = min(batch, total - i)
    os.write(2, "".join(line(i + j) for j in range(n)).encode())
    i += n
time.sleep(max(t0 + secs + hold - time.monotonic(), 0))
"""

# The head stand-in: /health 200, a canary answer, SGLang's /metrics names (the counter moves
# with each completion; no request is running between canaries, so no wedge is judged).
HEAD = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
generated = 0
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def _send(self, code, body, kind="application/json"):
        self.send_response(code)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path.startswith("/metrics"):
            text = ("# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 0\n"
                    "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs 0\n"
                    "# TYPE sglang:generation_tokens counter\n"
                    f"sglang:generation_tokens_total {generated}\n")
            self._send(200, text.encode(), "text/plain; version=0.0.4")
        else:
            self._send(200, b"")
    def do_POST(self):
        global generated
        self.rfile.read(int(self.headers.get("content-length", 0)))
        generated += 2
        self._send(200, json.dumps({"choices": [{"text": "OK", "index": 0}]}).encode())
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def specs_for(run_id: str, rate: int, secs: float, hold: float) -> list[RankSpec]:
    inventory = load_inventory(builtin_simulated_inventory())
    return [
        RankSpec(
            rank=node.rank,
            node=node,
            name=f"bench-{run_id}-r{node.rank}",
            argv=(sys.executable, "-c", RANK, str(node.rank), str(rate), str(secs), str(hold)),
        )
        for node in inventory.nodes
    ]


def cpu_s(me: psutil.Process) -> float:
    t = me.cpu_times()
    return t.user + t.system


async def window(mode: str, root: Path, endpoint: str, rate: int, secs: float) -> dict[str, Any]:
    """One measured window: `mode` boot, chatty or quiet."""
    store = RunStore(root / "runs")
    run = store.create()
    runtime = ProcessRuntime(root / "nodes")
    spew = 0 if mode == "quiet" else rate
    specs = specs_for(run.id, spew, secs + 2, 30)
    sup = Supervisor(
        run,
        specs,
        runtime,
        SuperviseConfig(
            watch=WatchConfig(barrier_window_s=15.0),
            ready_url=f"{endpoint}/health",
            endpoint=endpoint,
        ),
        recipe="bench-serving-watch",
    )
    for spec in specs:
        await runtime.start(spec)
        sup.mark_started(spec)
    me = psutil.Process()
    await asyncio.sleep(1.0)  # the ranks' interpreters start (their CPU is not ours anyway)
    try:
        if mode == "boot":
            follow = [asyncio.create_task(f.run(sup.stop)) for f in sup.followers]
            samplers = [asyncio.create_task(sup._sample_loop(s)) for s in specs]
            cpu0, wall0 = cpu_s(me), time.monotonic()
            while time.monotonic() - wall0 < secs:  # supervise()'s loop, without its end
                await asyncio.sleep(sup.cfg.tick_s)
                sup._judge()
                sup._publish(RunPhase.booting)
            cpu1, wall1 = cpu_s(me), time.monotonic()
            sup.stop.set()
            await asyncio.wait(follow + samplers, timeout=3)
            for t in follow + samplers:
                t.cancel()
            await asyncio.gather(*follow, *samplers, return_exceptions=True)
        else:
            # As after READY: the head answered (every started rank serves in its group).
            sup.state = reduce(sup.state, HeadReady(ts=time.time(), latency_s=0.01))
            watch = ServingWatch(
                sup, ServeWatchConfig(mem_floor=0, leak_min_rate=1e18), model="bench"
            )
            task = asyncio.create_task(watch.run_watch())
            await asyncio.sleep(1.0)  # the followers catch up with what was printed so far
            cpu0, wall0 = cpu_s(me), time.monotonic()
            await asyncio.sleep(secs)
            cpu1, wall1 = cpu_s(me), time.monotonic()
            watch.halt.set()
            ended = await task
            if ended is not None:
                raise SystemExit(f"the watch judged an incident in the bench: {ended.message}")
            canaries = len(watch.serving.canaries)
    finally:
        for spec in specs:
            await runtime.stop(spec, remove=True)
    lines = sum(
        (run.dir / f"rank-{s.rank}" / "stderr.log").read_bytes().count(b"\n") for s in specs
    )
    busy = cpu1 - cpu0
    out = {
        "mode": mode,
        "ranks": len(specs),
        "rate_per_rank": spew,
        "wall_s": wall1 - wall0,
        "cpu_s": busy,
        "cpu_pct_of_one_core": 100 * busy / (wall1 - wall0),
        "lines_preserved": lines,
    }
    if mode != "boot":
        out["canaries"] = canaries
    return out


async def main_async(secs: float, rate: int) -> dict[str, Any]:
    port = free_port()
    head = subprocess.Popen([sys.executable, "-c", HEAD, str(port)])
    try:
        time.sleep(1.0)
        with tempfile.TemporaryDirectory(prefix="bench-serving-watch-") as tmp:
            root = Path(tmp)
            endpoint = f"http://127.0.0.1:{port}"
            results = [
                await window(m, root, endpoint, rate, secs) for m in ("boot", "chatty", "quiet")
            ]
    finally:
        head.terminate()
        head.wait(timeout=10)
    boot, chatty, quiet = (r["cpu_pct_of_one_core"] for r in results)
    return {
        "results": results,
        "machine_cores": psutil.cpu_count(),
        "chatty_over_boot": chatty / boot if boot else None,
        "quiet_over_boot": quiet / boot if boot else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="each window (default 60)")
    ap.add_argument("--rate", type=int, default=200, help="lines/s per rank, chatty (200)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    doc = asyncio.run(main_async(args.seconds, args.rate))
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    by = {r["mode"]: r for r in doc["results"]}
    print(f"8 ranks, {args.seconds:.0f} s windows, this process's CPU as % of one core")
    print(
        f"  boot supervisor, 8 x {args.rate} lines/s:  {by['boot']['cpu_pct_of_one_core']:5.2f}%"
        f"  ({by['boot']['lines_preserved']} lines kept)"
    )
    print(
        f"  serving watch,   8 x {args.rate} lines/s:  {by['chatty']['cpu_pct_of_one_core']:5.2f}%"
        f"  ({by['chatty']['lines_preserved']} lines kept, {by['chatty']['canaries']} canaries)"
        f"  goal <= 15%;  ratio to boot {doc['chatty_over_boot']:.2f}x"
    )
    print(
        f"  serving watch,   8 quiet ranks:        {by['quiet']['cpu_pct_of_one_core']:5.2f}%"
        f"  ({by['quiet']['canaries']} canaries)  goal <= 2%;  ratio to boot "
        f"{doc['quiet_over_boot']:.2f}x"
    )


if __name__ == "__main__":
    main()
