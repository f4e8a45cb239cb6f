"""The sweep: for each depth, each concurrency level is a closed loop of N clients.

A level at concurrency c sends c x requests_per_client requests, at most c in flight (the
`--max-concurrency` of `sglang.bench_serving`). The client's own CPU (user + system of this
process) is measured per level, so a report says what the bench cost the controller.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx

from orchestrator.models.bench import BenchConfig, LevelResult
from orchestrator.serving_bench.client import chat_body, stream_chat
from orchestrator.serving_bench.stats import RequestResult, level_result
from orchestrator.serving_bench.workload import context, prompt


async def run_level(
    base_url: str, model: str, cfg: BenchConfig, depth: int, concurrency: int
) -> LevelResult:
    shared = context(cfg.seed, depth)
    n = concurrency * cfg.requests_per_client
    prompts = [prompt(cfg.seed, depth, cfg.prompt_len, i, shared) for i in range(n)]
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits) as client:

        async def one(text: str) -> RequestResult:
            async with gate:
                body = chat_body(model, text, cfg.output_len)
                return await stream_chat(client, base_url, body, cfg.timeout_s)

        cpu0, wall0 = time.process_time(), time.monotonic()
        results = await asyncio.gather(*(one(p) for p in prompts))
        wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    return level_result(
        results, depth=depth, concurrency=concurrency, duration_s=wall, client_cpu_s=cpu
    )


async def run_sweep(
    base_url: str,
    model: str,
    cfg: BenchConfig,
    on_level: Callable[[LevelResult], None] | None = None,
) -> list[LevelResult]:
    levels: list[LevelResult] = []
    for depth in cfg.depths:
        for c in cfg.concurrency:
            level = await run_level(base_url, model, cfg, depth, c)
            levels.append(level)
            if on_level is not None:
                on_level(level)
    return levels
