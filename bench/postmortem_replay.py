"""Prospective replay: every frozen set scored again by the code of its own first score.

    PYTHONPATH=. .venv/bin/python bench/postmortem_replay.py [--cache DIR] [--sets a,b,...]

Each unseen set's `FROZEN.md` names the commit whose rules and model scored it once. For every
such set whose commit already had the learned model (learned.py), this checks that commit out in
a throw-away `git worktree`, diagnoses each case there (`bench/postmortem_fallbacks.probe`: a
child process, the old `orchestrator` never meets this one), and records per case: the label, the answer, its verdict,
and the model's top category and probability for the same boot, asked whether or not the rules
named something. The first scores are thus reproduced exactly (the set's `FROZEN.md` figure),
and the model's opinion is known on logs neither it nor the rules had seen.

From those rows it prints what each way of using the model would have done to the first scores:
- **dissent**: where the rules named X and the model's top is Y != X with probability >= t,
  withhold X ("unknown, closest: X") or switch to Y;
- **below threshold**: where the rules named nothing, answer the model's top at >= t.
The shipped `learned.DISSENT_AT` was chosen from the first table (docs/postmortem.md).

Rows are cached per set in `--cache` (default /tmp/postmortem-replay): a set's first score
never changes, so a second run only prints. Needs git (worktrees of this checkout).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.postmortem_fallbacks import FIXTURES, ROOT, frozen_commit, probe
from bench.postmortem_third import verdict_of

NAMED_NOTHING = ("unknown", "no-failure")

# Run inside the worktree (its own `orchestrator`): only names every commit since the model has
# (postmortem_logs, learned.current_model/features, diagnose). The ranks `diagnose` was given
# are caught on their way in, so the model can be asked whether or not the rules named something.
PROBE = r"""
import glob, json, pathlib, sys, tempfile, yaml
import orchestrator.postmortem as pm
from orchestrator.postmortem import learned, postmortem_logs
seen = []
real = pm.diagnose
def spy(run, ranks, sigs):
    seen.append(ranks)
    return real(run, ranks, sigs)
pm.diagnose = spy
try:
    import orchestrator.postmortem.kernel_pasted as kp
    kp.diagnose = spy
except ImportError:
    pass
out = []
for f in sorted(glob.glob(sys.argv[1] + "/*.yaml")):
    case = yaml.safe_load(open(f, encoding="utf-8"))
    path = pathlib.Path(tempfile.mkdtemp()) / "excerpt.log"
    path.write_text(case["excerpt"] + "\n", encoding="utf-8")
    seen.clear()
    d = postmortem_logs([path])
    answer = "no-failure" if getattr(d, "outcome", None) == "no-failure" else str(d.category)
    said = learned.current_model().predict(list(learned.features(seen[-1]))) if seen else None
    out.append({"case": pathlib.Path(f).name, "label": case["label"], "answer": answer,
                "top": said[0] if said else "-", "p": said[1] if said else 0.0})
json.dump(out, sys.stdout)
"""


@dataclass(frozen=True)
class Row:
    case: str
    label: str
    answer: str
    verdict: str  # correct | wrong | unknown (bench/postmortem_third.py's verdict_of)
    model_top: str  # "-" where the old model answered nothing
    model_p: float


def replay(set_name: str, commit: str, cache: Path) -> list[Row] | str:
    """The set's rows with the code of `commit` (cached: a first score never changes)."""
    out = cache / f"{set_name}.json"
    if not out.exists():
        got = probe(set_name, commit, PROBE)
        if isinstance(got, str):
            return got
        out.write_text(json.dumps(got), encoding="utf-8")
    return [
        Row(
            str(r["case"]),
            str(r["label"]),
            str(r["answer"]),
            str(getattr(v := verdict_of(str(r["label"]), str(r["answer"])), "value", v)),
            str(r["top"]),
            float(r["p"]),
        )
        for r in json.loads(out.read_text(encoding="utf-8"))
    ]


def _has_model(commit: str) -> bool:
    where = f"{commit}:orchestrator/postmortem/learned.py"
    return (
        subprocess.run(
            ["git", "-C", str(ROOT), "cat-file", "-e", where], capture_output=True
        ).returncode
        == 0
    )


def _share(n: int, total: int) -> str:
    return f"{n} ({n / total:.1%})"


def dissent_table(rows: list[Row]) -> list[str]:
    total = len(rows)
    right = sum(r.verdict == "correct" for r in rows)
    wrong = sum(r.verdict == "wrong" for r in rows)
    lines = [f"first scores: right {_share(right, total)}, wrong {_share(wrong, total)}"]
    lines.append("dissent (rules named X, the model's top is Y != X at p >= t):")
    named = [r for r in rows if r.answer not in (*NAMED_NOTHING, "ready")]
    for t in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95):
        split = [r for r in named if r.model_top not in ("-", r.answer) and r.model_p >= t]
        held_right = sum(r.verdict == "correct" for r in split)
        held_wrong = len(split) - held_right
        model_right = sum(r.model_top == r.label for r in split)
        lines.append(
            f"  t={t:.2f}: {len(split):3} split; withhold -> right {_share(right - held_right, total)}, "
            f"wrong {_share(wrong - held_wrong, total)}; switch -> right "
            f"{right - held_right + model_right}, wrong {wrong - held_wrong + len(split) - model_right}"
        )
    lines.append("below threshold (rules named nothing; answer the model's top at p >= t):")
    unnamed = [r for r in rows if r.answer in NAMED_NOTHING and r.model_top != "-"]
    for t in (0.9, 0.8, 0.7, 0.5, 0.3):
        took = [r for r in unnamed if r.model_p >= t]
        gained = sum(r.model_top == r.label for r in took)
        lines.append(f"  t={t:.2f}: +{gained} right, +{len(took) - gained} wrong")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=Path("/tmp/postmortem-replay"))
    ap.add_argument("--sets", default="", help="comma-separated set names (default: all frozen)")
    args = ap.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    frozen = sorted(
        p.parent.name.removeprefix("postmortem-") for p in FIXTURES.glob("postmortem-*/FROZEN.md")
    )
    rows: list[Row] = []
    replayed = 0
    for name in [s for s in args.sets.split(",") if s] or frozen:
        commit = frozen_commit(name)
        if commit is None or not _has_model(commit):
            print(
                f"{name:16} left out: {'no commit named' if commit is None else 'no learned model yet'}"
            )
            continue
        got = replay(name, commit, args.cache)
        if isinstance(got, str):
            print(f"{name:16} at {commit}: left out ({got})")
            continue
        right = sum(r.verdict == "correct" for r in got)
        wrong = sum(r.verdict == "wrong" for r in got)
        print(f"{name:16} at {commit}: {right}/{len(got)} right, {wrong} wrong")
        rows += got
        replayed += 1
    if not rows:
        raise SystemExit("error: no set could be replayed")
    print(f"{len(rows)} cases from {replayed} sets replayed")
    print("\n".join(dissent_table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
