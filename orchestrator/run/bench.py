"""One bench of one run, end to end: check it serves, smoke, sweep, keep the results in it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

from orchestrator.models.bench import BenchConfig, BenchReport, LevelResult, SmokeResult
from orchestrator.models.events import Smoke
from orchestrator.models.recipe import Recipe
from orchestrator.models.run import Finding, Outcome
from orchestrator.run.context import RunContext
from orchestrator.runstore import Run
from orchestrator.serving_bench.runs import (
    check_serving,
    save_report,
    save_smoke,
    served_model_name,
)
from orchestrator.serving_bench.smoke import smoke
from orchestrator.serving_bench.sweep import run_sweep


def model_of(ctx: RunContext) -> str:
    return served_model_name(ctx.recipe)


def smoke_run(ctx: RunContext, endpoint: str | None = None) -> SmokeResult:
    """The smoke request against the run's endpoint; smoke.json and smoke-response.txt keep
    what came back."""
    transcript: list[str] = []
    result = asyncio.run(smoke(endpoint or ctx.endpoint, model_of(ctx), transcript=transcript))
    save_smoke(ctx.run, result, transcript)
    return result


def bench_run(
    ctx: RunContext,
    cfg: BenchConfig,
    *,
    endpoint: str | None = None,
    sweep: bool = True,
    on_smoke: Callable[[SmokeResult], None] | None = None,
    on_level: Callable[[LevelResult], None] | None = None,
) -> BenchReport:
    """NotServing (exit 2) when the run does not serve; otherwise the report, kept in the run
    as bench.json (a failed smoke ends it there: no sweep against a model that does not
    answer)."""
    url = endpoint or ctx.endpoint
    check_serving(ctx.run, url.rstrip("/") + ctx.readiness_path)
    started = datetime.now(UTC).isoformat()
    first = smoke_run(ctx, url)
    if on_smoke is not None:
        on_smoke(first)
    levels: list[LevelResult] = []
    if first.ok and sweep:
        levels = asyncio.run(run_sweep(url, model_of(ctx), cfg, on_level))
    report = BenchReport(
        run_id=ctx.run.id,
        recipe=ctx.recipe_name,
        endpoint=url,
        model=model_of(ctx),
        started=started,
        config=cfg,
        smoke=first,
        levels=tuple(levels),
    )
    if levels:
        save_report(ctx.run, report)
    return report


async def smoke_verdict(run: Run, endpoint: str, recipe: Recipe) -> Finding | None:
    """The boot's smoke request after READY: None when it passed, else the SMOKE_FAILED
    verdict. smoke.json and smoke-response.txt keep what came back either way."""
    transcript: list[str] = []
    result = await smoke(endpoint, served_model_name(recipe), transcript=transcript)
    save_smoke(run, result, transcript)
    run.append_event(Smoke(**dict(result)))
    if result.ok:
        return None
    return Finding(
        watcher="smoke",
        severity="verdict",
        rank=0,
        outcome=Outcome.SMOKE_FAILED,
        message=f"every rank is up, but the smoke request failed: {result.problem}",
        advice=f"the ranks keep serving; what came back is in {run.dir / 'smoke.json'} and "
        "smoke-response.txt; "
        f"`cluster bench {run.id} --smoke-only` asks again",
    )
