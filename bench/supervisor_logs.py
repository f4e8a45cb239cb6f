"""Benchmark: the supervisor following 8 ranks that each log 2,000 lines/s for 60 s (issue 7).

    sudo .venv/bin/python bench/supervisor_logs.py [--rate 2000] [--seconds 60] [--json]

Brings the netns testbed up (root; run it under `flock /run/cluster-testbed.lock`), starts one
log-spewing container per node (`ctb/busybox:1` running this machine's Python, read-only, as the
simulated twin does), and drives the real supervisor machinery on them: a `Follower` per rank
(`docker logs -f --timestamps` over real SSH into `rank-<k>/`), the per-node sampler every
2 s, every line folded into the boot state (progress parsing included), `status.json` written
every second. The lines are SGLang's own chatter at serving volume (decode/prefill batch lines,
shard-bar updates every 50th line), each carrying a sequence number.

It prints the controller's CPU (user + system of this process, from psutil) over the spewing
window as a share of one core, and the lines lost: per rank, every sequence number must be in
the preserved copy exactly once, and the preserved copy must equal the node's
`docker logs --timestamps` (compared before the final reconciliation, which then must repair
0 bytes). Target (issue 7): under 15% of one core, 0 lines lost.

Then (unless --no-floor) it spews again and reads the streams over the same SSH transport with
nothing else (`drain_spew`): the floor that asyncssh and the event loop cost alone, printed with
the supervisor's share on top of it and the ratio of the two (issue 31: at most 1.3x).
`--no-openssh` skips the third spew (the same floor through OpenSSH's client).

`--profile FILE` runs the supervised spew under cProfile (its CPU figure is then inflated by the
profiler), keeps the stats in FILE and prints the functions that cost the most: where the
supervisor's share on top of the floor goes (parsing, folding, status writes, metrics).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import pstats
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.dockercli import DockerCli  # noqa: E402
from orchestrator.inventory import load_inventory  # noqa: E402
from orchestrator.plan.launch import LABEL_RANK, LABEL_RUN  # noqa: E402
from orchestrator.run.boot import host_python  # noqa: E402
from orchestrator.runstore import RunStore  # noqa: E402
from orchestrator.runtime.base import RankSpec  # noqa: E402
from orchestrator.runtime.docker import DockerRuntime  # noqa: E402
from orchestrator.supervisor.supervise import SuperviseConfig, Supervisor  # noqa: E402
from orchestrator.supervisor.watchers import WatchConfig  # noqa: E402
from orchestrator.testbed import DAEMON_ENV, REAL_DOCKER, TEST_IMAGE, Testbed  # noqa: E402
from orchestrator.transport import ConnectOptions  # noqa: E402
from orchestrator.transport.pool import close_transports, open_transports  # noqa: E402

# Runs inside the container (stdlib only): RATE lines/s for SECONDS, in 10 ms batches paced on
# the monotonic clock (a late batch catches up), all on stderr as SGLang logs; then exits 0.
SPEWER = r"""
import os, sys, time
rank, rate, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
total = int(rate * secs)
batch = max(rate // 100, 1)
def line(i):
    now = time.strftime("%Y-%m-%d %H:%M:%S")
    if i % 50 == 0:
        pct = i * 100 // total
        return (f"[{now} TP{rank}] Loading safetensors checkpoint shards: {pct:3d}% Completed "
                f"| {i * 13 // total}/13 [00:04<00:05,  1.31it/s] seq={i}\n")
    if i % 7 == 0:
        return (f"[{now} TP{rank}] Prefill batch. #new-seq: 1, #new-token: 512, #cached-token: 0, "
                f"token usage: 0.01, #running-req: 7, #queue-req: 0 seq={i}\n")
    return (f"[{now} TP{rank}] Decode batch. #running-req: 8, #token: {i % 9000 + 1000}, "
            f"token usage: 0.02, gen throughput (token/s): 412.33, #queue-req: 0 seq={i}\n")
t0 = time.monotonic()
i = 0
while i < total:
    delay = t0 + i / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    n = min(batch, total - i)
    os.write(2, "".join(line(i + j) for j in range(n)).encode())
    i += n
os.write(2, f"[spewer] rank {rank} done: {total} lines in {time.monotonic() - t0:.2f} s\n".encode())
"""
SEQ = re.compile(rb" seq=(\d+)\n$")


def rank_specs(inventory: Any, run_id: str, rate: int, seconds: float) -> list[RankSpec]:
    specs = []
    for node in inventory.nodes:
        name = f"cluster-{run_id}-r{node.rank}"
        labels = {LABEL_RUN: run_id, LABEL_RANK: str(node.rank)}
        argv = [
            *DockerCli.of(node).base,
            "run",
            "--detach",
            "--name",
            name,
            *(x for k, v in labels.items() for x in ("--label", f"{k}={v}")),
            "--network",
            "host",
            "--log-driver",
            "json-file",
            "--log-opt",
            "max-size=1g",
            *(x for v in host_python() for x in ("--volume", v)),
            "--entrypoint",
            sys.executable,
            TEST_IMAGE,
            "-c",
            SPEWER,
            str(node.rank),
            str(rate),
            str(seconds),
        ]
        specs.append(
            RankSpec(
                rank=node.rank,
                node=node,
                name=name,
                argv=(),
                docker_run=tuple(argv),
                labels=labels,
            )
        )
    return specs


async def supervise_spew(
    inventory: Any, run_root: Path, rate: int, seconds: float
) -> dict[str, Any]:
    store = RunStore(run_root)
    run = store.create()
    specs = rank_specs(inventory, run.id, rate, seconds)
    transports = open_transports(inventory, ConnectOptions())
    runtime = DockerRuntime(transports)
    sup = Supervisor(
        run,
        specs,
        runtime,
        SuperviseConfig(watch=WatchConfig(barrier_window_s=15.0), ready_url=None),
        recipe="bench-supervisor-logs",
    )
    folded = 0
    fold_lines = sup._on_lines

    def counting(rank: int, stream: str, texts: list[str]) -> None:
        nonlocal folded
        folded += len(texts)
        fold_lines(rank, stream, texts)

    for f in sup.followers:
        f.on_lines = counting
    me = psutil.Process()
    try:
        # Connect and start every rank first (as `cluster boot` does before supervising).
        await asyncio.gather(*(t.connect() for t in transports.values()))
        for spec in specs:
            await runtime.start(spec)
            sup.mark_started(spec)
        cpu0, wall0, box0 = me.cpu_times(), time.monotonic(), psutil.cpu_times()
        follow = [asyncio.create_task(f.run(sup.stop)) for f in sup.followers]
        samplers = [asyncio.create_task(sup._sample_loop(s)) for s in specs]

        async def tick() -> None:  # what supervise() does every second
            while not sup.stop.is_set():
                await asyncio.sleep(sup.cfg.tick_s)
                sup._judge()
                sup._publish("booting")

        ticker = asyncio.create_task(tick())
        # Each follower returns once its container exited and its stream is read to the end.
        await asyncio.wait_for(asyncio.gather(*follow), seconds + 600)
        wall1, cpu1, box1 = time.monotonic(), me.cpu_times(), psutil.cpu_times()
        sup.stop.set()
        await asyncio.gather(ticker, *samplers, return_exceptions=True)
        node_logs = {s.rank: compare_with_node(s, run.rank_dir(s.rank)) for s in specs}
        reconciled = [await f.reconcile() for f in sup.followers]
        for f in sup.followers:
            f.close()
    finally:
        await close_transports(transports)
    per_rank = []
    for spec, f in zip(specs, sup.followers, strict=True):
        per_rank.append(
            {
                "rank": spec.rank,
                "reconnects": f.reconnects,
                "repaired_bytes": reconciled[spec.rank],
                **node_logs[spec.rank],
            }
        )
    busy = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    idle = (box1.idle + getattr(box1, "iowait", 0)) - (box0.idle + getattr(box0, "iowait", 0))
    box_busy = sum(box1) - sum(box0) - idle
    return {
        "run_dir": str(run.dir),
        "ranks": len(specs),
        "rate_per_rank": rate,
        "seconds": seconds,
        "wall_s": wall1 - wall0,
        "controller_cpu_s": busy,
        "controller_cpu_pct_of_one_core": 100 * busy / (wall1 - wall0),
        "controller_cpu_us_per_line": 1e6 * busy / max(folded, 1),
        "machine_busy_cores": box_busy / (wall1 - wall0),
        "machine_cores": psutil.cpu_count(),
        "lines_folded": folded,
        "per_rank": per_rank,
    }


async def drain_spew(inventory: Any, rate: int, seconds: float) -> dict[str, Any]:
    """The floor: the same spew read over the same SSH transport, bytes counted, nothing else.

    No follower, no file, no parsing: what asyncssh and the event loop cost on their own, so
    the supervisor's figure can be read as floor + its own work."""
    run_id = "floor-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    specs = rank_specs(inventory, run_id, rate, seconds)
    transports = open_transports(inventory, ConnectOptions())
    runtime = DockerRuntime(transports)
    me = psutil.Process()
    received = 0

    async def drain(spec: RankSpec) -> None:
        nonlocal received
        argv = DockerCli.of(spec.node).logs(spec.name, follow=True)
        async for _, chunk in transports[spec.node.name].stream_chunks(argv):
            received += len(chunk)

    try:
        await asyncio.gather(*(t.connect() for t in transports.values()))
        for spec in specs:
            await runtime.start(spec)
        cpu0, wall0 = me.cpu_times(), time.monotonic()
        await asyncio.wait_for(asyncio.gather(*(drain(s) for s in specs)), seconds + 600)
        wall1, cpu1 = time.monotonic(), me.cpu_times()
    finally:
        await close_transports(transports)
    busy = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {
        "wall_s": wall1 - wall0,
        "cpu_s": busy,
        "cpu_pct_of_one_core": 100 * busy / (wall1 - wall0),
        "bytes": received,
    }


async def drain_spew_openssh(inventory: Any, rate: int, seconds: float) -> dict[str, Any]:
    """The same floor with OpenSSH's `ssh` client doing the SSH work (host keys still checked
    against the inventory's known_hosts), read from its pipe; the `ssh` processes' CPU counts
    as the controller's. Measures the alternative to asyncssh for followers; not used by boot."""
    run_id = "floorssh-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    specs = rank_specs(inventory, run_id, rate, seconds)
    transports = open_transports(inventory, ConnectOptions())
    runtime = DockerRuntime(transports)
    me = psutil.Process()
    received = 0

    async def drain(spec: RankSpec) -> None:
        nonlocal received
        node = spec.node
        argv = [
            "ssh", "-T", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={transports[node.name]._known_hosts}",  # type: ignore[attr-defined]
            "-p", str(node.port), *(["-i", str(node.private_key)] if node.private_key else []),
            f"{node.user}@{node.address}", "--",
            shlex.join(DockerCli.of(node).logs(spec.name, follow=True)),
        ]  # fmt: skip
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        assert proc.stdout is not None and proc.stderr is not None

        async def pump(reader: asyncio.StreamReader) -> None:
            nonlocal received
            while chunk := await reader.read(65536):
                received += len(chunk)

        await asyncio.gather(pump(proc.stdout), pump(proc.stderr))
        await proc.wait()

    try:
        await asyncio.gather(*(t.connect() for t in transports.values()))
        for spec in specs:
            await runtime.start(spec)
        cpu0, wall0 = me.cpu_times(), time.monotonic()
        await asyncio.wait_for(asyncio.gather(*(drain(s) for s in specs)), seconds + 600)
        wall1, cpu1 = time.monotonic(), me.cpu_times()
    finally:
        await close_transports(transports)
    # The `ssh` processes were reaped: their CPU (handshakes included) is in children_*.
    kids = (cpu1.children_user - cpu0.children_user) + (cpu1.children_system - cpu0.children_system)
    busy = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system) + kids
    return {
        "wall_s": wall1 - wall0,
        "cpu_s": busy,
        "ssh_processes_cpu_s": kids,
        "cpu_pct_of_one_core": 100 * busy / (wall1 - wall0),
        "bytes": received,
    }


