"""Benchmark: `cluster status --json` latency for 8 ranks, both sources (issue 8).

    sudo .venv/bin/python bench/status_latency.py [--repeat 5] [--json]

Brings the netns testbed up (root; run it under `flock /run/cluster-testbed.lock`), starts
`cluster boot mistral-large4-8x-sglang --simulate --scale test` with every rank reading at
3 MB/s (a ~50 s load), and while the ranks load measures:

- source "supervisor" (the boot's supervisor alive: status.json is the answer), then
- source "live" (after `kill -9` of the boot: the view derived from the 8 nodes over SSH,
  `docker inspect`, the log tail, a memory/I-O sample per rank),

each as an in-process call (`load_context` + `current_view`, what the CLI does after its
imports) and as the whole CLI in a fresh process (`python -m orchestrator.cli status --json`),
plus the CLI's bare start-up (`--help`) for reference. Target: under 1 s. Medians are printed.
Last, the live call asking 1 node against asking all 8: the ratio says how much of the live
source's time is the nodes sharing this machine's cores (on Sparks each has its own).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.run.context import load_context  # noqa: E402
from orchestrator.run.status import current_view, live_view  # noqa: E402
from orchestrator.runstore import RunStore  # noqa: E402
from orchestrator.testbed import TEST_IMAGE, Testbed  # noqa: E402

RECIPE = "mistral-large4-8x-sglang"
CLI = [sys.executable, "-m", "orchestrator.cli"]


def in_process(runs: Path, run_id: str) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    ctx = load_context(RunStore(runs).open(run_id))
    view = asyncio.run(current_view(ctx))
    return time.monotonic() - started, view.model_dump(mode="json")


def in_process_nodes(runs: Path, run_id: str, nodes: int) -> tuple[float, float]:
    """A live view that asks only the first `nodes` ranks' nodes (the rest from their logs):
    its wall time, and the CPU time this (the controller's) process spent on it."""
    started, cpu = time.monotonic(), time.process_time()
    ctx = load_context(RunStore(runs).open(run_id))
    ctx = dataclasses.replace(ctx, specs=ctx.specs[:nodes])
    asyncio.run(live_view(ctx))
    return time.monotonic() - started, time.process_time() - cpu


def whole_cli(env: dict[str, str], inventory: Path, run_id: str) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    proc = subprocess.run(
        [*CLI, "status", "--json", "-i", str(inventory), "--run", run_id],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"cluster status failed ({proc.returncode}): {proc.stderr[-600:]}")
    return elapsed, json.loads(proc.stdout)


def bare_cli(env: dict[str, str]) -> float:
    started = time.monotonic()
    subprocess.run([*CLI, "--help"], capture_output=True, env=env, cwd=REPO, timeout=60, check=True)
    return time.monotonic() - started


def measure(
    source: str, repeat: int, env: dict[str, str], runs: Path, inventory: Path, run_id: str
) -> dict[str, Any]:
    calls, clis = [], []
    for _ in range(repeat):
        t, view = in_process(runs, run_id)
        assert view["source"] == source, (source, view["source"])
        assert len(view["ranks"]) == 8
        calls.append(t)
        t, doc = whole_cli(env, inventory, run_id)
        assert doc["source"] == source, (source, doc["source"])
        clis.append(t)
    phases = sorted({r["phase"] for r in doc["ranks"]})
    return {"source": source, "in_process_s": calls, "cli_s": clis, "phases": phases}


def wait_loading(run: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            status = json.loads((run / "status.json").read_text())
            if len(status["ranks"]) == 8 and all(
                r["phase"] == "loading" and r["bytes_read"] > 0 for r in status["ranks"]
            ):
                return
        time.sleep(0.5)
    raise SystemExit(f"the ranks were not all loading within {timeout:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--profile", type=Path, help="also cProfile one live in-process call into this file"
    )
    args = ap.parse_args()
    tb = Testbed()
    tb.up(8)
    boot: subprocess.Popen[bytes] | None = None
    try:
        tb.load_test_image()
        with tempfile.TemporaryDirectory(prefix="bench-status-") as tmp:
            state = Path(tmp)
            os.environ["XDG_STATE_HOME"] = str(state)
            env = {**os.environ, "COLUMNS": "200"}
            runs = state / "cluster" / "runs"
            boot = subprocess.Popen(
                [
                    *CLI,
                    "boot",
                    RECIPE,
                    "-i",
                    str(tb.inventory),
                    "--simulate",
                    "--sim-image",
                    TEST_IMAGE,
                    "--scale",
                    "test",
                    "--no-push",
                    "--json",
                    "--sim-fault",
                    "rank=*:slow-read=3MB/s",
                ],
                env=env,
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and not (runs.exists() and any(runs.iterdir())):
                time.sleep(0.5)
            run = next(iter(runs.iterdir()))
            wait_loading(run, 120)
            bare = [bare_cli(env) for _ in range(args.repeat)]
            results = [measure("supervisor", args.repeat, env, runs, tb.inventory, run.name)]
            os.killpg(boot.pid, signal.SIGKILL)  # the controller dies; the ranks keep loading
            boot.wait(timeout=10)
            results.append(measure("live", args.repeat, env, runs, tb.inventory, run.name))
            # The same live call asking one node, then all eight, alternated: on real Sparks
            # each node answers on its own CPUs; here all eight share this machine's.
            by_nodes: dict[int, list[tuple[float, float]]] = {1: [], 8: []}
            for _ in range(args.repeat):
                for n in (1, 8):
                    by_nodes[n].append(in_process_nodes(runs, run.name, n))
            if args.profile:
                import cProfile

                cProfile.runctx(
                    "in_process(runs, run.name)", globals(), locals(), str(args.profile)
                )
    finally:
        if boot is not None and boot.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(boot.pid, signal.SIGKILL)
            boot.wait(timeout=10)
        for nd in tb.nodes:
            with contextlib.suppress(Exception):
                ids = tb.docker(nd, "ps", "-aq", "--filter", "label=cluster.run", check=False)
                if ids.stdout.split():
                    tb.docker(nd, "rm", "-f", *ids.stdout.split(), check=False)
        tb.down()
    if args.json:
        print(json.dumps({"bare_cli_s": bare, "results": results, "live_by_nodes_s": by_nodes}))
        return
    med = statistics.median
    print(
        f"cluster status --json, 8 ranks loading, {args.repeat} runs each (median, min-max); "
        "target < 1 s"
    )
    print(
        f"  CLI start-up alone (`--help`):       {med(bare):.2f} s ({min(bare):.2f}-{max(bare):.2f})"
    )
    for r in results:
        calls, clis = r["in_process_s"], r["cli_s"]
        print(
            f"  source {r['source']:<10} in-process: {med(calls):.3f} s "
            f"({min(calls):.3f}-{max(calls):.3f}); whole CLI: {med(clis):.2f} s "
            f"({min(clis):.2f}-{max(clis):.2f}); phases {', '.join(r['phases'])}"
        )

    one, eight = (med(w for w, _ in by_nodes[n]) for n in (1, 8))
    cpu1, cpu8 = (med(c for _, c in by_nodes[n]) for n in (1, 8))
    print(
        f"  live in-process asking 1 node: {one:.3f} s, asking 8: {eight:.3f} s; "
        f"8 nodes / 1 node = {eight / one:.2f}x; the controller's own CPU: "
        f"{cpu1:.3f} s and {cpu8:.3f} s"
    )


if __name__ == "__main__":
    main()
