"""Accuracy of `cluster postmortem --logs FILE` on real public logs: held-out, leave-one-source-out.

    .venv/bin/python bench/postmortem_corpus.py [--cases] [--calibrate]

Diagnoses every case of tests/fixtures/postmortem-corpus/ (excerpts users pasted into public
trackers, labelled by hand; the README there says how) through the functions the CLI's `--logs`
path calls, and prints, in one run:

- train (before the README's cutoff: what the signatures were written from) and held-out (never
  read while writing them): right/total, wrong (a named category, or `ready`, that is not the
  label), withheld, failures called `ready` (must be 0), per label, the confusions; each also
  as it would be with nothing withheld (`raw`);
- leave-one-source-out: each tracker family's cases (vllm, sglang, torch-nccl, containerd-moby,
  hf, kernels, other; by the tracker they were pasted in), of the corpus and of the mined sets
  (`MINED_SETS`: unseen sets scored once, frozen, then mined), diagnosed without the rules
  written from that family alone (each rule's `provenance`), and judged by a calibration and a
  model made without that family's cases: right, wrong, per family and overall;
- the start-up of `cluster postmortem --logs FILE --json` (median of 5, target <= 0.5 s).

`--cases` names the train misses (held-out cases are never named). `--calibrate` first
regenerates the data the answers rest on from the train cases (the corpus's train split and the
mined sets): each signature's `provenance` (written into signatures/*.yaml), the exception
families' provenance, the per-path precision and threshold (calibration.json) and the model
(learned.json). The calibration's threshold is the one whose train answers (leave-one-source-
out) are worth most when a wrong answer costs WRONG_COST right ones, never over WRONG_CAP wrong;
the model's is chosen by the same worth against the model switched off, never over WRONG_TARGET.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.postmortem.calibration import (  # noqa: E402
    CALIBRATION_FILE,
    Calibration,
    load_calibration,
)
from orchestrator.postmortem.learned import (  # noqa: E402
    MODEL_FILE,
    LinearModel,
    _shipped_model,
)
from orchestrator.postmortem.signatures import (  # noqa: E402
    SIGNATURES_DIR,
    TRACKER_FAMILIES,
    load_signatures,
)
from tests.postmortem_corpus import (  # noqa: E402
    PROVENANCE_FILES,
    WRONG_TARGET,
    Provenance,
    Score,
    calibrate,
    cases_of,
    choose_model,
    cutoff,
    every_case,
    loso,
    measure_provenance,
    raw,
    score,
    shipped_provenance,
    summary_lines,
    training_cases,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", action="store_true", help="name the train misses")
    parser.add_argument(
        "--calibrate", action="store_true", help="regenerate provenance and calibration.json"
    )
    args = parser.parse_args()
    if args.calibrate:
        prov = measure_provenance()
        write_provenance(prov)
        load_signatures.cache_clear()
        folds = loso(prov, every_case())
        shipped, per = calibrate(folds, prov)
        CALIBRATION_FILE.write_text(json.dumps(shipped.as_json(), indent=1) + "\n")
        load_calibration.cache_clear()
        print(f"wrote {CALIBRATION_FILE.relative_to(REPO)} (threshold {shipped.threshold})")
        rows = score(training_cases(), model=LinearModel()).outcomes
        model, _ = choose_model(folds, per, rows, wrong_target=WRONG_TARGET)
        MODEL_FILE.write_text(json.dumps(model.as_json(), separators=(",", ":")) + "\n")
        _shipped_model.cache_clear()
        print(
            f"wrote {MODEL_FILE.relative_to(REPO)} ({len(model.weights)} features, "
            f"threshold {model.threshold})"
        )
    calib = load_calibration()
    print(f"corpus: tests/fixtures/postmortem-corpus (cutoff {cutoff()})")
    print(f"calibration: threshold {calib.threshold} ({calib.basis or 'none shipped'})")
    for split in ("train", "held-out"):
        cases = cases_of(split)
        began = time.perf_counter()
        s = score(cases)
        took = time.perf_counter() - began
        show = args.cases and split == "train"
        print("\n".join(summary_lines(split, s, show_cases=show)))
        print(f"  {rates(s)}")
        print(f"  the rules alone (nothing withheld, no model): {rates(raw(s))}")
        print(f"  {took / max(s.total, 1) * 1000:.1f} ms per case ({s.total} cases)")
    prov = shipped_provenance()
    folds = loso(prov, every_case())
    _, per = calibrate(folds, prov)
    rows = score(training_cases(), model=LinearModel()).outcomes
    _, models = choose_model(folds, per, rows, wrong_target=WRONG_TARGET)
    print_loso(prov, folds, per, models)
    wall, cpu = startup_s()
    print(
        f"start-up: cluster postmortem --logs FILE --json: wall {wall:.2f} s, cpu {cpu:.2f} s "
        "(medians of 5; target <= 0.5 s)"
    )
    return 0


def rates(s: Score) -> str:
    withheld = sum(o.got == "unknown" and o.raw != "unknown" for o in s.outcomes)
    return (
        f"right {s.right}/{s.total} ({100 * s.accuracy:.1f}%), wrong {s.wrong} "
        f"({100 * s.wrong_rate:.1f}%), withheld {withheld}, "
        f"failures called ready {s.failures_called_ready}"
    )


def print_loso(
    prov: Provenance,
    folds: dict[str, Score],
    per: dict[str, Calibration],
    models: dict[str, LinearModel],
) -> None:
    print(
        "leave-one-source-out (each family without the rules written from it alone, judged by "
        "a calibration and a model made without its cases):"
    )
    total = Score()
    total_rules = Score()
    total_raw = Score()
    for fam in TRACKER_FAMILIES:
        if fam not in folds:
            continue
        off_sigs, off_fams = prov.rules_of_only(fam)
        judged = folds[fam].under(per[fam], models[fam])
        total = total + judged
        total_rules = total_rules + folds[fam].under(per[fam])
        total_raw = total_raw + raw(folds[fam])
        print(
            f"  {fam:<16} {rates(judged)}; rules alone {100 * raw(folds[fam]).accuracy:.1f}% "
            f"({len(off_sigs)} signatures, {len(off_fams)} exception families off)"
        )
    print(f"  {'all':<16} {rates(total)}")
    print(f"  {'all, rules':<16} {rates(total_rules)}")
    print(f"  {'all, raw rules':<16} {rates(total_raw)}")


_ID_LINE = re.compile(r"^- id: (?P<id>[a-z0-9-]+)\s*$")
_PROV_LINE = re.compile(r"^  provenance: ")


def write_provenance(prov: Provenance) -> None:
    """Each signature's `provenance:` line, right under its `- id:` line (replaced if there)."""
    for path in (SIGNATURES_DIR / name for name in PROVENANCE_FILES):
        out: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
            if _PROV_LINE.match(line):
                continue
            out.append(line)
            m = _ID_LINE.match(line)
            if m is not None:
                fams = prov.signatures.get(m.group("id"), ())
                out.append(f"  provenance: [{', '.join(fams)}]\n")
        path.write_text("".join(out), encoding="utf-8")


def startup_s(runs: int = 5) -> tuple[float, float]:
    """Median wall and CPU (user + system) seconds of the CLI on a one-line log: the CPU time
    is what the machine's load does not change."""
    cluster = Path(sys.executable).with_name("cluster")
    with tempfile.TemporaryDirectory(prefix="pm-startup-") as tmp:
        log = Path(tmp) / "rank-0.log"
        log.write_text("[2025-03-09 00:57:15 TP0] Watchdog timeout (self.watchdog_timeout=300)\n")
        walls, cpus = [], []
        for _ in range(runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            began = time.perf_counter()
            subprocess.run(
                [str(cluster), "postmortem", "--logs", str(log), "--json"],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            walls.append(time.perf_counter() - began)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


if __name__ == "__main__":
    raise SystemExit(main())
