"""Two fallbacks for the postmortem's `unknown` answers, measured on the frozen unseen sets with
the method each set was scored with (issue 29): would they have named more causes, and how
many wrongly?

    PYTHONPATH=. .venv/bin/python bench/postmortem_fallbacks.py [--sets ninth,tenth,...]

For every set with a `FROZEN.md` naming the commit it was scored with ("the code of commit
**abc1234**"), a detached git worktree of that commit diagnoses each case (`postmortem_logs`, as
`cluster postmortem --logs FILE` does) and, where the answer is `unknown`, records:
- the keywords of that commit's signatures found on the excerpt's lines (a rule's wording
  nearly met: its literal keyword present, its regex not matched), with the rule's category;
- the learned model's category and probability (learned.py), whatever its threshold.

Then, per fallback policy, how many of those `unknown` answers it would have turned into the
label (right) or into another category (wrong; any category on a case labelled `unknown` or
`no-failure` is wrong). The figures are unseen in the sense the frozen scores are: each set
is judged with the rules and model of the commit that scored it, before it was mined. The
policies themselves were written after those sets were read (they are training material now);
a later unseen set is their blind test.

Needs git and the repository's history (a full clone); takes about a minute per ten sets.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import get_args

from orchestrator.postmortem.signatures import Category

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
FROZEN_COMMIT = re.compile(r"code of commit \*\*([0-9a-f]{7,40})\*\*")
# the failure categories (a fallback names one of these; never `ready` or `unknown`)
CATEGORIES = frozenset(get_args(Category)) - {"ready", "unknown"}
# words of a line that reports a failure (the keyword fallback's second condition)
FAILING = re.compile(
    r"(?i)error|fail|fatal|exception|unable|cannot|could not|timed out|timeout|abort|killed|"
    r"refus|not supported|invalid"
)

# Run inside the worktree (its own `orchestrator`): only APIs every scored commit has.
PROBE = r"""
import glob, json, pathlib, sys, tempfile, yaml
from orchestrator.postmortem import postmortem_logs
from orchestrator.postmortem.collect import collect_logs
from orchestrator.postmortem.signatures import load_signatures
try:
    from orchestrator.postmortem import learned  # from the eleventh set's method on
    model = learned.current_model()
except ImportError:
    learned = model = None
sigs = load_signatures()
keywords = []
for compiled in sigs:
    sig = getattr(compiled, "sig", compiled)
    for pattern in sig.patterns:
        kws = pattern.keyword if isinstance(pattern.keyword, (tuple, list)) else (pattern.keyword,)
        for kw in kws:
            keywords.append((kw, sig.category, str(getattr(sig, "role", "")),
                             bool(getattr(sig, "weak", False))))
out = []
for f in sorted(glob.glob(sys.argv[1] + "/*.yaml")):
    case = yaml.safe_load(open(f, encoding="utf-8"))
    path = pathlib.Path(tempfile.mkdtemp()) / "excerpt.log"
    path.write_text(case["excerpt"] + "\n", encoding="utf-8")
    answer = postmortem_logs([path]).category
    near, said = [], None
    if answer == "unknown":
        for line in case["excerpt"].splitlines():
            near += [[kw, cat, role, weak, line[:400]] for kw, cat, role, weak in keywords
                     if kw in line]
        if model is not None:
            ranks = list(collect_logs([path], sigs).ranks)
            said = model.predict(list(learned.features(ranks)))
    out.append({"label": case["label"], "answer": answer, "near": near, "said": said})
json.dump(out, sys.stdout)
"""


def frozen_commit(name: str) -> str | None:
    frozen = FIXTURES / f"postmortem-{name}" / "FROZEN.md"
    if not frozen.exists():
        return None
    m = FROZEN_COMMIT.search(frozen.read_text(encoding="utf-8"))
    return m.group(1) if m else None


def probe(name: str, commit: str, script: str = PROBE) -> list[dict[str, object]] | str:
    """Each case's answer and fallback evidence, with the code of `commit` (or why not):
    `script` run in a worktree of that commit, the set's cases folder its argument."""
    cases = FIXTURES / f"postmortem-{name}" / "cases"
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        git = ["git", "-C", str(ROOT)]
        subprocess.run([*git, "worktree", "add", "--detach", "-q", str(tree), commit], check=True)
        try:
            env = {**os.environ, "PYTHONPATH": str(tree)}
            done = subprocess.run(
                [sys.executable, "-c", script, str(cases)],
                cwd=tree,
                env=env,
                capture_output=True,
                text=True,
            )
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=True)
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return f"the probe failed with that commit's code: {last[0]}"
    rows: list[dict[str, object]] = json.loads(done.stdout)
    return rows


Policy = Callable[[dict[str, object]], str | None]


def keyword_policy(min_len: int) -> Policy:
    """A rule's keyword on a failing line, one category among all such hits."""

    def name(row: dict[str, object]) -> str | None:
        cats = {
            cat
            for kw, cat, role, weak, line in row["near"]  # type: ignore[attr-defined]
            if cat in CATEGORIES
            and role != "symptom"
            and len(kw) >= min_len
            and FAILING.search(line)
        }
        return cats.pop() if len(cats) == 1 else None

    return name


def model_policy(threshold: float) -> Policy:
    def name(row: dict[str, object]) -> str | None:
        said = row["said"]
        if not isinstance(said, list):
            return None
        category, p = str(said[0]), float(said[1])
        return category if p >= threshold else None

    return name


POLICIES: dict[str, Policy] = {
    **{f"keyword >= {n} chars on a failing line": keyword_policy(n) for n in (4, 12, 20)},
    **{f"model at p >= {t}": model_policy(t) for t in (0.5, 0.7, 0.9)},
}


def main() -> int:
    from bench.postmortem_third import SETS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="", help="comma-separated set names (default: all)")
    args = parser.parse_args()
    names = [s for s in args.sets.split(",") if s] or list(SETS)
    tally = {p: Counter[str]() for p in POLICIES}
    cases = 0
    for name in names:
        commit = frozen_commit(name)
        if commit is None:
            print(f"{name}: no frozen commit, skipped")
            continue
        rows = probe(name, commit)
        if isinstance(rows, str):
            print(f"{name}: skipped, {rows}")
            continue
        cases += len(rows)
        line = []
        for pname, policy in POLICIES.items():
            got = Counter[str]()
            for row in rows:
                if row["answer"] != "unknown" or (said := policy(row)) is None:
                    continue
                got["right" if said == row["label"] else "wrong"] += 1
            tally[pname].update(got)
            line.append(f"+{got['right']}/-{got['wrong']}")
        print(f"{name:>14} ({commit}, {len(rows)} cases): " + "  ".join(line))
    print(
        f"\nall {cases} cases, each set with the method that scored it (right added / wrong added):"
    )
    for pname, got in tally.items():
        print(f"  {pname:<40} right +{got['right']:3d}   wrong +{got['wrong']:3d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
