"""`cluster bench` on the built-in simulated cluster: a real boot (eight simulator processes on
127.0.0.10-17, the process runtime, the supervisor), its smoke request, then the sweep through
the CLI; the figures are checked against the rates the simulator was told to serve at (±10%).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.cli.main import main
from orchestrator.inventory import load_inventory
from orchestrator.models.bench import BenchReport
from orchestrator.models.run import Outcome
from orchestrator.paths import builtin_simulated_inventory
from orchestrator.run.boot import BootOptions, boot
from orchestrator.run.context import load_context
from orchestrator.run.stop import stop_run
from orchestrator.runstore import RunStore
from orchestrator.simulator.serve import ENV_DECODE_RATE, ENV_PREFILL_RATE

pytestmark = pytest.mark.sim
RECIPE = "mistral-large4-8x-sglang"
PREFILL, DECODE = 2000.0, 50.0  # tokens/s the twin is told to serve at
PP, TG = 300, 24


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


# What a request costs besides the twin's configured rates on a busy 2-core CI host (HTTP,
# scheduling): CI measured a 0.150 s TTFT as 0.165 s, and a fresh clone beside three netns lanes
# (d4b5e2a) as 0.215 s, 0.2 ms past the 0.05 s allowed then. Added to a duration, never to a
# rate's share, so a twin serving at the wrong rate still fails: at half the prefill rate the
# shortest TTFT here, 0.15 s, is 0.30 s, past 0.15 x 1.1 + 0.10.
OVERHEAD_S = 0.10


def tpot_ok(measured: float | None, expected: float) -> bool:
    """A time per output token the decode rate sets: up to a quarter short, half again long.

    A busy host adds its scheduling delay to every token (a fresh-clone CI beside other work
    measured 22.7 ms where 20 were set, past the 10 % this allowed before); a twin decoding at
    half the rate (40 ms) or twice it (10 ms) still fails."""
    return measured is not None and 0.75 * expected <= measured <= 1.5 * expected


def took(measured: float | None, expected: float) -> bool:
    """A duration the rates set: within 10 %, plus up to OVERHEAD_S of the host's own."""
    return measured is not None and -0.10 * expected <= measured - expected <= (
        0.10 * expected + OVERHEAD_S
    )


