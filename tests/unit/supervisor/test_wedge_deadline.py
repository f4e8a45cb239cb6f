"""Issue 27's promise, on a fake clock: a head that wedges is named WEDGED within
timeouts.wedge + 30 s, whatever the wedge and wherever the hang falls in the canary's period.

The head loop is replayed as `ServingWatch._head_loop` runs it: /health, the canary (blocking
until it answers or its timeout), then /metrics; the next ask a canary period after the last
began (or at once when the ask took longer). The watch judges every second."""

from __future__ import annotations

import pytest

from orchestrator.recipes import resolve_recipe
from orchestrator.run.watch import serve_config
from orchestrator.supervisor.serving import (
    CanaryResult,
    EngineReading,
    ServeWatchConfig,
    ServingState,
    watch_wedge,
)

ANSWER_S = 0.05  # a healthy canary's latency


def named_at(cfg: ServeWatchConfig, hang: float, first_ask: float) -> float:
    """When the watch first names WEDGED for a head that hangs at `hang` (requests sent from
    then on never answer; /health keeps saying 200)."""
    sv = ServingState(ready_at=0.0)
    generated = 0.0
    ask, tick = first_ask, 0.0
    pending: list[tuple[float, CanaryResult, EngineReading]] = []  # (noted at, ...)
    while tick < hang + 3600:
        while ask <= tick + 1.0:  # the asks that begin before the next judgement
            if ask < hang:
                generated += cfg.canary_max_tokens
                took, canary = ANSWER_S, CanaryResult(ask, ANSWER_S, True)
                running = 0.0
            else:
                took, canary = cfg.canary_timeout_s, CanaryResult(ask, None, True, "timed out")
                running = 1.0
            reading = EngineReading(ask + took, running, 0.0, generated)
            pending.append((ask + took, canary, reading))
            ask += max(cfg.canary_every_s, took)
        tick += 1.0
        for noted in [p for p in pending if p[0] <= tick]:
            pending.remove(noted)
            sv.note_canary(noted[1])
            sv.note_engine(noted[2])
        if watch_wedge(sv, tick, cfg):
            return tick
    raise AssertionError("never named")


@pytest.mark.parametrize("wedge", [2.0, 5.0, 10.0, 30.0, 120.0])
def test_a_wedge_is_named_within_timeouts_wedge_plus_30_s_wherever_the_hang_falls(
    wedge: float,
) -> None:
    recipe = resolve_recipe("mistral-large4-8x-sglang")
    timeouts = recipe.timeouts.model_copy(update={"wedge": wedge})
    cfg = serve_config(recipe.model_copy(update={"timeouts": timeouts}))
    assert cfg.wedge_s == wedge and cfg.canary_timeout_s <= wedge
    hang = 1000.0
    worst = max(
        named_at(cfg, hang, first_ask=offset / 4) - hang
        for offset in range(int(cfg.canary_every_s * 4))
    )
    assert worst <= wedge + 30.0, f"named {worst:.0f} s after the hang (wedge {wedge:g} s)"
    assert worst >= min(wedge, cfg.canary_timeout_s)  # never before the window


def test_the_canarys_timeout_is_the_default_under_a_long_wedge() -> None:
    recipe = resolve_recipe("mistral-large4-8x-sglang")
    assert serve_config(recipe).canary_timeout_s == ServeWatchConfig.canary_timeout_s
