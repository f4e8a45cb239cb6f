"""The prompts of a sweep: deterministic from the seed, so two runs are asked the same thing.

A request at depth d is `d` words of context, the same for every request at that depth (an
earlier conversation; an engine with prefix caching, as both seed-002 lanes run, keeps it and
prefills only the fresh part, which is what `pp2048 @ d4096` measures), then `pp` words of its
own. Words come from a list of short common English words, most of them one token in the
Mistral and Llama tokenizers; the server's own count (usage.prompt_tokens) is reported beside.
"""

from __future__ import annotations

import random

_WORDS: tuple[str, ...] = (
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "are", "with", "as", "at", "be",
    "this", "have", "from", "or", "by", "one", "had", "not", "but", "what", "all", "were",
    "when", "we", "there", "can", "an", "your", "which", "their", "said", "if", "do", "will",
    "each", "about", "how", "up", "out", "them", "then", "she", "many", "some", "so", "these",
    "would", "other", "into", "has", "more", "her", "two", "like", "him", "see", "time",
    "could", "no", "make", "than", "first", "been", "its", "who", "now", "people", "my", "made",
    "over", "did", "down", "only", "way", "find", "use", "may", "water", "long", "little",
    "very", "after", "words", "called", "just", "where", "most", "know", "get", "through",
    "back", "much", "before", "go", "good", "new", "write", "our", "used", "me", "man", "too",
    "any", "day", "same", "right", "look", "think", "also", "around", "another", "came", "come",
    "work", "three", "word", "must", "because", "does", "part", "even", "place", "well",
)  # fmt: skip


def _rng(key: str) -> random.Random:
    return random.Random(key)  # noqa: S311 — a reproducible workload, not a secret


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def context(seed: int, depth: int) -> str:
    """The shared context of `depth` words for this seed (empty at depth 0)."""
    return words(_rng(f"{seed}:context:{depth}"), depth) if depth else ""


def prompt(seed: int, depth: int, prompt_tokens: int, index: int, shared: str = "") -> str:
    """Request `index`'s whole prompt at `depth`: the shared context, then its own words."""
    own = words(_rng(f"{seed}:{depth}:{index}"), prompt_tokens)
    return f"{shared} {own}" if shared else own
