"""A miss predicted from read rates is warned only once a later sampling round still predicts
it. CI caught the barrier watcher warning four in-time ranks beside the straggler: their rates
dipped in one round on a busy host, and they finished in time. Other warnings (a stall, the page
cache, a lost node) say what has happened and are warned at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import orchestrator.supervisor.supervise as supervise
from orchestrator.models.run import Finding
from orchestrator.runstore import RunStore
from orchestrator.supervisor.supervise import SuperviseConfig, Supervisor
from orchestrator.supervisor.watchers import WatchConfig
from tests.unit.supervisor.specs import SPECS


def _late(watcher: str, rank: int) -> Finding:
    return Finding(watcher=watcher, severity="warning", rank=rank, message=f"rank {rank} late")


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[Supervisor, list]]:
    """A supervisor on a clock the test moves, whose watchers say what the test scripts."""
    now = [1000.0]
    said: list[list[Finding]] = []
    monkeypatch.setattr(supervise, "watch", lambda state, t, cfg: said.pop(0) if said else [])
    sup = Supervisor(
        RunStore(tmp_path).create(),
        SPECS,
        None,  # type: ignore[arg-type]  # _judge asks no runtime
        SuperviseConfig(watch=WatchConfig(), ready_url=None, sample_every_s=2.0),
        recipe="r",
        clock=lambda: now[0],
    )

    def step(findings: list[Finding], dt: float = 1.0) -> list[tuple[str, int | None]]:
        said.append(findings)
        sup._judge()
        now[0] += dt
        return [(w.watcher, w.rank) for w in sup.warnings]

    yield sup, [step]


def test_a_predicted_miss_seen_in_one_round_only_is_not_warned(judged) -> None:
    _, [step] = judged
    assert step([_late("barrier", 0), _late("barrier", 3)]) == []
    assert step([_late("barrier", 3)]) == []  # rank 0's dip is over
    assert step([_late("barrier", 3)]) == [("barrier", 3)]  # rank 3: still late a round later
    assert step([_late("barrier", 0), _late("barrier", 3)]) == [("barrier", 3)]  # starts over
    assert step([_late("barrier", 3)]) == [("barrier", 3)]  # once per rank


def test_a_prediction_that_holds_for_a_sampling_round_is_warned_once(judged) -> None:
    _, [step] = judged
    assert step([_late("vllm-ready", 2)]) == []
    assert step([_late("vllm-ready", 2)]) == []
    assert step([_late("vllm-ready", 2)]) == [("vllm-ready", 2)]
    assert step([_late("vllm-ready", 2)]) == [("vllm-ready", 2)]


def test_what_has_happened_is_warned_at_once(judged) -> None:
    _, [step] = judged
    assert step([_late("stall", 1)]) == [("stall", 1)]
