"""A run as the bench sees it: its endpoint, the model name it serves, whether it serves now,
and the files the bench keeps in it (smoke.json, bench.json, bench.png)."""

from __future__ import annotations

from pathlib import Path

import httpx

from orchestrator.errors import ConfigError
from orchestrator.models.bench import BenchReport, SmokeResult
from orchestrator.models.recipe import Recipe
from orchestrator.runstore import BENCH_FILE, Run

SMOKE_FILE = "smoke.json"
SMOKE_RESPONSE_FILE = "smoke-response.txt"
PLOT_FILE = "bench.png"


class NotServing(ConfigError):
    """`cluster bench` on a run whose model does not answer now (exit 2: nothing was asked)."""


def served_model_name(recipe: Recipe) -> str:
    """The name clients must ask for: `--served-model-name`, else the model path the engine
    was given (both engines' default)."""
    args = [str(a) for a in recipe.args]
    name = ""
    for i, arg in enumerate(args):
        if arg == "--served-model-name" and i + 1 < len(args):
            name = args[i + 1]
        elif arg.startswith("--served-model-name="):
            name = arg.partition("=")[2]
    return name or str(recipe.model.path or "")


def check_serving(run: Run, ready_url: str, timeout_s: float = 5.0) -> None:
    """NotServing unless the boot ended READY and the head answers its readiness path now."""
    verdict = run.verdict()
    if verdict is None:
        raise NotServing(
            "the boot has no verdict yet: it is still booting, or its controller died",
            where=f"run {run.id}",
            hint="`cluster status` shows where it is; bench once it is READY",
        )
    if not verdict.outcome.serving:
        raise NotServing(
            f"the boot ended {verdict.outcome.value}, so nothing serves",
            where=f"run {run.id}",
            hint=f"`cluster postmortem {run.id}` says why",
        )
    try:
        status = httpx.get(ready_url, timeout=timeout_s).status_code
    except httpx.HTTPError as exc:
        raise NotServing(
            f"the head does not answer {ready_url} now ({type(exc).__name__}: {exc})",
            where=f"run {run.id}",
            hint="`cluster status` shows whether its ranks still run",
        ) from None
    if status != 200:
        raise NotServing(
            f"the head answers {ready_url} with HTTP {status}, not 200",
            where=f"run {run.id}",
            hint="`cluster status` shows whether its ranks still run",
        )


def save_smoke(run: Run, result: SmokeResult, transcript: list[str]) -> Path:
    """smoke.json, and beside it the raw exchange (what the server really sent)."""
    run.write_text(SMOKE_RESPONSE_FILE, "\n".join(transcript) + "\n")
    return run.write_json(SMOKE_FILE, result.model_dump(mode="json"))


def save_report(run: Run, report: BenchReport) -> Path:
    return run.write_json(BENCH_FILE, report.model_dump(mode="json"))
