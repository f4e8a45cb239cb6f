"""The postmortem on a frozen unseen set of real logs (issue 29): the third set, or any later one.

    PYTHONPATH=<checkout> .venv/bin/python bench/postmortem_third.py [--set NAME] [--cases-dir DIR]

Loads every `cases/*.yaml` of tests/fixtures/postmortem-<NAME>/ (`--set third`, the default,
or any other such folder; the folder's README says what they are and how they were labelled; `bench/
postmortem_fourth.py` is this script with `--set fourth`), diagnoses each excerpt the way `cluster postmortem --logs FILE --json` does
(`postmortem_logs` on the excerpt written to a file) and prints: total, correct, wrong, unknown,
the same per tracker family and per label, and every wrong case (file name, label, answer).

`orchestrator` is imported from `sys.path` as Python finds it, so the set can be scored with
another checkout's code (a pristine worktree at the commit before any rule changed) by putting
that checkout first on PYTHONPATH; the cases are always read from this file's own checkout.
The script prints which `orchestrator` it scored.

`--threshold T` scores with the calibration's withholding threshold replaced by T: a candidate
named before the score (bench/postmortem_threshold.py), judged on the same unseen answers; the
set's figure stays the shipped threshold's.

`--model-threshold T` does the same for the learned model's answering threshold (learned.json),
and `--dissent-at T` for the probability at which the model's other reading of a boot the rules
named withholds their answer (learned.dissent; `--dissent-at 1.1` switches it off).

`--loso` scores the set leave-one-source-out instead: each case diagnosed without the rules
written from its own tracker family alone (a signature whose `provenance` is that family only,
an exception family whose provenance in calibration.json is), as bench/postmortem_corpus.py
does for the corpus; the shipped calibration and model are kept (they were fitted on the
corpus's train split, which holds no case of these sets). Rules not yet given a provenance
(files outside PROVENANCE_FILES, e.g. the node-kernel and gpu signatures) are never switched off.

Scoring (an answer is the category, or `no-failure` where the diagnosis says nothing failed):
- a `ready` answer on a case not labelled `ready` is always wrong;
- label `no-failure` (nothing failed, no ready marker): right for `unknown` or `no-failure`;
- label `unknown` (a failure whose cause the excerpt does not show): right only for `unknown`;
- any other label: right for that category; `unknown` / `no-failure` are counted as unknown
  (not named), any other category as wrong.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import date
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
# every frozen set: a folder of cases beside the corpus (no list to keep up as sets are added)
SETS = tuple(
    sorted(
        p.parent.name.removeprefix("postmortem-")
        for p in FIXTURES.glob("postmortem-*/cases")
        if p.parent.name != "postmortem-corpus"
    )
)
CASES_DIR = FIXTURES / "postmortem-third" / "cases"

# The sets' own vocabulary, frozen with them (not the postmortem's, which has grown since): the
# bench must score the same labels against the release a set was frozen on and against today's.
# The fourth set added `gpu-fault` and `disk` (the node-kernel categories); the third uses neither.
Label = Literal[
    "image-unpack-race",
    "load-barrier-timeout",
    "rendezvous-network",
    "kv-cache-budget",
    "unsupported-arch-kernel",
    "config-validator-refusal",
    "moe-runner",
    "out-of-memory",
    "watchdog-timeout",
    "tokenizer-config",
    "weights-files",
    "gpu-fault",
    "disk",
    "ready",
    "unknown",
    "no-failure",
]
LABEL_ORDER: tuple[str, ...] = get_args(Label)
FAILURE_LABELS = LABEL_ORDER[:-3]
Family = Literal["vllm", "sglang", "torch-nccl", "containerd-moby", "hf", "kernels", "other"]
FAMILY_ORDER = ("vllm", "sglang", "torch-nccl", "containerd-moby", "hf", "kernels", "other")
NOT_NAMED = ("unknown", "no-failure")


# How a case is dated; the corpus's cases (tests/postmortem_corpus.py) use the same words.
# issue-number: neither the post's date nor a log stamp was shown; the date of the thread's
# neighbours by number (fourth set); file: a log quoted in a repository's file, dated by the
# file's commit or the release it documents (fiftieth set)
DateBasis = Literal["post", "log-stamp", "issue-number", "file"]


class ThirdCase(BaseModel):
    """One excerpt of the third set: the corpus's keys plus `family` and the `no-failure` label."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="the file's name (not a key of the file)")
    source: str = Field(pattern=r"^https?://")  # a mirror may serve http only (30th, h-0002)
    date: date
    date_basis: DateBasis = "post"
    project: str
    engine: Literal["sglang", "vllm", "torch", "nccl", "containerd", "other"]
    label: Label
    why: str = Field(min_length=1)
    family: Family
    excerpt: str = Field(min_length=1)


