"""`cluster bench [RUN]`: smoke and sweep a serving run's endpoint; `--compare A B`."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.cli.complete import complete_run
from orchestrator.cli.options import InventoryOpt, JsonOpt
from orchestrator.cli.output import console, err_console, print_json, styled
from orchestrator.cli.stores import pick_run, store_for
from orchestrator.errors import BootFailed, ConfigError, UnhealthyCluster
from orchestrator.models.bench import (
    DEFAULT_CONCURRENCY,
    DEFAULT_DEPTHS,
    DEFAULT_REQUESTS_PER_CLIENT,
    SWEEP_CONCURRENCY,
    SWEEP_DEPTHS,
    SWEEP_REQUESTS_PER_CLIENT,
    BenchConfig,
    LevelResult,
    SmokeResult,
)
from orchestrator.runstore import Run, RunStore


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(p) for p in text.replace(" ", "").split(",") if p)
    except ValueError:
        raise ConfigError(f"{option} {text!r}: expected whole numbers, e.g. 1,2,4") from None
    if not values:
        raise ConfigError(f"{option} {text!r}: expected at least one number")
    return values


def _join(values: tuple[int, ...]) -> str:
    return ",".join(map(str, values))


def bench(
    run: Annotated[
        str | None,
        typer.Argument(
            help="run id or run directory (default: the newest run)", autocompletion=complete_run
        ),
    ] = None,
    inventory: InventoryOpt = None,
    prompt_tokens: Annotated[
        int, typer.Option("--prompt-tokens", "--pp", help="fresh prompt tokens per request")
    ] = 2048,
    output_tokens: Annotated[
        int, typer.Option("--output-tokens", "--tg", help="output tokens per request")
    ] = 128,
    depths: Annotated[
        str | None,
        typer.Option(
            "--depths",
            help=f"context depths in tokens, comma-separated [default: {_join(DEFAULT_DEPTHS)}; "
            f"--sweep: {_join(SWEEP_DEPTHS)}]",
            show_default=False,
        ),
    ] = None,
    concurrency: Annotated[
        str | None,
        typer.Option(
            "--concurrency",
            help=f"concurrency levels, comma-separated [default: {_join(DEFAULT_CONCURRENCY)}; "
            f"--sweep: {_join(SWEEP_CONCURRENCY)}]",
            show_default=False,
        ),
    ] = None,
    requests: Annotated[
        int | None,
        typer.Option(
            "--requests-per-client",
            help="a level sends concurrency x this many [default: "
            f"{DEFAULT_REQUESTS_PER_CLIENT}; --sweep: {SWEEP_REQUESTS_PER_CLIENT}]",
            show_default=False,
        ),
    ] = None,
    sweep: Annotated[
        bool,
        typer.Option(
            "--sweep",
            help=f"the seed-style sweep: depths {_join(SWEEP_DEPTHS)} x concurrency "
            f"{_join(SWEEP_CONCURRENCY)}, {SWEEP_REQUESTS_PER_CLIENT} requests per client "
            "(minutes; the flags above still override it)",
        ),
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="the prompts' seed")] = 42,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds one request may take")] = 300,
    smoke_only: Annotated[
        bool, typer.Option("--smoke-only", help="only the smoke request, no sweep")
    ] = False,
    endpoint: Annotated[
        str | None,
        typer.Option("--endpoint", help="bench this base URL instead of the run's (e.g. a tunnel)"),
    ] = None,
    compare: Annotated[
        tuple[str, str] | None,
        typer.Option(
            "--compare", metavar="RUN_A RUN_B", help="two runs' bench results, side by side"
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Smoke-test and measure a serving run's endpoint: output tok/s, req/s, TTFT, TPOT, ITL
    and E2E per depth and concurrency; kept in the run (bench.json, bench.png)."""
    store = store_for(inventory)
    if compare is not None:
        _compare(store, compare, json_out)
        return
    from orchestrator.run.bench import bench_run
    from orchestrator.run.context import load_context

    try:
        grid = (
            (SWEEP_DEPTHS, SWEEP_CONCURRENCY, SWEEP_REQUESTS_PER_CLIENT)
            if sweep
            else (DEFAULT_DEPTHS, DEFAULT_CONCURRENCY, DEFAULT_REQUESTS_PER_CLIENT)
        )
        cfg = BenchConfig(
            prompt_len=prompt_tokens,
            output_len=output_tokens,
            depths=grid[0] if depths is None else _ints(depths, "--depths"),
            concurrency=grid[1] if concurrency is None else _ints(concurrency, "--concurrency"),
            requests_per_client=grid[2] if requests is None else requests,
            seed=seed,
            timeout_s=timeout,
        )
    except ValueError as exc:  # pydantic's ValidationError is one
        raise ConfigError(f"bench options: {str(exc).splitlines()[-1].strip()}") from None
    if any(d < 0 for d in cfg.depths) or any(c < 1 for c in cfg.concurrency):
        raise ConfigError("--depths must be >= 0 and --concurrency >= 1")
    r = pick_run(store, run)
    ctx = load_context(r)

    def on_smoke(s: SmokeResult) -> None:
        if s.ok:
            err_console.print(
                f"smoke: {s.answered_model} answered in {s.latency_s or 0:.2f} s: "
                f"{(s.answer or f'(thinking) {s.reasoning}')[:100]!r}",
                markup=False,
            )
        else:
            err_console.print(styled("red", "smoke failed: ", s.problem), soft_wrap=True)

    def on_level(lv: LevelResult) -> None:
        # Each level's figures the moment it ends: the first come within seconds of the smoke.
        err_console.print(level_line(lv), markup=False, soft_wrap=True)

    if not smoke_only:
        levels = len(cfg.depths) * len(cfg.concurrency)
        err_console.print(
            f"sweep: {levels} level(s), depth {_join(cfg.depths)} x concurrency "
            f"{_join(cfg.concurrency)}, {cfg.requests_per_client} request(s) per client, "
            f"pp {cfg.prompt_len} tg {cfg.output_len}"
            + ("" if sweep else "; --sweep for the seed-style sweep"),
            markup=False,
            soft_wrap=True,
        )

    report = bench_run(
        ctx, cfg, endpoint=endpoint, sweep=not smoke_only, on_smoke=on_smoke, on_level=on_level
    )
    plot_path = None
    if report.levels:
        from orchestrator.serving_bench.plot import save_plot
        from orchestrator.serving_bench.runs import PLOT_FILE

        plot_path = save_plot(report, r.dir / PLOT_FILE)
        _refresh_metrics(r)
    if json_out:
        print_json(report)
    else:
        from orchestrator.serving_bench.render import cpu_line, render_report

        if report.levels:
            console.print(render_report(report, console.width))
            console.print(cpu_line(report))
        if plot_path is not None:
            console.print(
                f"kept in {r.dir}: bench.json, {plot_path.name}, smoke.json, smoke-response.txt"
            )
    if not report.smoke.ok:
        raise BootFailed(
            f"the smoke request failed: {report.smoke.problem}",
            where=f"run {r.id}",
            hint=f"what came back is in {r.dir / 'smoke.json'} and smoke-response.txt",
        )
    failed = [lv for lv in report.levels if lv.errors]
    if failed:
        worst = failed[-1]
        total = sum(lv.errors for lv in failed)
        raise UnhealthyCluster(
            f"{total} request(s) failed in {len(failed)} level(s); last, at depth "
            f"{worst.depth} c{worst.concurrency}: {worst.last_error}",
            where=f"run {r.id}",
            hint="the table shows each level's errors",
        )


