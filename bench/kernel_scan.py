"""Benchmark: reading a node's kernel window for the postmortem, keyword prefilter vs parsing
every line (orchestrator/kernel/read.py), on one 4 MiB window of realistic dmesg.

    .venv/bin/python bench/kernel_scan.py [--mib 4] [--json]

The window is this repository's captured testbed kernel log (a real cgroup OOM kill: the
OOM report, the call trace, the memory table) repeated to the size asked; both paths must find
the same family lines. Prints seconds per window for each and the ratio, measured in one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.kernel.read import events, family_events, parse_lines  # noqa: E402

CAPTURE = REPO / "tests" / "fixtures" / "kernel" / "captured-testbed-cgroup-oom.log"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=float, default=4.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    unit = CAPTURE.read_text()
    text = unit * max(1, int(args.mib * 2**20 / len(unit)))
    t0 = time.perf_counter()
    full = [(e.family, e.line.n) for e in events(parse_lines(text))]
    t1 = time.perf_counter()
    fast = [(e.family, e.line.n) for e in family_events(text)]
    t2 = time.perf_counter()
    assert fast == full, "the prefilter lost a family line"
    out = {
        "window_bytes": len(text.encode()),
        "family_lines": len(fast),
        "parse_every_line_s": round(t1 - t0, 3),
        "keyword_prefilter_s": round(t2 - t1, 3),
        "ratio": round((t1 - t0) / max(t2 - t1, 1e-9), 1),
    }
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
