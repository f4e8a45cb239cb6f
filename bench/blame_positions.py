"""Benchmark and sweep: the postmortem's blame in every rank position, on the netns testbed.

    flock /tmp/netns.lock .venv/bin/python bench/blame_positions.py [-k EXPR]

Runs tests/netns/test_blame_netns.py with CLUSTER_BLAME_SWEEP=all: a straggler reading at
2 MB/s in each of the eight rank positions on SGLang and on vLLM (16 boots of the twins at the
test scale on eight real sshd + dockerd nodes), and the rank started late; each must be blamed
by `cluster postmortem` with its cause. The default suite runs the head, a middle and the last
rank of each engine (the module's docstring says why). Needs root, like the netns tier.

Prints, one line per drill: the boot's wall seconds, its outcome, the postmortem's first line
and the blamed rank, category and confidence; then the whole sweep's wall seconds (pytest's
set-up of the testbed included) and the median boot. Exit status: pytest's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE = "tests/netns/test_blame_netns.py"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-k", default="", help="pytest -k expression (default: every drill)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="blame-sweep-") as tmp:
        figures = Path(tmp) / "figures.jsonl"
        env = {
            **os.environ,
            "CLUSTER_BLAME_SWEEP": "all",
            "CLUSTER_BLAME_FIGURES": str(figures),
        }
        argv = [sys.executable, "-m", "pytest", "-q", MODULE, "-p", "no:cacheprovider"]
        argv += ["--durations=0", *(["-k", args.k] if args.k else [])]
        began = time.monotonic()
        rc = subprocess.call(argv, cwd=ROOT, env=env)
        wall = time.monotonic() - began
        rows = (
            [json.loads(line) for line in figures.read_text().splitlines()]
            if figures.exists()
            else []
        )
    print()
    print(f"{'drill':<32} {'boot s':>6}  {'outcome':<17} {'blamed':<6} {'category':<22} conf")
    for r in rows:
        print(
            f"{r['drill']:<32} {r['boot_s']:>6.1f}  {r['outcome'] or '-':<17} "
            f"{r['rank'] if r['rank'] is not None else '-':<6} {r['category'] or '-':<22} "
            f"{r['confidence'] or '-'}"
        )
        print(f"    {r['headline']}")
        print(f"    {r['title']}")
        if r.get("logs_alone"):
            print(f"    by the logs alone: {r['logs_alone']}")
    boots = [r["boot_s"] for r in rows]
    if boots:
        print(
            f"\n{len(boots)} boots: median {statistics.median(boots):.1f} s, "
            f"min {min(boots):.1f} s, max {max(boots):.1f} s, sum {sum(boots):.0f} s"
        )
    print(f"the sweep (pytest, testbed set-up and teardown included): {wall:.0f} s, exit {rc}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
