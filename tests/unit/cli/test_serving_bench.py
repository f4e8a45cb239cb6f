"""`cluster bench`'s core against real HTTP servers on loopback: the simulator's own server and
endpoints that refuse, hang, fail or stream garbage. Timing checks here are loose (the ±10%
check against the configured rates is the sim tier's, tests/sim/test_sim_bench.py)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy
import pytest

from orchestrator.cli.main import main
from orchestrator.models.bench import BenchConfig, BenchReport, SmokeResult
from orchestrator.plan.launch import plan_launch
from orchestrator.plan.rendezvous import plan_rendezvous
from orchestrator.recipes import resolve_recipe
from orchestrator.run.boot import write_manifest
from orchestrator.run_files import Plans
from orchestrator.runstore import Run, RunStore
from orchestrator.serving_bench.plot import save_plot
from orchestrator.serving_bench.render import render_compare, render_report
from orchestrator.serving_bench.runs import served_model_name
from orchestrator.serving_bench.smoke import smoke
from orchestrator.serving_bench.stats import RequestResult, level_result, percentile
from orchestrator.serving_bench.sweep import run_level
from orchestrator.serving_bench.workload import context, prompt
from orchestrator.simulator.serve import ServeRates
from tests.unit.plan.test_rendezvous import spark_cluster, spark_inventory
from tests.unit.serving_servers import MODEL, bad_server, refused_url, sim_server

SMALL = BenchConfig(
    prompt_len=200, output_len=12, depths=(0,), concurrency=(1,), requests_per_client=2
)


def test_the_workload_is_the_same_for_the_same_seed_and_differs_per_request():
    shared = context(42, 64)
    assert len(shared.split()) == 64 and shared == context(42, 64)
    a, b = prompt(42, 64, 100, 0, shared), prompt(42, 64, 100, 1, shared)
    assert a == prompt(42, 64, 100, 0, shared)
    assert a != b and a.startswith(shared) and b.startswith(shared)
    assert len(a.split()) == 164
    assert prompt(7, 0, 100, 0) != prompt(42, 0, 100, 0)


@pytest.mark.parametrize("n", [1, 2, 5, 100, 101])
def test_percentiles_agree_with_numpy(n):
    values = [((i * 7919) % 101) / 10 for i in range(n)]
    for q in (50, 99):
        assert percentile(values, q) == pytest.approx(float(numpy.percentile(values, q)))


def test_tpot_and_itl_follow_bench_serving_definitions():
    r = RequestResult(
        started=0.0, ended=1.0, ttft_s=0.2, chunk_times=[0.2, 0.6, 1.0], output_tokens=5
    )
    assert r.tpot_s == pytest.approx(0.8 / 4)  # (E2E - TTFT) / (tokens - 1)
    assert r.itls == pytest.approx([0.4, 0.4])  # chunk gaps (a chunk may carry two tokens)
    bad = RequestResult(started=0.0, ended=2.0, error="timed out after 1 s")
    lv = level_result([r, bad], depth=0, concurrency=2, duration_s=2.0, client_cpu_s=0.1)
    assert (lv.ok, lv.errors, lv.last_error) == (1, 1, "timed out after 1 s")
    assert lv.output_tok_s == pytest.approx(2.5) and lv.req_s == pytest.approx(0.5)
    assert lv.e2e.p50 == pytest.approx(1.0)  # failed requests are not in the latencies


async def test_a_level_against_the_simulator_gets_every_token_and_its_rates_roughly():
    with sim_server(prefill=4000, decode=100) as (url, _):
        lv = await run_level(url, MODEL, SMALL, 0, 1)
    assert (lv.requests, lv.ok, lv.errors) == (2, 2, 0), lv.last_error
    assert lv.generated == 2 * 12  # ignore_eos: exactly max_tokens each
    assert lv.prompt_len_mean is not None and lv.prompt_len_mean >= 200  # server's usage
    # Loose: 200 / 4000 = 50 ms to the first token, 10 ms per further one.
    # (TPOT bounded below at half of that: a busy CI host measured 8.9985 ms against 9)
    assert lv.ttft.p50 is not None and 0.04 < lv.ttft.p50 < 0.5
    assert lv.tpot.p50 is not None and 0.005 < lv.tpot.p50 < 0.05
    assert lv.client_cpu_s > 0


async def test_at_depth_the_prompt_carries_the_context_the_server_counts():
    cfg = SMALL.model_copy(update={"depths": (300,)})
    with sim_server() as (url, _):
        lv = await run_level(url, MODEL, cfg, 300, 1)
    assert lv.prompt_len_mean is not None and lv.prompt_len_mean >= 500


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        ("refused", "cannot connect"),
        ("slow", "timed out after 0.5 s"),
        ("garbage", "malformed stream: not JSON"),
        ("truncated", "stream ended before [DONE]"),
        ("http500", "HTTP 500: "),
    ],
)
async def test_a_bad_endpoint_is_reported_per_level_with_count_and_last_error(make, expected):
    # Only the slow server is meant to time out: a deadline of 0.5 s for the others too made
    # a truncated stream's answer late on a busy host, and it read as a timeout (d2312a1).
    timeout_s = 0.5 if make == "slow" else 30.0
    cfg = SMALL.model_copy(update={"timeout_s": timeout_s, "concurrency": (2,)})
    if make == "refused":
        lv = await run_level(refused_url(), MODEL, cfg, 0, 2)
    else:
        with bad_server(make) as url:
            lv = await run_level(url, MODEL, cfg, 0, 2)
    assert (lv.requests, lv.ok, lv.errors) == (4, 0, 4)
    assert expected in lv.last_error, lv.last_error
    assert "\n" not in lv.last_error and "Traceback" not in lv.last_error
    assert lv.output_tok_s == 0 and lv.ttft.p50 is None


async def test_the_smoke_request_checks_the_served_name_and_a_non_empty_answer():
    with sim_server() as (url, _):
        good = await smoke(url, MODEL)
        wrong = await smoke(url, "mistral-small-4")
    assert good.ok, good.problem
    assert good.answered_model == MODEL and "simulator serving mistral-large-4" in good.answer
    assert not wrong.ok and "not 'mistral-small-4'" in wrong.problem
    with sim_server(ready=False) as (url, _):
        starting = await smoke(url, MODEL)
    assert not starting.ok and "HTTP 503" in starting.problem
    refused = await smoke(refused_url(), MODEL)
    assert not refused.ok and refused.problem.startswith("GET /v1/models failed")


def test_the_served_name_is_the_recipes_flag_else_the_model_path():
    recipe = resolve_recipe("mistral-large4-8x-sglang")
    assert served_model_name(recipe) == "mistral-large-4"
    args = tuple(a for a in recipe.args if a not in ("--served-model-name", MODEL))
    assert served_model_name(recipe.model_copy(update={"args": args})) == recipe.model.path


# -- the command -------------------------------------------------------------------------------


def make_run(root: Path, outcome: str | None) -> Run:
    run = RunStore(root).create()
    recipe = resolve_recipe("mistral-large4-8x-sglang")
    inv, facts = spark_cluster(spark_inventory(8))
    plan = plan_launch(recipe, inv, plan_rendezvous(recipe, inv, facts), run.id)
    write_manifest(run, recipe, recipe, None, inv, Plans(launch=plan))
    if outcome:
        run.write_json("verdict.json", {"outcome": outcome})
    return run


def test_bench_on_a_run_that_is_not_serving_says_so_and_exits_2(tmp_path, capsys):
    failed = make_run(tmp_path, "BARRIER_TIMEOUT")
    assert main(["bench", str(failed.dir)]) == 2
    assert "ended BARRIER_TIMEOUT, so nothing serves" in capsys.readouterr().err
    booting = make_run(tmp_path, None)
    assert main(["bench", str(booting.dir)]) == 2
    assert "no verdict yet" in capsys.readouterr().err
    gone = make_run(tmp_path, "READY")
    assert main(["bench", str(gone.dir), "--endpoint", refused_url()]) == 2
    err = capsys.readouterr().err
    assert "does not answer" in err and "Traceback" not in err
    assert not (gone.dir / "bench.json").exists()


def test_bench_measures_a_serving_endpoint_and_keeps_json_plot_and_smoke(tmp_path, capsys):
    run = make_run(tmp_path, "READY")
    with sim_server() as (url, _):
        args = ["bench", str(run.dir), "--endpoint", url, "--pp", "100", "--tg", "8"]
        code = main(
            [
                *args,
                "--depths",
                "0,50",
                "--concurrency",
                "1,2",
                "--requests-per-client",
                "1",
                "--json",
            ]
        )
    assert code == 0, capsys.readouterr().err
    report = BenchReport.model_validate_json(capsys.readouterr().out)
    assert [(lv.depth, lv.concurrency) for lv in report.levels] == [
        (0, 1),
        (0, 2),
        (50, 1),
        (50, 2),
    ]
    assert all(lv.errors == 0 and lv.generated == 8 * lv.concurrency for lv in report.levels)
    assert report.smoke.ok and report.model == MODEL
    kept = BenchReport.model_validate_json((run.dir / "bench.json").read_text())
    assert kept == report
    assert SmokeResult.model_validate_json((run.dir / "smoke.json").read_text()).ok
    raw = (run.dir / "smoke-response.txt").read_text()
    assert "data: [DONE]" in raw and '"model": "mistral-large-4"' in raw  # the SSE as sent
    png = (run.dir / "bench.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width > 600 and height > 300


def test_bench_with_a_failing_endpoint_prints_each_levels_errors_and_exits_3(tmp_path, capsys):
    run = make_run(tmp_path, "READY")
    with bad_server("garbage") as url:
        args = ["bench", str(run.dir), "--endpoint", url, "--depths", "0", "--concurrency", "1,2"]
        args += ["--requests-per-client", "1"]
        assert main(args) == 3
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert (
        "depth 0 c1: 0.0 tok/s, 0.00 req/s, TTFT p50 -, TPOT p50 -, 0/1 ok, 1 errors (last: "
        "malformed stream: not JSON" in captured.err
    )
    assert "malformed stream" in captured.out  # the table's errors column
    assert "3 request(s) failed in 2 level(s)" in captured.err
    report = json.loads((run.dir / "bench.json").read_text())
    assert [lv["errors"] for lv in report["levels"]] == [1, 2]


def test_the_default_bench_takes_about_a_minute_on_the_built_in_cluster(tmp_path, capsys):
    # Issue 31: the default is 3 short levels, not the seed-style sweep (756 requests, over an
    # hour on the twin); each level's figures print as it ends. Run against the twin's server at
    # 20x its default rates: the levels' time x 20 is what the built-in cluster would take (the
    # client's own overheads scaled up with it, so the estimate errs long).
    speedup = 20
    run = make_run(tmp_path, "READY")
    rates = ServeRates()
    with sim_server(prefill=rates.prefill * speedup, decode=rates.decode * speedup) as (url, _):
        assert main(["bench", str(run.dir), "--endpoint", url, "--json"]) == 0
    captured = capsys.readouterr()
    report = BenchReport.model_validate_json(captured.out)
    assert [(lv.depth, lv.concurrency) for lv in report.levels] == [(0, 1), (0, 2), (0, 4)]
    assert (report.config.prompt_len, report.config.output_len) == (2048, 128)
    assert sum(lv.requests for lv in report.levels) == 14 and not any(
        lv.errors for lv in report.levels
    )
    at_default_rates = sum(lv.duration_s for lv in report.levels) * speedup
    # "about a minute", not the sweep's hour: the client's overheads scale up x20 with the
    # levels, so a busy CI host reads long (75.7 s once, fresh-clone CI of 7013080)
    assert 25 < at_default_rates < 150, at_default_rates
    lines = [ln for ln in captured.err.splitlines() if ln.startswith("depth 0 c")]
    assert len(lines) == 3 and lines[0].startswith("depth 0 c1: "), captured.err
    assert "TTFT p50 " in lines[0] and "TPOT p50 " in lines[0] and "2/2 ok" in lines[0]
    assert "--sweep for the seed-style sweep" in captured.err


def test_sweep_is_the_seed_style_grid_and_explicit_flags_still_win(tmp_path, monkeypatch):
    import orchestrator.run.bench as session

    run = make_run(tmp_path, "READY")
    seen: list[BenchConfig] = []

    def grid_only(ctx, cfg, **_):  # what the CLI asks for is all this test looks at
        seen.append(cfg)
        smoke = SmokeResult(ok=True, endpoint="http://x", expected_model=MODEL)
        return BenchReport(
            run_id=run.id, recipe="r", endpoint="http://x", model=MODEL, started="", config=cfg,
            smoke=smoke,
        )  # fmt: skip

    monkeypatch.setattr(session, "bench_run", grid_only)
    for extra in (
        [],
        ["--sweep"],
        ["--sweep", "--concurrency", "1,8", "--requests-per-client", "1"],
    ):
        assert main(["bench", str(run.dir), *extra]) == 0
    grids = [(c.depths, c.concurrency, c.requests_per_client) for c in seen]
    assert grids == [
        ((0,), (1, 2, 4), 2),
        ((0, 4096, 8192), (1, 2, 4, 8, 16, 32), 4),
        ((0, 4096, 8192), (1, 8), 1),
    ]


def test_a_failed_smoke_request_is_its_own_failure_kept_with_the_answer(tmp_path, capsys):
    run = make_run(tmp_path, "READY")
    with bad_server("http500") as url:
        assert main(["bench", str(run.dir), "--endpoint", url]) == 6
    err = capsys.readouterr().err
    assert "smoke request failed: HTTP 500: " in err and "Traceback" not in err
    kept = json.loads((run.dir / "smoke.json").read_text())
    assert not kept["ok"] and "illegal memory access" in kept["problem"]
    raw = (run.dir / "smoke-response.txt").read_text()
    assert "GET /v1/models -> HTTP 200" in raw and "POST /v1/chat/completions {" in raw
    assert "-> HTTP 500" in raw
    assert '{"object":"error","message":"CUDA error: an illegal memory access"}' in raw
    assert not (run.dir / "bench.json").exists()  # no sweep against a model that fails


def test_compare_puts_two_runs_side_by_side(tmp_path, capsys):
    runs = [make_run(tmp_path, "READY") for _ in range(2)]
    with sim_server(decode=400) as (url, _):
        for r in runs:
            assert (
                main(
                    [
                        "bench",
                        str(r.dir),
                        "--endpoint",
                        url,
                        "--pp",
                        "50",
                        "--tg",
                        "4",
                        "--depths",
                        "0",
                        "--concurrency",
                        "1",
                        "--requests-per-client",
                        "1",
                    ]
                )
                == 0
            )
    capsys.readouterr()
    assert main(["bench", "--compare", str(runs[0].dir), str(runs[1].dir)]) == 0
    out = capsys.readouterr().out
    assert "d0 c1" in out and runs[0].id in out and runs[1].id in out
    assert main(["bench", "--compare", str(runs[0].dir), str(tmp_path)]) == 8
    # tmp_path holds runs but is not one (issue 17: --run and friends refuse such a folder)
    assert "not a run directory" in capsys.readouterr().err


def test_the_compare_table_has_one_row_per_level_both_measured():
    a = _report("A", [(0, 1, 30.0), (0, 2, 40.0)])
    b = _report("B", [(0, 1, 24.0)])
    table = render_compare(a, b)
    assert table.row_count == 1


def test_the_plot_is_a_png(tmp_path):
    path = save_plot(
        _report("A", [(0, 1, 30.0), (0, 2, 41.0), (4096, 1, 29.0)]), tmp_path / "p.png"
    )
    assert path.read_bytes()[:4] == b"\x89PNG"


def _report(run_id: str, levels: list[tuple[int, int, float]]) -> BenchReport:
    rs = [
        RequestResult(started=0, ended=1, ttft_s=0.1, chunk_times=[0.1, 0.5, 1.0], output_tokens=3)
    ]
    return BenchReport(
        run_id=run_id,
        recipe="r",
        endpoint="http://x",
        model=MODEL,
        started="2026-12-01T00:00:00+00:00",
        config=BenchConfig(),
        smoke=SmokeResult(ok=True, endpoint="http://x", expected_model=MODEL),
        levels=tuple(
            level_result(rs, depth=d, concurrency=c, duration_s=3 / tps, client_cpu_s=0.0)
            for d, c, tps in levels
        ),
    )


async def test_thirty_two_clients_at_once_are_all_answered():
    # socketserver's default listen backlog (5) reset some of 32 simultaneous connections.
    cfg = BenchConfig(prompt_len=2048, output_len=4, requests_per_client=1)
    with sim_server(prefill=200_000, decode=400) as (url, _):
        lv = await run_level(url, MODEL, cfg, 0, 32)
    assert (lv.requests, lv.errors) == (32, 0), lv.last_error


@pytest.mark.parametrize("width", [80, 130])
def test_the_table_fits_its_terminal_without_cutting_a_figure(width):
    from rich.console import Console

    report = _report("20261201T060000Z-abcdef", [(0, 1, 31.9), (8192, 32, 1200.0)])
    console = Console(width=width, record=True, color_system=None)
    console.print(render_report(report, console.width))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= width
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert len(rows) == 2 and not any("…" in row for row in rows), text
    assert ("100/100/100" in text) == (width >= 120)  # mean/p50/p99 when wide, p50/p99 when not
    assert "100/100" in text and "1000/1000" in text


async def test_a_reasoning_models_thinking_counts_as_output_vllm_and_sglang_fields():
    # vLLM streams thinking in delta.reasoning (SGLang: reasoning_content); with tg128 a
    # reasoning model may answer nothing but thoughts: that is output, not an empty answer.
    cfg = SMALL.model_copy(update={"concurrency": (1,), "requests_per_client": 1})
    with bad_server("reasoning") as url:
        lv = await run_level(url, MODEL, cfg, 0, 1)
        checked = await smoke(url, MODEL)
    assert (lv.ok, lv.errors, lv.generated) == (1, 0, 3), lv.last_error
    assert lv.ttft.p50 is not None and lv.e2e.p50 is not None  # timed from the first thought
    assert lv.ttft.p50 < lv.e2e.p50 and lv.tpot.p50 is not None
    assert checked.ok and checked.answer == "" and checked.reasoning == "Let me think"
