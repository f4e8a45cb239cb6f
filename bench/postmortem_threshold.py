"""The withholding threshold judged on unseen answers (issue 29, "precision first"): had the
threshold been T, what would each frozen set's first score have been?

    PYTHONPATH=. .venv/bin/python bench/postmortem_threshold.py [--sets NAME,...]

The shipped threshold is chosen on the corpus's train folds (leave-one-source-out). This asks
the question the issue puts, on logs the method had not seen: for every set with a `FROZEN.md`
naming the commit it was scored with, a worktree of that commit diagnoses each case
(`postmortem_logs`, as `cluster postmortem --logs FILE` does) and records the answer, its
confidence (the deciding path's measured precision, or the model's probability), the category
withheld below that commit's threshold (`closest`) and the threshold itself. Then, for each
threshold T, a rule's answer is named when its confidence is at least T (a withheld `closest`
too); answers with no confidence (the evidence only a run directory holds) and the learned
model's (its own threshold, learned.json) stand as they were.

Sets scored before calibration existed (no `confidence`) are listed and left out. The figures
rest on first answers, each with the rules that scored its set; the sweep itself was written
after all of them were read, so a threshold chosen from it is training, judged by the next
unseen set.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from bench.postmortem_fallbacks import frozen_commit, probe
from bench.postmortem_third import verdict_of

# Run inside the worktree (its own `orchestrator`): only APIs every calibrated commit has.
PROBE = r"""
import glob, json, pathlib, sys, tempfile, yaml
from orchestrator.postmortem import postmortem_logs
try:
    from orchestrator.postmortem.calibration import load_calibration
    threshold = load_calibration().threshold
except ImportError:
    threshold = None
out = []
for f in sorted(glob.glob(sys.argv[1] + "/*.yaml")):
    case = yaml.safe_load(open(f, encoding="utf-8"))
    path = pathlib.Path(tempfile.mkdtemp()) / "excerpt.log"
    path.write_text(case["excerpt"] + "\n", encoding="utf-8")
    d = postmortem_logs([path])
    answer = "no-failure" if getattr(d, "outcome", None) == "no-failure" else str(d.category)
    out.append({"label": case["label"], "answer": answer,
                "confidence": getattr(d, "confidence", None), "closest": getattr(d, "closest", None),
                "by": getattr(d, "decided_by", None), "threshold": threshold})
json.dump(out, sys.stdout)
"""

THRESHOLDS = (0.0, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
WRONG_COST = 5  # as the calibration's (tests/postmortem_corpus.py): worth = right - 5 x wrong


def answer_at(row: dict[str, object], t: float) -> str:
    """The answer had the threshold been `t`."""
    conf = row["confidence"]
    if not isinstance(conf, float) or str(row["by"]).startswith("model:"):
        return str(row["answer"])  # the learned model's answers keep their own threshold
    named = row["closest"] or row["answer"]
    if named in ("unknown", "no-failure", "ready"):
        return str(row["answer"])
    return str(named) if conf >= t else "unknown"


def main() -> int:
    from bench.postmortem_third import SETS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="", help="comma-separated set names (default: all)")
    args = parser.parse_args()
    names = [s for s in args.sets.split(",") if s] or list(SETS)
    rows: list[dict[str, object]] = []
    shipped: Counter[str] = Counter()
    for name in names:
        commit = frozen_commit(name)
        if commit is None:
            print(f"{name}: no frozen commit, left out")
            continue
        got = probe(name, commit, PROBE)
        if isinstance(got, str):
            print(f"{name}: left out, {got}")
            continue
        if not any(isinstance(r["confidence"], float) for r in got):
            print(f"{name} ({commit}): no confidence in that commit's answers, left out")
            continue
        now = Counter(verdict_of(str(r["label"]), str(r["answer"])) for r in got)
        shipped.update(now)
        print(
            f"{name:>14} ({commit}, threshold {got[0]['threshold']}): {now['correct']}/{len(got)}"
            f" right, {now['wrong']} wrong (its first score, as frozen)"
        )
        rows += got
    n = len(rows)
    if not n:
        print("no set with confidences")
        return 1
    print(f"\n{n} cases; as scored: right {shipped['correct']}, wrong {shipped['wrong']}")
    print(f"{'threshold':>9}  {'right':>12}  {'wrong':>11}  {'unknown':>7}  {'worth':>5}")
    for t in THRESHOLDS:
        v = Counter(verdict_of(str(r["label"]), answer_at(r, t)) for r in rows)
        print(
            f"{t:>9.2f}  {v['correct']:5d} ({100 * v['correct'] / n:4.1f}%)"
            f"  {v['wrong']:4d} ({100 * v['wrong'] / n:4.1f}%)  {v['unknown']:7d}"
            f"  {v['correct'] - WRONG_COST * v['wrong']:5d}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
