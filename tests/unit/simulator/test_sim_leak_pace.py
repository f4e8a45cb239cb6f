"""The simulator's `leak=RATE` serving fault is paced by the clock: a tick that comes late (a
starved CI host) catches up, so a drill's configured rate is the rate the node sees."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from orchestrator.simulator.faults import parse_faults
from orchestrator.simulator.nodeview import ENV_NODE_DIR
from orchestrator.simulator.runner import Rank

MB = 10**6


@pytest.fixture(autouse=True)
def _in_a_container(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_NODE_DIR, raising=False)  # real pages, as in a container


def _leak(leaked: list[bytearray], running_s: float, spec: str) -> int:
    (fault,) = parse_faults(spec)
    Rank._serving_fault(SimpleNamespace(_leaked_bytes=0), fault, leaked, running_s)  # type: ignore[arg-type]
    return sum(len(b) for b in leaked)


def test_late_ticks_catch_up_to_the_configured_rate() -> None:
    leaked: list[bytearray] = []
    spec = "rank=3:leak=40MB/s:after=1:max=200MB"
    assert _leak(leaked, 0.0, spec) == 10 * MB  # the first tick: a quarter second's worth
    assert _leak(leaked, 0.25, spec) == 10 * MB  # on time: nothing owed yet
    assert _leak(leaked, 2.0, spec) == 80 * MB  # a tick 1.75 s late catches up: 40 MB/s x 2 s
    assert _leak(leaked, 60.0, spec) == 200 * MB  # and never past max=
