"""Read load progress out of SGLang's and vLLM's log dialects, one line at a time.

Each pattern matches the stable part of a real line kept in `tests/fixtures/engine-lines/`
(engine, version and source there); the tests run the whole corpus through `parse_line`.
Lines arrive already split on both \\r and \\n (tqdm joins its updates with \\r).

What a dialect tells, per rank (DOMAIN.md): SGLang prints `Load weight begin/end` on every TP
rank but the shard bar once (TP0); vLLM prints shard progress on global rank 0 only. So logs are
milestones; per-rank byte progress comes from the sampler (`/proc/<pid>/io`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

# `docker logs --timestamps` (and our process runtime) put an RFC 3339 nano timestamp first.
DOCKER_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) ")


class Milestone(StrEnum):
    server_args = "server_args"
    dist_init = "dist_init"  # torch distributed is up on this rank
    load_begin = "load_begin"
    shards = "shards"  # shard bar update: done/total
    load_end = "load_end"
    warmup = "warmup"  # KV cache, memory pool, CUDA graph capture, autotune
    ready = "ready"  # the engine says it serves
    barrier_failed = "barrier_failed"  # SGLang's post-load barrier ValueError on this rank
    error = "error"  # a traceback or error line worth showing


@dataclass(frozen=True)
class Progress:
    milestone: Milestone
    done: int | None = None  # shards done
    total: int | None = None  # shards total
    detail: str = ""


_PATTERNS: tuple[tuple[re.Pattern[str], Milestone], ...] = (
    (re.compile(r"server_args=|non-default args:"), Milestone.server_args),
    (re.compile(r"Init torch distributed ends|world_size=\d+ rank=\d+"), Milestone.dist_init),
    (re.compile(r"Load weight begin|Starting to load model"), Milestone.load_begin),
    (re.compile(r"Load weight end\.|Loading weights took|Model loading took"), Milestone.load_end),
    (
        re.compile(
            r"KV Cache is allocated|Memory pool end|Capture cuda graph|Available KV cache memory"
            r"|GPU KV cache size|init engine \(profile|Running FlashInfer autotune"
        ),
        Milestone.warmup,
    ),
    (
        re.compile(
            r"fired up and ready to roll|Application startup complete|Uvicorn running on"
            r"|Starting vLLM (?:API )?server on"
        ),
        Milestone.ready,
    ),
    (
        re.compile(r"could finish the model loading, but there are other ranks"),
        Milestone.barrier_failed,
    ),
    (re.compile(r"Traceback \(most recent call last\)|\bERROR\b|Error:"), Milestone.error),
)
_SHARDS = re.compile(r"Loading safetensors checkpoint shards:\s+(\d+)%[^|]*\|\s*(\d+)/(\d+)")
_EAGLE = re.compile(r"Load weight end \(EAGLE draft\)")


def strip_timestamp(line: str) -> tuple[str | None, str]:
    """Split off the leading Docker timestamp, if any: (timestamp or None, engine text)."""
    m = DOCKER_TS.match(line)
    if m:
        return m.group(1), line[m.end() :]
    return None, line


# One pass that rejects ordinary chatter before any milestone pattern runs: the supervisor
# parses thousands of lines a second per rank, and almost none of them mark anything.
_ANY = re.compile(
    "|".join(
        re.escape(k)
        for k in (
            "checkpoint shards",
            "server_args=",
            "non-default args",
            "Init torch distributed",
            "world_size=",
            "Load weight",
            "Starting to load",
            "Loading weights took",
            "Model loading took",
            "KV Cache",
            "Memory pool end",
            "Capture cuda graph",
            "KV cache",
            "init engine (profile",
            "FlashInfer autotune",
            "fired up",
            "Application startup complete",
            "Uvicorn running",
            "Starting vLLM",
            "could finish the model loading",
            "Traceback",
            "ERROR",
            "Error:",
        )
    )
)


_DOCKER_TS_LINES = re.compile(DOCKER_TS.pattern, re.MULTILINE)


def strip_timestamps(lines: str) -> str:
    """`strip_timestamp` on every line of a \\n-joined batch, in one pass."""
    return _DOCKER_TS_LINES.sub("", lines)


def may_mark(text: str) -> bool:
    """Whether any line of `text` (one line or a \\n-joined batch) can mark a milestone: one
    regex pass lets a batch of ordinary chatter skip the per-line parse."""
    return _ANY.search(text) is not None


def parse_line(text: str) -> Progress | None:
    """The milestone a line marks, or None for ordinary chatter."""
    if not _ANY.search(text):
        return None
    if m := _SHARDS.search(text):
        return Progress(Milestone.shards, done=int(m.group(2)), total=int(m.group(3)))
    if _EAGLE.search(text):  # the draft model's own load end is not the main weights' end
        return None
    for pattern, milestone in _PATTERNS:
        if pattern.search(text):
            return Progress(milestone, detail=text.strip()[:200])
    return None


_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")
_RFC3339_LEADING = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d) ")


@functools.lru_cache(maxsize=4096)
def _epoch_s(second: str, zone: str) -> int:
    """Whole seconds since the epoch; cached, as thousands of lines a second share one."""
    return int(datetime.fromisoformat(second + ("+00:00" if zone == "Z" else zone)).timestamp())


def timestamp_ns(ts: str) -> int:
    """An RFC 3339 timestamp as integer nanoseconds since the epoch, for ordering.

    String comparison is not enough: RFC3339Nano trims trailing zeros (".1234Z" vs ".12345Z").
    """
    m = _RFC3339.match(ts)
    if not m:
        return 0
    frac = (m.group(2) or "").ljust(9, "0")[:9]
    return _epoch_s(m.group(1), m.group(3)) * 1_000_000_000 + int(frac)


def line_timestamp_ns(line: bytes | str) -> int:
    """The leading Docker timestamp of a raw line in nanoseconds; 0 when it has none."""
    raw = line.encode() if isinstance(line, str) else line
    m = _RFC3339_LEADING.match(raw)
    if not m:
        return 0
    frac = (m.group(2) or b"").ljust(9, b"0")[:9]
    return _epoch_s(m.group(1).decode(), m.group(3).decode()) * 1_000_000_000 + int(frac)