def load_cases(folder: Path) -> list[ThirdCase]:
    cases = []
    for path in sorted(folder.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: expected a mapping of the case keys")
        cases.append(ThirdCase.model_validate({"name": path.name, **raw}))
    return cases


def answer_of(excerpt: str, folder: Path, family: str | None = None) -> str:
    """What `cluster postmortem --logs FILE --json` says: the category, or `no-failure`; with
    `family`, what it says without the rules written from that tracker family alone."""
    from orchestrator.postmortem import postmortem_logs

    path = folder / "excerpt.log"  # no rank word in the name: the file is rank 0
    path.write_text(excerpt if excerpt.endswith("\n") else excerpt + "\n", encoding="utf-8")
    if family is None:
        diagnosis = postmortem_logs([path])
    else:
        from orchestrator.postmortem.families import without_families

        kept, off_fams = _without_family(family)
        with without_families(off_fams):
            diagnosis = postmortem_logs([path], kept)
    # `outcome` exists only in checkouts that have the no-failure outcome (issue 29)
    if getattr(diagnosis, "outcome", None) == "no-failure":
        return "no-failure"
    return str(diagnosis.category)


def _rules_of_only(family: str) -> tuple[frozenset[str], frozenset[int]]:
    """The signatures and exception families written from `family` alone (their provenance)."""
    from orchestrator.postmortem.calibration import load_calibration
    from orchestrator.postmortem.signatures import load_signatures

    sigs = frozenset(
        c.id for c in load_signatures() if c.sig.provenance and set(c.sig.provenance) <= {family}
    )
    fams = frozenset(
        int(k) for k, v in load_calibration().families.items() if v and set(v) <= {family}
    )
    return sigs, fams


@cache  # one set per family, kept alive: the scan caches its prefilter per SignatureSet object
def _without_family(family: str) -> tuple[Any, frozenset[int]]:
    from orchestrator.postmortem.signatures import SignatureSet, load_signatures

    off_sigs, off_fams = _rules_of_only(family)
    return SignatureSet([c for c in load_signatures() if c.id not in off_sigs]), off_fams


Verdict = Literal["correct", "wrong", "unknown"]


def verdict_of(label: str, answer: str) -> Verdict:
    if answer == "ready" and label != "ready":
        return "wrong"
    if label == "no-failure":
        return "correct" if answer in NOT_NAMED else "wrong"
    if label == "unknown":
        return "correct" if answer == "unknown" else ("unknown" if answer in NOT_NAMED else "wrong")
    if answer == label:
        return "correct"
    return "unknown" if answer in NOT_NAMED else "wrong"


@dataclass(frozen=True)
class Scored:
    case: ThirdCase
    answer: str

    @property
    def verdict(self) -> Verdict:
        return verdict_of(self.case.label, self.answer)


def tally(rows: list[Scored]) -> str:
    n = Counter(r.verdict for r in rows)
    total = len(rows)
    share = 100 * n["correct"] / total if total else 0.0
    return (
        f"{n['correct']:>3}/{total:<3} correct ({share:5.1f}%), "
        f"wrong {n['wrong']:>2}, unknown {n['unknown']:>2}"
    )


def _replace_threshold(threshold: float) -> None:
    """Diagnose with the shipped calibration but another withholding threshold. The bench's
    only reach into the postmortem's internals: `diagnose` reads the calibration through
    `load_calibration`, which is swapped for one returning the copy."""
    from dataclasses import replace

    from orchestrator.postmortem import diagnose
    from orchestrator.postmortem.calibration import load_calibration

    candidate = replace(load_calibration(), threshold=threshold)
    diagnose.load_calibration = lambda *_, **__: candidate  # type: ignore[assignment]
    print(f"threshold replaced: {threshold} (shipped: {load_calibration().threshold})")


def _with_model(threshold: float | None, dissent_at: float | None) -> AbstractContextManager[None]:
    """Diagnose with the shipped learned model but another answering threshold, or another
    probability at which its dissent withholds the rules' answer (candidates named before the
    score, as `--threshold` is for the calibration's)."""
    from dataclasses import replace

    from orchestrator.postmortem.learned import current_model, using_model

    shipped = current_model()
    if threshold is None and dissent_at is None:
        return nullcontext()
    if threshold is not None:
        print(f"model threshold replaced: {threshold} (shipped: {shipped.threshold})")
    if dissent_at is not None:
        print(f"model dissent replaced: {dissent_at} (shipped: {shipped.dissent_at})")
    return using_model(
        replace(
            shipped,
            threshold=shipped.threshold if threshold is None else threshold,
            dissent_at=shipped.dissent_at if dissent_at is None else dissent_at,
        )
    )


def main(default_set: str = "third") -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", choices=SETS, default=default_set)
    parser.add_argument("--cases-dir", type=Path, default=None)
    parser.add_argument(
        "--loso", action="store_true", help="leave-one-source-out: without each family's rules"
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="score with the calibration's withholding threshold replaced by this one (a "
        "candidate named before the score; the shipped threshold's score is the set's figure)",
    )
    parser.add_argument(
        "--model-threshold",
        type=float,
        default=None,
        help="score with the learned model's answering threshold replaced by this one (a "
        "candidate named before the score)",
    )
    parser.add_argument(
        "--dissent-at",
        type=float,
        default=None,
        help="score with the probability at which the model's other reading withholds the "
        "rules' answer replaced by this one (a candidate named before the score; above 1: off)",
    )
    args = parser.parse_args()
    if args.threshold is not None:
        _replace_threshold(args.threshold)
    if args.cases_dir is None:
        args.cases_dir = FIXTURES / f"postmortem-{args.set}" / "cases"
    cases = load_cases(args.cases_dir)
    if not cases:
        print(f"{args.cases_dir}: no cases (*.yaml)", file=sys.stderr)
        return 2
    import orchestrator

    print(f"cases: {args.cases_dir} ({len(cases)})")
    print(f"orchestrator scored: {Path(orchestrator.__file__).resolve().parent}")
    began = time.perf_counter()
    model = _with_model(args.model_threshold, args.dissent_at)
    with model, tempfile.TemporaryDirectory(prefix="pm-third-") as tmp:
        rows = [
            Scored(c, answer_of(c.excerpt, Path(tmp), c.family if args.loso else None))
            for c in cases
        ]
    if args.loso:
        print("leave-one-source-out: each family without the rules written from it alone")
        for fam in FAMILY_ORDER:
            if any(c.family == fam for c in cases):
                off_sigs, off_fams = _rules_of_only(fam)
                print(
                    f"  {fam}: {len(off_sigs)} signatures, {len(off_fams)} exception families off"
                )
    took = time.perf_counter() - began
    counts = Counter(r.verdict for r in rows)
    print(f"total: {len(rows)}")
    print(f"correct: {counts['correct']}")
    print(f"wrong: {counts['wrong']}")
    print(f"unknown: {counts['unknown']}")
    print(f"accuracy: {100 * counts['correct'] / len(rows):.1f}%")
    ready_wrong = sum(r.answer == "ready" and r.case.label != "ready" for r in rows)
    print(f"non-ready called ready: {ready_wrong}")
    print("per family:")
    for fam in FAMILY_ORDER:
        of = [r for r in rows if r.case.family == fam]
        if of:
            print(f"  {fam:<16} {tally(of)}")
    print("per label:")
    for label in LABEL_ORDER:
        of = [r for r in rows if r.case.label == label]
        if of:
            print(f"  {label:<26} {tally(of)}")
    by_half = Counter(r.case.name[:2] for r in rows)
    print("per half: " + ", ".join(f"{k} {v}" for k, v in sorted(by_half.items())))
    print("wrong cases (file: label -> answer):")
    for r in rows:
        if r.verdict == "wrong":
            print(f"  {r.case.name}: {r.case.label} -> {r.answer}")
    print("unknown cases (file: label -> answer):")
    for r in rows:
        if r.verdict == "unknown":
            print(f"  {r.case.name}: {r.case.label} -> {r.answer}")
    print(f"{took / len(rows) * 1000:.1f} ms per case")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