def compare_with_node(spec: RankSpec, rank_dir: Path) -> dict[str, Any]:
    """The preserved copy (before reconciliation) against the node's `docker logs`."""
    proc = subprocess.run(
        [REAL_DOCKER, "-H", str(spec.node.docker_host), "logs", "--timestamps", spec.name],
        capture_output=True,
        timeout=300,
        env=DAEMON_ENV,
        check=True,
    )
    kept = (rank_dir / "stderr.log").read_bytes()
    seqs: dict[int, int] = {}
    for line in kept.split(b"\n"):
        m = SEQ.search(line + b"\n")
        if m:
            k = int(m.group(1))
            seqs[k] = seqs.get(k, 0) + 1
    node_lines = proc.stderr.count(b"\n")
    produced = sum(1 for line in proc.stderr.split(b"\n") if SEQ.search(line + b"\n"))
    return {
        "node_lines": node_lines,
        "kept_lines": kept.count(b"\n"),
        "seq_lines_on_node": produced,
        "seq_kept": len(seqs),
        "duplicates": sum(c - 1 for c in seqs.values() if c > 1),
        "lost": produced - len(seqs),
        "identical_to_node": kept == proc.stderr,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=2000, help="lines per second per rank")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep-up", action="store_true", help="leave the testbed up afterwards")
    ap.add_argument(
        "--no-floor", action="store_true", help="skip the second spew read by the transport alone"
    )
    ap.add_argument("--no-openssh", action="store_true", help="skip the OpenSSH client's floor")
    ap.add_argument("--profile", type=Path, help="cProfile the supervised spew into this file")
    args = ap.parse_args()
    tb = Testbed()
    tb.up(8)
    try:
        tb.load_test_image()
        inventory = load_inventory(tb.inventory)
        profiler = cProfile.Profile() if args.profile else None
        with tempfile.TemporaryDirectory(prefix="bench-supervisor-logs-") as tmp:
            if profiler is not None:
                profiler.enable()
            result = asyncio.run(supervise_spew(inventory, Path(tmp), args.rate, args.seconds))
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(args.profile)
                result["profiled"] = str(args.profile)
        if not args.no_floor:
            result["floor"] = asyncio.run(drain_spew(inventory, args.rate, args.seconds))
        if not args.no_floor and not args.no_openssh:
            result["floor_openssh"] = asyncio.run(
                drain_spew_openssh(inventory, args.rate, args.seconds)
            )
    finally:
        for nd in tb.nodes:
            with contextlib.suppress(Exception):
                ids = tb.docker(nd, "ps", "-aq", "--filter", "label=cluster.run", check=False)
                if ids.stdout.split():
                    tb.docker(nd, "rm", "-f", *ids.stdout.split(), check=False)
        if not args.keep_up:
            tb.down()
    report(result, args.json)
    if args.profile and not args.json:
        print(f"\nthe supervised spew under cProfile ({args.profile}), by own time:")
        pstats.Stats(str(args.profile)).sort_stats("tottime").print_stats(25)


