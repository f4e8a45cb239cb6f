"""Accuracy of `cluster postmortem --logs FILE` on real public logs, per split and per label.

    .venv/bin/python bench/postmortem_corpus.py [--cases]

Diagnoses every case of tests/fixtures/postmortem-corpus/ (excerpts users pasted into public
trackers, labelled by hand; the README there says how) through `postmortem_logs`, the function
the CLI's `--logs` path calls, and prints, for the train split (before the README's cutoff: what
the signatures were written from) and the held-out split (never read while writing them):
right/total, accuracy, failures called `ready` (must be 0), accuracy per label, the confusions,
and the seconds per case. `--cases` also names the train misses (held-out cases are never named).
Last, the start-up: `cluster postmortem --logs FILE --json` on a one-line log, as a user runs it
(a new process each time), median of 5 (target: under 0.6 s).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.postmortem_corpus import cases_of, cutoff, score, summary_lines  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", action="store_true", help="name the train misses")
    args = parser.parse_args()
    print(f"corpus: tests/fixtures/postmortem-corpus (cutoff {cutoff()})")
    for split in ("train", "held-out"):
        cases = cases_of(split)  # type: ignore[arg-type]
        began = time.perf_counter()
        s = score(cases)
        took = time.perf_counter() - began
        show = args.cases and split == "train"
        print("\n".join(summary_lines(split, s, show_cases=show)))
        print(f"  {took / max(s.total, 1) * 1000:.1f} ms per case ({s.total} cases)")
    print(f"start-up: cluster postmortem --logs FILE --json: {startup_s():.2f} s (median of 5)")
    return 0


def startup_s(runs: int = 5) -> float:
    cluster = Path(sys.executable).with_name("cluster")
    with tempfile.TemporaryDirectory(prefix="pm-startup-") as tmp:
        log = Path(tmp) / "rank-0.log"
        log.write_text("[2025-03-09 00:57:15 TP0] Watchdog timeout (self.watchdog_timeout=300)\n")
        times = []
        for _ in range(runs):
            began = time.perf_counter()
            subprocess.run(
                [str(cluster), "postmortem", "--logs", str(log), "--json"],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            times.append(time.perf_counter() - began)
    return statistics.median(times)


if __name__ == "__main__":
    raise SystemExit(main())
