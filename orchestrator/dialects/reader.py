"""All dialect tables as one: what a line marks, for the supervisor and the postmortem alike.

Lines arrive already split on both \\r and \\n (tqdm joins its updates with \\r).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.dialects import common, sglang, vllm
from orchestrator.dialects.base import Marker, Milestone

__all__ = [
    "MARKERS",
    "PHASE_MARKERS",
    "Marker",
    "Milestone",
    "Progress",
    "marked_lines",
    "may_mark",
    "parse_line",
]

_ORDER = {m: i for i, m in enumerate(Milestone)}

MARKERS: tuple[Marker, ...] = tuple(
    sorted((*sglang.MARKERS, *common.MARKERS, *vllm.MARKERS), key=lambda m: _ORDER[m.milestone])
)
"""Every row of every dialect, in milestone order; within one, the row that means it most
first: SGLang's `fired up` (after its warm-up, which follows uvicorn's `startup complete`),
then uvicorn's `startup complete` (vLLM's readiness, a second after `Starting vLLM server`)."""

PHASE_MARKERS: tuple[Marker, ...] = tuple(m for m in MARKERS if m.phase is not None)
"""The rows that prove a boot phase (the postmortem's milestones)."""

# The supervisor folds a live rank's lines: it watches for what moves a phase, a barrier
# failure or an error, not for serving traffic (which would send every batch of a serving
# rank's chatter down the per-line path).
_WATCHED = tuple(m for m in MARKERS if m.milestone is not Milestone.traffic)


@dataclass(frozen=True)
class Progress:
    milestone: Milestone
    done: int | None = None  # shards done
    total: int | None = None  # shards total
    detail: str = ""


def keyword_pattern(words: Iterable[str]) -> str:
    """One regex for any of `words`, as a trie: `Init (?:torch distributed (?:begin|ends)|...)`.

    Python's `re` tries every branch of a flat alternation at every position of the text; the
    trie tries one branch per first character and leaves it at the first character that
    differs. Over a batch of chatter with no keyword in it (the common case) that halves the
    scan of 39 keywords (issue 31)."""
    branches: dict[str, list[str]] = {}
    ends = False
    for word in dict.fromkeys(words):
        if word:
            branches.setdefault(word[0], []).append(word[1:])
        else:
            ends = True
    alts = [re.escape(c) + keyword_pattern(rest) for c, rest in sorted(branches.items())]
    if not alts:
        return ""
    if len(alts) == 1 and not ends:
        return alts[0]
    return "(?:" + "|".join(alts) + ")" + ("?" if ends else "")


# The characters most frequent in log text, most frequent first.
_COMMON = " etaoinsrhdlcum0123456789.,:-/[]"


def anchor(keyword: str) -> str:
    """The part of `keyword` the prefilter looks for: from its rarest character on, at least 4
    characters (`kpoint shards` for `checkpoint shards`). A line holding the keyword holds its
    anchor; `re` tests a position further only when its character can start an anchor, so
    anchors that start with rare characters let it pass over most of ordinary chatter."""
    if len(keyword) <= 4:
        return keyword

    def weight(i: int) -> int:
        c = keyword[i]
        return len(_COMMON) - _COMMON.index(c) if c in _COMMON else 0

    return keyword[min(range(len(keyword) - 3), key=lambda i: (weight(i), i)) :]


# One pass that rejects ordinary chatter before any milestone pattern runs: the supervisor
# parses thousands of lines a second per rank, and almost none of them mark anything. It may
# let through a line that holds an anchor but no keyword: `parse_line` decides.
_ANY = re.compile(keyword_pattern(anchor(m.keyword) for m in _WATCHED))


def may_mark(text: str) -> bool:
    """Whether any line of `text` (one line or a \\n-joined batch) can mark a milestone: one
    regex pass lets a batch of ordinary chatter skip the per-line parse."""
    return _ANY.search(text) is not None


def marked_lines(text: str) -> list[str]:
    """The lines of a \\n-joined batch that can mark a milestone, each once, in order.

    One regex pass over the batch finds them. A loading rank's shard bar comes every few dozen
    lines of chatter, so "some line of the batch may mark" held for most batches and sent every
    one of their lines through `parse_line`: the supervisor's largest per-line cost (issue 31).
    """
    out: list[str] = []
    end = -1
    for m in _ANY.finditer(text):
        if m.start() < end:
            continue  # a second keyword on a line already taken
        start = text.rfind("\n", 0, m.start()) + 1
        end = text.find("\n", m.end())
        if end < 0:
            end = len(text)
        out.append(text[start:end])
    return out


def parse_line(text: str) -> Progress | None:
    """The milestone a line marks (the earliest in boot order), or None for ordinary chatter."""
    if not _ANY.search(text):
        return None
    for row in _WATCHED:
        m = row.says(text)
        if m is None:
            continue
        if row.milestone is Milestone.shards:
            return Progress(Milestone.shards, done=int(m.group(2)), total=int(m.group(3)))
        return Progress(row.milestone, detail=text.strip()[:200])
    return None