def level_line(lv: LevelResult) -> str:
    """One level's figures on one line: what a person reads while the next level runs."""

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:.0f} ms"

    errors = f", {lv.errors} errors (last: {lv.last_error})" if lv.errors else ""
    return (
        f"depth {lv.depth} c{lv.concurrency}: {lv.output_tok_s:.1f} tok/s, {lv.req_s:.2f} req/s, "
        f"TTFT p50 {ms(lv.ttft.p50)}, TPOT p50 {ms(lv.tpot.p50)}, {lv.ok}/{lv.requests} ok"
        f"{errors} ({lv.duration_s:.1f} s)"
    )


def _refresh_metrics(run: Run) -> None:
    """metrics.prom gains the bench's results (with the run's last supervised view: the
    supervisor that wrote it ended at READY, and the bench asks no node)."""
    from orchestrator.supervisor.metrics import write_metrics
    from orchestrator.supervisor.view import BootView

    status = run.read_status()
    if status is not None:
        write_metrics(run, BootView.model_validate(status))


def _compare(store: RunStore, refs: tuple[str, str], json_out: bool) -> None:
    from orchestrator.serving_bench.render import render_compare

    a, b = (pick_run(store, ref).bench_report() for ref in refs)
    if json_out:
        print_json({"a": a.model_dump(mode="json"), "b": b.model_dump(mode="json")})
        return
    console.print(render_compare(a, b))
