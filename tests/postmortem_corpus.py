"""The real-log corpus (`tests/fixtures/postmortem-corpus/cases/*.yaml`), loaded and scored.

Test support, not product code: the unit test and `bench/postmortem_corpus.py` both score the
postmortem through here. Each case is one excerpt a user pasted into a public tracker, with
the category its boot failure belongs to (the folder's README says how it was labelled).

The split is by date: cases before `CUTOFF` are **train**, the only ones signature writers may
read; the rest are **held-out** and are only ever scored in aggregate (no case text, file
name or line of a held-out case is printed by anything here).

A case is diagnosed the way a user would: its excerpt written to a file and given to
`postmortem_logs`, the function `cluster postmortem --logs FILE --json` calls.
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.postmortem import postmortem_logs
from orchestrator.postmortem.signatures import CATEGORIES, Category

CORPUS_DIR = Path(__file__).resolve().parent / "fixtures" / "postmortem-corpus"
CASES_DIR = CORPUS_DIR / "cases"
_CUTOFF_IN_README = re.compile(r"Cutoff \*\*(\d{4}-\d\d-\d\d)\*\*")

Split = Literal["train", "held-out"]


class Case(BaseModel):
    """One excerpt and its label (the README's keys)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="the file's stem (not a key of the file)")
    source: str = Field(pattern=r"^https://")
    date: date
    date_basis: Literal["post", "log-stamp"] = "post"
    project: str
    engine: str
    label: Category
    why: str
    excerpt: str = Field(min_length=1)


def cutoff() -> date:
    """The split date, as the corpus README names it (the one place it is written)."""
    m = _CUTOFF_IN_README.search((CORPUS_DIR / "README.md").read_text(encoding="utf-8"))
    if m is None:
        raise ValueError(f"{CORPUS_DIR / 'README.md'}: no 'Cutoff **YYYY-MM-DD**' line")
    return date.fromisoformat(m.group(1))


def split_of(case: Case, split_date: date) -> Split:
    return "train" if case.date < split_date else "held-out"


@cache
def load_cases() -> tuple[Case, ...]:
    cases = []
    for path in sorted(CASES_DIR.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: expected a mapping")
        cases.append(Case.model_validate({"name": path.stem, **raw}))
    return tuple(cases)


def cases_of(split: Split) -> list[Case]:
    split_date = cutoff()
    return [c for c in load_cases() if split_of(c, split_date) == split]


def diagnose_excerpt(excerpt: str, folder: Path) -> str:
    """The category `cluster postmortem --logs FILE` gives this excerpt."""
    path = folder / "excerpt.log"  # no rank word in the name: the file is rank 0
    path.write_text(excerpt if excerpt.endswith("\n") else excerpt + "\n", encoding="utf-8")
    return postmortem_logs([path]).category


@dataclass(frozen=True)
class Outcome:
    case: Case
    got: str

    @property
    def right(self) -> bool:
        return self.got == self.case.label

    @property
    def failure_called_ready(self) -> bool:
        return self.got == "ready" and self.case.label != "ready"


@dataclass
class Score:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.outcomes)

    @property
    def right(self) -> int:
        return sum(o.right for o in self.outcomes)

    @property
    def accuracy(self) -> float:
        return self.right / self.total if self.total else 0.0

    def per_label(self) -> dict[str, tuple[int, int]]:
        """label -> (right, total), in the categories' order."""
        totals = Counter(o.case.label for o in self.outcomes)
        rights = Counter(o.case.label for o in self.outcomes if o.right)
        return {c: (rights[c], totals[c]) for c in CATEGORIES if totals[c]}

    def confusions(self) -> Counter[tuple[str, str]]:
        """(expected, got) -> count, for the wrong ones."""
        return Counter((o.case.label, o.got) for o in self.outcomes if not o.right)

    @property
    def failures_called_ready(self) -> int:
        return sum(o.failure_called_ready for o in self.outcomes)


def score(cases: Iterable[Case]) -> Score:
    result = Score()
    with tempfile.TemporaryDirectory(prefix="pm-corpus-") as tmp:
        folder = Path(tmp)
        for case in cases:
            result.outcomes.append(Outcome(case, diagnose_excerpt(case.excerpt, folder)))
    return result


def summary_lines(name: str, s: Score, *, show_cases: bool) -> list[str]:
    """A split's score as text; case names only when `show_cases` (train)."""
    lines = [
        f"{name}: {s.right}/{s.total} right ({100 * s.accuracy:.1f}%), "
        f"failures called ready: {s.failures_called_ready}"
    ]
    for label, (right, total) in s.per_label().items():
        lines.append(f"  {label:<26} {right:>3}/{total:<3}")
    for (expected, got), n in sorted(s.confusions().items(), key=lambda kv: -kv[1]):
        lines.append(f"  missed: {expected} -> {got} x{n}")
    if show_cases:
        for o in s.outcomes:
            if not o.right:
                lines.append(f"    {o.case.name}: {o.case.label} -> {o.got}")
    return lines


def all_names(cases: Sequence[Case]) -> list[str]:
    return [c.name for c in cases]
