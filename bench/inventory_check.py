"""Benchmark: `cluster inventory check` on 8 real testbed nodes vs 1, in one run.

    sudo .venv/bin/python bench/inventory_check.py [--repeat 5]

Brings the testbed up (root), times the whole CLI (process start included) against the
8-node inventory and a 1-node inventory cut from it, and prints the medians and their ratio.
The fan-out is parallel, so the ratio should stay near 1x.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.testbed import Testbed  # noqa: E402


def one_node_inventory(full: Path, out: Path) -> Path:
    import yaml

    data = yaml.safe_load(full.read_text())
    hosts = data["all"]["children"]["sparks"]["hosts"]
    first = next(iter(hosts))
    data["all"]["children"]["sparks"]["hosts"] = {first: hosts[first]}
    data["all"]["vars"]["cluster_known_hosts"] = str(full.parent / "known_hosts")
    out.write_text(yaml.safe_dump(data))
    return out


def time_check(inventory: Path) -> float:
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "inventory",
            "check",
            "-i",
            str(inventory),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"check failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    tb = Testbed()
    tb.up(8)
    try:
        one = one_node_inventory(tb.inventory, tb.root / "inventory-1.yaml")
        t8 = [time_check(tb.inventory) for _ in range(args.repeat)]
        t1 = [time_check(one) for _ in range(args.repeat)]
    finally:
        tb.down()
    m8, m1 = statistics.median(t8), statistics.median(t1)
    print(
        f"inventory check, 8 nodes: median {m8:.2f} s over {args.repeat} runs ({min(t8):.2f}-{max(t8):.2f})"
    )
    print(
        f"inventory check, 1 node:  median {m1:.2f} s over {args.repeat} runs ({min(t1):.2f}-{max(t1):.2f})"
    )
    print(
        f"ratio 8 nodes / 1 node: {m8 / m1:.2f}x (target: under 5 s for 8 nodes; parallel fan-out keeps the ratio near 1x)"
    )


if __name__ == "__main__":
    main()