def report(r: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(r, indent=2))
        return
    total = r["ranks"] * r["rate_per_rank"] * r["seconds"]
    lost = sum(p["lost"] for p in r["per_rank"])
    dups = sum(p["duplicates"] for p in r["per_rank"])
    repaired = sum(p["repaired_bytes"] for p in r["per_rank"])
    same = all(p["identical_to_node"] for p in r["per_rank"])
    print(
        f"{r['ranks']} ranks x {r['rate_per_rank']} lines/s x {r['seconds']:.0f} s "
        f"= {total:,.0f} lines through sshd + dockerd; followed in {r['wall_s']:.1f} s"
    )
    print(
        f"controller CPU: {r['controller_cpu_s']:.1f} s = "
        f"{r['controller_cpu_pct_of_one_core']:.1f}% of one core (target < 15%)"
        + (" [under cProfile: inflated]" if "profiled" in r else "")
    )
    print(
        f"  = {r['controller_cpu_us_per_line']:.0f} µs per line; the whole machine (nodes' sshd, "
        f"dockerd, `docker logs` included) was busy {r['machine_busy_cores']:.2f} of "
        f"{r['machine_cores']} cores"
    )
    if "floor" in r:
        f = r["floor"]
        print(
            f"the transport alone (same spew, same SSH, bytes only): {f['cpu_pct_of_one_core']:.1f}%"
            f" of one core; the supervisor's own work on top: "
            f"{r['controller_cpu_pct_of_one_core'] - f['cpu_pct_of_one_core']:.1f}%; "
            f"supervisor / transport alone: "
            f"{r['controller_cpu_pct_of_one_core'] / max(f['cpu_pct_of_one_core'], 0.01):.2f}x"
        )
    if "floor_openssh" in r and "floor" in r:
        f, o = r["floor"], r["floor_openssh"]
        print(
            f"the same read by OpenSSH's `ssh` client (its processes counted): "
            f"{o['cpu_pct_of_one_core']:.1f}% of one core "
            f"(asyncssh / ssh: {f['cpu_pct_of_one_core'] / max(o['cpu_pct_of_one_core'], 0.01):.2f}x)"
        )
    print(f"lines folded (parsed into the boot state): {r['lines_folded']:,}")
    print(
        f"lines lost: {lost}; duplicated: {dups}; preserved copies identical to docker logs: "
        f"{same}; repaired at reconciliation: {repaired} bytes; reconnects: "
        f"{sum(p['reconnects'] for p in r['per_rank'])}"
    )
    for p in r["per_rank"]:
        print(
            f"  rank {p['rank']}: {p['seq_lines_on_node']:,} lines on the node, "
            f"{p['seq_kept']:,} kept, lost {p['lost']}, duplicates {p['duplicates']}"
        )


if __name__ == "__main__":
    main()
