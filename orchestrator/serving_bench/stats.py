"""Per-level figures from per-request timings. Pure; definitions as `sglang.bench_serving`'s:

- TTFT: request sent to first content chunk;
- TPOT: (E2E - TTFT) / (output tokens - 1), per request (requests with one token have none);
- ITL: the gaps between consecutive content chunks, every gap of every request;
- E2E: request sent to the stream's end;
- output tok/s and req/s: completed requests' output tokens (and count) over the level's wall
  time, first request sent to last one done.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from orchestrator.models.bench import LevelResult, Stat


@dataclass
class RequestResult:
    started: float  # monotonic
    ended: float
    ttft_s: float | None = None
    chunk_times: list[float] = field(default_factory=list)  # monotonic, per content chunk
    output_tokens: int = 0
    prompt_tokens: int | None = None
    model: str = ""
    text: str = ""
    reasoning: str = ""  # a reasoning model's thinking (delta.reasoning / reasoning_content)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def e2e_s(self) -> float:
        return self.ended - self.started

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    @property
    def itls(self) -> list[float]:
        t = self.chunk_times
        return [b - a for a, b in itertools.pairwise(t)]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks (numpy's default)."""
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def stat(values: Sequence[float]) -> Stat:
    if not values:
        return Stat()
    return Stat(
        mean=statistics.fmean(values), p50=percentile(values, 50), p99=percentile(values, 99)
    )


def level_result(
    results: Sequence[RequestResult],
    *,
    depth: int,
    concurrency: int,
    duration_s: float,
    client_cpu_s: float,
) -> LevelResult:
    done = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    tokens = sum(r.output_tokens for r in done)
    prompts = [r.prompt_tokens for r in done if r.prompt_tokens is not None]
    wall = max(duration_s, 1e-9)
    return LevelResult(
        depth=depth,
        concurrency=concurrency,
        requests=len(results),
        ok=len(done),
        errors=len(failed),
        last_error=max(failed, key=lambda r: r.ended).error if failed else "",
        duration_s=duration_s,
        generated=tokens,
        prompt_len_mean=statistics.fmean(prompts) if prompts else None,
        output_tok_s=tokens / wall,
        req_s=len(done) / wall,
        ttft=stat([r.ttft_s for r in done if r.ttft_s is not None]),
        tpot=stat([t for r in done if (t := r.tpot_s) is not None]),
        itl=stat([gap for r in done for gap in r.itls]),
        e2e=stat([r.e2e_s for r in done]),
        client_cpu_s=client_cpu_s,
    )
