"""The second opinion: a small linear model, asked when the rules name no cause, and as a check.

When no signature, exception family or boot shape names a category, the words are often still
telling. This model scores each category by summing learned weights over binary features of
what the scan already holds (nothing is read again, so it costs nothing on a big log):

    sig=ID      a signature that fired (a symptom, a cascade: a cause would have decided)
    cls=NAME    the class of an exception a rank raised
    w=word      a word of an exception line
    l=word      a word of a rank's last line
    f=word      a word of a line that states a failure in words (stated.py)
    phase=P     the furthest phase a rank reached
    mark=M      a milestone a rank reached (dist_init: its distributed init completed)

and answers the best category when its probability (softmax) reaches the threshold that kept
the wrong answers at or under the target on the train split's leave-one-source-out (each
tracker family scored by a model trained without it). It never answers `ready` (that needs the
engine's marker) nor `unknown`. Weights, vocabulary and threshold are data (`learned.json`),
trained from the corpus's train split by one command:

    .venv/bin/python bench/postmortem_corpus.py --calibrate

Where the rules did name a category, the model is asked too (`dissent`): if it puts another
category first with probability `DISSENT_AT` or more, the evidence is split and the rules'
answer is withheld as the closest guess, both readings shown.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from orchestrator.postmortem.families import exception_of
from orchestrator.postmortem.model import Evidence, RankFacts

MODEL_FILE = Path(__file__).resolve().parent / "learned.json"
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
NEVER = ("ready", "unknown")  # categories the model may learn but never answers
# The model's probability at which its other reading withholds the rules' answer (`dissent`).
# Chosen on the first scores of the unseen sets, each replayed with the code and model that
# scored it (bench/postmortem_replay.py; the table is in docs/postmortem.md), not on the corpus:
# there the model learned the rules' own answers and hardly ever disagrees.
DISSENT_AT = 0.8
# A rules' category that is a narrower case of the model's reading does not contradict it: a KV
# cache with no room after the weights is a memory shortage named more precisely.
REFINES = {"kv-cache-budget": "out-of-memory"}


@dataclass(frozen=True)
class LinearModel:
    categories: tuple[str, ...] = ()
    bias: tuple[float, ...] = ()
    weights: Mapping[str, Sequence[float]] = field(default_factory=dict)  # feature -> per category
    threshold: float = 1.1  # above any probability: a model never trained answers nothing
    basis: str = ""
    dissent_at: float = DISSENT_AT  # see `dissent`; the bench's --dissent-at replaces it

    def scores(self, feats: Sequence[str]) -> list[float]:
        z = list(self.bias)
        for f in set(feats):
            w = self.weights.get(f)
            if w is not None:
                z = [a + b for a, b in zip(z, w, strict=True)]
        return z

    def predict(self, feats: Sequence[str]) -> tuple[str, float] | None:
        """The best answerable category and its probability, or None (no model, nothing)."""
        if not self.categories:
            return None
        z = self.scores(feats)
        top = max(z)
        exp = [math.exp(v - top) for v in z]
        total = sum(exp)
        best = max(
            (i for i, c in enumerate(self.categories) if c not in NEVER),
            key=lambda i: z[i],
            default=None,
        )
        if best is None:
            return None
        return self.categories[best], exp[best] / total

    def as_json(self) -> dict[str, object]:
        return {
            "basis": self.basis,
            "threshold": self.threshold,
            "dissent_at": self.dissent_at,
            "categories": list(self.categories),
            "bias": [round(b, 4) for b in self.bias],
            "weights": {f: [round(x, 4) for x in w] for f, w in sorted(self.weights.items())},
        }


def from_json(raw: dict[str, object]) -> LinearModel:
    cats = raw.get("categories")
    bias = raw.get("bias")
    weights = raw.get("weights")
    threshold = raw.get("threshold")
    dissent_at = raw.get("dissent_at")
    if not (isinstance(cats, list) and isinstance(bias, list) and isinstance(weights, dict)):
        return LinearModel()
    return LinearModel(
        categories=tuple(str(c) for c in cats),
        bias=tuple(float(b) for b in bias),
        # as json.loads gave them: converting ~20,000 rows at start-up cost 0.05 s on a slow
        # machine, on every `cluster postmortem`, for the few rows a log's features look up
        weights=weights,
        threshold=float(threshold) if isinstance(threshold, (int, float)) else 1.1,
        basis=str(raw.get("basis", "")),
        dissent_at=float(dissent_at) if isinstance(dissent_at, (int, float)) else DISSENT_AT,
    )


_OVERRIDE: list[LinearModel] = []


@contextmanager
def using_model(model: LinearModel) -> Iterator[None]:
    """Within the block, diagnose asks `model` (the leave-one-source-out bench). Not for product."""
    _OVERRIDE.append(model)
    try:
        yield
    finally:
        _OVERRIDE.pop()


def current_model() -> LinearModel:
    return _OVERRIDE[-1] if _OVERRIDE else _shipped_model()


@cache
def _shipped_model() -> LinearModel:
    try:
        raw = json.loads(MODEL_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return LinearModel()
    return from_json(raw) if isinstance(raw, dict) else LinearModel()


def features(ranks: Sequence[RankFacts]) -> dict[str, list[Evidence]]:
    """Every feature of the boot, with the lines it came from (for `named_by`)."""
    out: dict[str, list[Evidence]] = {}

    def add(f: str, ev: Evidence | None) -> None:
        lines = out.setdefault(f, [])
        if ev is not None and ev not in lines:
            lines.append(ev)

    for r in ranks:
        add(f"phase={r.phase}", None)
        for name in r.markers:  # the milestones reached (an init that completed is no hang)
            add(f"mark={name}", None)
        for h in r.hits:
            add(f"sig={h.signature}", h.evidence if h.via == "log" else None)
        for ev in r.exceptions:
            raised = exception_of(ev.text)
            if raised is not None:
                add(f"cls={raised.name}", ev)
            for word in _WORD.findall(ev.text):
                add(f"w={word.lower()}", ev)
        for ev in r.stated:
            for word in _WORD.findall(ev.text):
                add(f"f={word.lower()}", ev)
        if r.last_line is not None:
            for word in _WORD.findall(r.last_line.text):
                add(f"l={word.lower()}", r.last_line)
    return out


@dataclass(frozen=True)
class Opinion:
    category: str
    probability: float
    lines: tuple[Evidence, ...]  # the lines whose features pulled most towards it


def opinion(ranks: Sequence[RankFacts], model: LinearModel | None = None) -> Opinion | None:
    """The model's answer when it clears its threshold, else None."""
    model = model or current_model()
    if not model.categories:
        return None
    feats = features(ranks)
    said = model.predict(list(feats))
    if said is None or said[1] < model.threshold:
        return None
    return _explained(model, feats, *said)


