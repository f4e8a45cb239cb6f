"""Benchmark: `cluster weights push` on the 8-node testbed, links shaped to 25 Mbit/s, one run.

    flock /tmp/cluster-heavy.lock .venv/bin/python bench/weights_push.py [--mb 200] [--rate 25mbit]

Brings up the testbed (each node's /models is its own folder: eight copies are eight copies),
writes a model directory of real-looking safetensors shards (random data: weights do not
compress) plus index, config and tokenizer, shapes every node's management link (the one the
chain and rsync use; the controller reaches node k through node k's link) to `--rate` with tbf,
and measures in one run:

1. T(cluster weights push to 8) / T(one real `rsync -a` of the same directory to one node), the
   peers' per-node way (sparkrun's model sync runs one rsync per node: ~8x that for eight);
   target <= 1.25x;
2. a re-push when all 8 hold it, the whole command (target < 3 s);
3. one shard corrupted on one node and repaired: the bytes that crossed that node's link
   during the repair push / the shard's size (target < 1.5x), and the bytes every other node
   received meanwhile (only the probes).

The issue asks for 2 GB; at 25 Mbit/s that is ~11 minutes per transfer on this shared 2-core
machine, so the default is 200 MiB at the same link rate: the ratios are what is measured.
Prints the figures; exits non-zero when a push fails or a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.testbed import Testbed  # noqa: E402
from tests.weights_model import make_model  # noqa: E402

DEST = "/models/org/bench"


def cluster(inventory: Path, *args: str) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "weights",
            *args,
            "-i",
            str(inventory),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    took = time.monotonic() - started
    if r.returncode != 0:
        raise SystemExit(f"cluster weights {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return took, json.loads(r.stdout)


def rsync_to_one(tb: Testbed, model: Path) -> float:
    """`rsync -a MODEL/ node0:/models/rsync/`: over the same OpenSSH, key and known_hosts."""
    ssh = tb.ssh_argv(0)
    rsh = " ".join(a for a in ssh[:-3] if a)  # everything but `-l root ADDR`
    started = time.monotonic()
    subprocess.run(
        [
            "rsync",
            "-a",
            "-e",
            rsh,
            f"{model}/",
            f"root@{tb.node(0).mgmt_addr}:/models/rsync/",
        ],
        check=True,
        capture_output=True,
        timeout=1800,
    )
    return time.monotonic() - started


def rx(tb: Testbed, k: int) -> int:
    """Bytes the controller side sent into node k's management link (its download)."""
    host_veth, _ = tb.node(k).iface_pair("mgmt")
    return int(Path(f"/sys/class/net/{host_veth}/statistics/tx_bytes").read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200, help="model size in MiB")
    ap.add_argument("--shards", type=int, default=5)
    ap.add_argument("--rate", default="25mbit")
    args = ap.parse_args()
    tb = Testbed()
    tb.up(8)
    work = Path(tempfile.mkdtemp(prefix="bench-weights-"))
    out: dict[str, Any] = {}
    try:
        model = make_model(
            work / "bench", shards=args.shards, shard_bytes=(args.mb << 20) // args.shards
        )
        size = sum(p.stat().st_size for p in model.iterdir())
        shard = sorted(model.glob("*.safetensors"))[1]
        for k in range(8):
            tb.shape_link(k, "mgmt", args.rate)
        print(
            f"model: {size / 2**20:.0f} MiB in {len(list(model.iterdir()))} files "
            f"({args.shards} safetensors shards of random data); every management link {args.rate}"
        )
        out["rsync1"] = rsync_to_one(tb, model)
        print(f"rsync -a to 1 node: {out['rsync1']:.1f} s")
        out["push8"], doc = cluster(tb.inventory, "push", str(model), "--dest", DEST)
        assert {n["action"] for n in doc["nodes"]} == {"sent"}, doc
        out["round8"] = doc["rounds"][0]["seconds"]
        print(f"cluster weights push to 8: {out['push8']:.1f} s (round {out['round8']:.1f} s)")
        again = []
        for _ in range(3):
            t, doc = cluster(tb.inventory, "push", str(model), "--dest", DEST)
            assert {n["action"] for n in doc["nodes"]} == {"skipped"}, doc
            again.append(t)
        out["repush"] = statistics.median(again)
        print(f"re-push, all 8 hold it: {', '.join(f'{t:.2f}' for t in again)} s")
        victim = tb.node(5).view(DEST) / shard.name
        with open(victim, "r+b") as f:
            f.seek(victim.stat().st_size // 2)
            f.write(b"\xff" * 16)
        before = [rx(tb, k) for k in range(8)]
        out["repair_s"], doc = cluster(tb.inventory, "push", str(model), "--dest", DEST)
        after = [rx(tb, k) for k in range(8)]
        moved = [a - b for a, b in zip(after, before, strict=True)]
        rows = {n["node"]: n for n in doc["nodes"]}
        assert rows[tb.node(5).name]["action"] == "sent" and len(doc["rounds"]) == 1, doc
        out["repair_bytes"] = moved[5]
        out["shard_bytes"] = shard.stat().st_size
        out["others_max"] = max(m for k, m in enumerate(moved) if k != 5)
        print(
            f"repair of {shard.name} on {tb.node(5).name}: {moved[5] / 2**20:.2f} MiB into it "
            f"for a {out['shard_bytes'] / 2**20:.2f} MiB shard, {out['repair_s']:.1f} s; "
            f"every other node received at most {out['others_max'] / 1024:.0f} KiB (probes)"
        )
    finally:
        tb.down()
        shutil.rmtree(work, ignore_errors=True)
    r1 = out["push8"] / out["rsync1"]
    r3 = out["repair_bytes"] / out["shard_bytes"]
    print()
    print(f"1. push to 8 / rsync -a to 1:   {r1:.2f}x (target <= 1.25x)")
    print(f"2. re-push, all 8 hold it:      {out['repush']:.2f} s (target < 3 s)")
    print(f"3. repair bytes / shard bytes:  {r3:.2f}x (target < 1.5x)")
    if r1 > 1.25 or out["repush"] >= 3 or r3 >= 1.5:
        raise SystemExit("a target was missed")


if __name__ == "__main__":
    main()
