"""One factor scales engine time and sizes; engine defaults keep a real-time floor."""

from __future__ import annotations

import pytest

from orchestrator.simulator.timescale import (
    FLOOR_S,
    SCALES,
    Scale,
    ScaleError,
    parse_scale,
    resolve_scale,
)


def test_named_scales_numbers_and_fractions() -> None:
    assert parse_scale("test") == Scale(1 / 480, "test")
    assert parse_scale("1/80") == Scale(SCALES["default"], "default")
    assert parse_scale("0.5") == Scale(0.5, "custom")
    assert parse_scale("real").factor == 1.0


@pytest.mark.parametrize("text", ["fast", "0", "2", "1/0", "-0.1"])
def test_bad_scales_are_refused(text: str) -> None:
    with pytest.raises(ScaleError):
        parse_scale(text)


def test_the_flag_wins_over_the_environment_and_default_is_the_default() -> None:
    assert resolve_scale("test", {"CLUSTER_SIM_SCALE": "real"}).name == "test"
    assert resolve_scale(None, {"CLUSTER_SIM_SCALE": "real"}).name == "real"
    assert resolve_scale(None, {}).name == "default"


def test_test_scale_makes_stock_sglangs_barrier_window_one_second() -> None:
    assert parse_scale("test").seconds(480) == pytest.approx(1.0)


def test_sizes_scale_like_time_so_a_rate_is_unchanged() -> None:
    s = parse_scale("default")
    assert s.nbytes(76_250_000_000) == 953_125_000
    rate = 16e6
    assert s.nbytes(76_250_000_000) / rate == pytest.approx(s.seconds(76_250_000_000 / rate))


def test_engine_defaults_keep_their_floor_but_explicit_flags_are_scaled_exactly() -> None:
    s = parse_scale("test")
    assert s.timeout(600, explicit=False, floor="rendezvous") == FLOOR_S["rendezvous"]
    assert s.timeout(600, explicit=True, floor="rendezvous") == pytest.approx(1.25)
    assert s.timeout(5, explicit=False, floor="rendezvous") == 5  # never above the real value
    assert parse_scale("real").timeout(600, explicit=False, floor="collective") == 600
