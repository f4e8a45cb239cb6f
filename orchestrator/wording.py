"""Words every report uses: rank ranges, clock times, plurals, short quotes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime


def rank_list(ranks: Iterable[int]) -> str:
    """0, 1, 2, 4 -> '0-2, 4'."""
    values = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        parts.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ", ".join(parts)


def ranks_text(ranks: Iterable[int]) -> str:
    """[3] -> 'rank 3'; [0..7] -> 'ranks 0-7'."""
    values = sorted(set(ranks))
    return f"{'rank' if len(values) == 1 else 'ranks'} {rank_list(values)}"


def waves_text(waves: Sequence[Sequence[int]]) -> str:
    """How ranks start: 'one wave: ranks 0-7'; '2 waves: rank 0, then ranks 1-7'."""
    if len(waves) == 1:
        return f"one wave: {ranks_text(waves[0])}"
    return f"{len(waves)} waves: " + ", then ".join(ranks_text(w) for w in waves)


def clock(ts: float | None) -> str:
    if ts is None:
        return "an unknown time"
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S UTC")


def plural(n: int, word: str) -> str:
    """1 rank, 2 ranks; 2 processes."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}{'es' if word.endswith(('s', 'sh', 'ch', 'x')) else 's'}"


def first_sentence(text: str) -> str:
    text = " ".join(text.split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