async def test_a_booted_twin_passes_the_smoke_and_benches_at_its_configured_rates(
    twin_weights, state, capsys
):
    options = BootOptions(
        sim_scale="test",
        sim_weights_root=twin_weights,
        sim_env={ENV_PREFILL_RATE: str(PREFILL), ENV_DECODE_RATE: str(DECODE)},
    )
    inventory = load_inventory(builtin_simulated_inventory())
    store = RunStore()
    booting = asyncio.create_task(
        asyncio.wait_for(boot(RECIPE, inventory, options=options, store=store), 240)
    )
    seen: set[float] = set()  # metrics.prom's view times while the supervisor holds the run
    while not booting.done():
        await asyncio.sleep(0.3)
        run = store.latest()
        if run is not None and (run.dir / "metrics.prom").exists():
            found = series((run.dir / "metrics.prom").read_text())
            seen.update(s.value for s in found.get("cluster_run_updated_timestamp_seconds", []))
    result = booting.result()
    try:
        assert result.verdict.outcome is Outcome.READY, result.verdict.message
        assert len(seen) >= 3, seen  # rewritten every tick (1 s) through a boot of >10 s
        found = series((result.run.dir / "metrics.prom").read_text())
        assert [s.labels["outcome"] for s in found["cluster_run_outcome"] if s.value == 1] == [
            "READY"
        ]
        serving = [s for s in found["cluster_rank_phase"] if s.labels["phase"] == "serving"]
        assert sorted(int(s.labels["rank"]) for s in serving if s.value == 1) == list(range(8))
        smoke = json.loads((result.run.dir / "smoke.json").read_text())
        assert smoke["ok"] and smoke["answered_model"] == "mistral-large-4", smoke
        assert smoke["answer"].startswith("This is the sglang simulator serving mistral-large-4")
        assert any(e.kind == "smoke" for e in result.run.events())

        args = ["bench", result.run.id, "--pp", str(PP), "--tg", str(TG), "--depths", "0,200"]
        args += ["--concurrency", "1,4", "--requests-per-client", "2", "--json"]
        code = await asyncio.to_thread(main, args)
        out = capsys.readouterr().out
        assert code == 0, out
        # The boot's own log lines (structlog, on stdout in this process) may come before the
        # JSON, or not at all: the document starts at the first line that is a lone "{".
        start = re.search(r"(?m)^\{$", out)
        assert start is not None, out
        report = BenchReport.model_validate_json(out[start.start() :])
    finally:
        await stop_run(load_context(result.run))

    assert [(lv.depth, lv.concurrency) for lv in report.levels] == [
        (0, 1),
        (0, 4),
        (200, 1),
        (200, 4),
    ]
    for lv in report.levels:
        assert lv.errors == 0, lv.last_error
        assert lv.generated == TG * lv.requests
        assert lv.prompt_len_mean is not None and lv.prompt_len_mean >= PP + lv.depth
        # Every request decodes at its own pace: TPOT is 1/decode at every level. TPOT is the
        # time after the first token over the tokens after it: a busy host that delays the first
        # token's delivery lets the next ones arrive together, and reads TPOT short (a fresh-
        # clone CI of f7162ef: 17.8 ms for 20). A quarter below still fails a twin at twice the
        # rate (10 ms), as half again above fails one at half of it (40 ms).
        assert tpot_ok(lv.tpot.p50, 1 / DECODE), (lv.depth, lv.concurrency, lv.tpot)
    for lv in (x for x in report.levels if x.concurrency == 1):
        ttft = lv.prompt_len_mean / PREFILL  # type: ignore[operator]
        assert took(lv.ttft.p50, ttft), (lv.depth, lv.ttft, ttft)
        per_request = ttft + (TG - 1) / DECODE
        assert lv.output_tok_s is not None and took(TG / lv.output_tok_s, per_request), (
            lv.depth,
            lv.output_tok_s,
        )
    kept = BenchReport.model_validate_json((result.run.dir / "bench.json").read_text())
    assert kept == report
    assert (result.run.dir / "bench.png").stat().st_size > 10_000
    found = series((result.run.dir / "metrics.prom").read_text())
    assert len(found["cluster_bench_output_tokens_per_second"]) == 4
    assert "cluster_rank_bytes_read_total" in found


def series(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


async def test_a_head_that_crashes_at_its_first_request_fails_the_smoke_and_bench_says_not_serving(
    twin_weights, state, capsys
):
    # Seed 000's serving-time failure: Triton's JIT dies at the first generation request.
    options = BootOptions(
        sim_scale="test",
        sim_weights_root=twin_weights,
        sim_env={"CLUSTER_SIM_FAULT": "rank=0:exit-at=ready:signature=triton-jit"},
    )
    inventory = load_inventory(builtin_simulated_inventory())
    result = await asyncio.wait_for(boot(RECIPE, inventory, options=options, store=RunStore()), 240)
    try:
        assert result.verdict.outcome is Outcome.SMOKE_FAILED, result.verdict.message
        assert result.diagnosis is None  # the boot itself went well: no postmortem of it
        verdict = json.loads((result.run.dir / "verdict.json").read_text())
        assert (verdict["outcome"], verdict["exit_code"]) == ("SMOKE_FAILED", 6)
        smoke = json.loads((result.run.dir / "smoke.json").read_text())
        assert not smoke["ok"] and smoke["served_models"] == ["mistral-large-4"]
        assert smoke["problem"] in verdict["summary"], (smoke, verdict)
        raw = (result.run.dir / "smoke-response.txt").read_text()
        assert "POST /v1/chat/completions {" in raw and smoke["problem"] in raw
        found = series((result.run.dir / "metrics.prom").read_text())
        assert "cluster_rank_bytes_read_total" in found
        # The head is gone now: a bench says the run does not serve, and asks nothing.
        code = await asyncio.to_thread(main, ["bench", result.run.id, "--concurrency", "1"])
        assert code == 2
        assert "does not answer" in capsys.readouterr().err
        assert not (result.run.dir / "bench.json").exists()
    finally:
        await stop_run(load_context(result.run))
