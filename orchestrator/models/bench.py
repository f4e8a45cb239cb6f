"""What a bench is asked (`BenchConfig`) and what it found (`BenchReport`): bench.json's schema.

Times are seconds, rates per second. A level that met errors says how many and the last one.
No field name says "token": the run store redacts keys that look like secrets (TOKEN, KEY).
"""

from __future__ import annotations

from pydantic import Field

from orchestrator.models.base import StrictModel

# The default bench answers "does it serve, and how fast" in about a minute on the built-in
# cluster (14 requests; the twin's one prefill lane takes ~2 s per 2,048-token prompt): run
# right after READY, its first figures come within seconds.
DEFAULT_DEPTHS = (0,)
DEFAULT_CONCURRENCY = (1, 2, 4)
DEFAULT_REQUESTS_PER_CLIENT = 2
# The seed-style sweep (`cluster bench --sweep`): three depths x six levels, 4 requests per
# client: 756 requests, minutes on Sparks and over an hour on the built-in cluster.
SWEEP_DEPTHS = (0, 4096, 8192)
SWEEP_CONCURRENCY = (1, 2, 4, 8, 16, 32)
SWEEP_REQUESTS_PER_CLIENT = 4


class BenchConfig(StrictModel):
    prompt_len: int = Field(2048, ge=1)  # pp: fresh prompt tokens per request
    output_len: int = Field(128, ge=1)  # tg: tokens asked for (ignore_eos)
    depths: tuple[int, ...] = DEFAULT_DEPTHS  # tokens of context before the prompt
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    # a level sends concurrency x this many
    requests_per_client: int = Field(DEFAULT_REQUESTS_PER_CLIENT, ge=1)
    seed: int = 42
    timeout_s: float = Field(300.0, gt=0)  # one request, start to last token


class Stat(StrictModel):
    """mean, median and 99th percentile of one latency, in seconds (None: no sample)."""

    mean: float | None = None
    p50: float | None = None
    p99: float | None = None


class LevelResult(StrictModel):
    depth: int
    concurrency: int
    requests: int
    ok: int
    errors: int
    last_error: str = ""
    duration_s: float
    generated: int  # completed requests' output tokens (the server's usage when it says)
    prompt_len_mean: float | None = None  # the server's count, when it reports usage
    output_tok_s: float
    req_s: float
    ttft: Stat
    tpot: Stat
    itl: Stat
    e2e: Stat
    client_cpu_s: float  # CPU the bench process used during this level (user + system)

    @property
    def client_cpu_share(self) -> float:
        """The bench client's CPU as a share of one core over the level's wall time."""
        return self.client_cpu_s / self.duration_s if self.duration_s > 0 else 0.0


class SmokeResult(StrictModel):
    ok: bool
    endpoint: str
    expected_model: str
    served_models: tuple[str, ...] = ()
    answered_model: str = ""
    answer: str = ""
    reasoning: str = ""  # what a reasoning model thought first (vLLM/SGLang reasoning parsers)
    latency_s: float | None = None
    problem: str = ""  # why it failed, one line


class BenchReport(StrictModel):
    schema_version: int = 1
    run_id: str
    recipe: str
    endpoint: str
    model: str
    started: str  # ISO 8601 UTC
    config: BenchConfig
    smoke: SmokeResult
    levels: tuple[LevelResult, ...] = ()