def dissent(
    ranks: Sequence[RankFacts], named: str, model: LinearModel | None = None
) -> Opinion | None:
    """The model's other reading of a boot the rules named `named`, when it is sure of it.

    The same words read two ways (an expert-weight `KeyError`: a checkpoint's fault or the MoE
    backend's; an NCCL `unhandled system error`: the fabric or a symptom) are where the rules
    were wrong most often on logs they had never seen. When the model, reading the whole boot,
    puts another category first at `dissent_at` (DISSENT_AT) or above, the evidence is split
    and the answer is withheld ("unknown, closest: `named`"), with both readings shown.
    """
    model = model or current_model()
    if not model.categories:
        return None
    feats = features(ranks)
    said = model.predict(list(feats))
    if said is None or said[0] in (named, REFINES.get(named)) or said[1] < model.dissent_at:
        return None
    return _explained(model, feats, *said)


def _explained(
    model: LinearModel, feats: Mapping[str, list[Evidence]], category: str, p: float
) -> Opinion:
    """The opinion with the (at most two) lines whose features pulled most towards it."""
    k = model.categories.index(category)
    pulls: dict[tuple[str, int], float] = {}
    by_key: dict[tuple[str, int], Evidence] = {}
    for f, lines in feats.items():
        w = model.weights.get(f)
        if w is None or w[k] <= 0:
            continue
        for ev in lines:
            key = (ev.file, ev.line)
            by_key[key] = ev
            pulls[key] = pulls.get(key, 0.0) + w[k]
    best = sorted(sorted(pulls, key=lambda key: -pulls[key])[:2])
    return Opinion(category, p, tuple(by_key[key] for key in best))
