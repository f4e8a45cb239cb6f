"""Every shipped recipe's twin boots under the simulator with its own flags, env and rendezvous."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.recipes import list_recipes
from orchestrator.simulator import launch
from orchestrator.simulator.twin import make_twin
from tests.sim.conftest import BASE, free_port

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("name", [r.name for r in list_recipes()])
def test_the_twin_of_each_recipe_boots_to_ready(name: str, tmp_path: Path, weights: Path) -> None:
    real = next(r for r in list_recipes() if r.name == name)
    twin = make_twin(real, "test", python=sys.executable, weights_dir=str(weights))
    ranks = launch.start_local(
        twin, tmp_path, base_addr=BASE, head_port=free_port(), serve_port=free_port()
    )
    try:
        outcome = launch.wait_ready(ranks, twin.engine, 45)
        assert outcome.ready, (outcome, [r.log.read_text() for r in ranks])
        text = ranks[0].log.read_bytes().decode()
        # The factor the twin carries is the one the simulator runs with.
        assert "scale=test factor=0.00208333" in text
        if real.entrypoint[-1] == "sglang.launch_server":
            assert "'python -m sglang.launch_server' is still supported" in text
        if "SGLANG_UNBALANCED_LOAD_TIMEOUT_S" in real.env:
            assert f"barrier window 7200 s -> {twin.timeouts.barrier:.2f} s" in text
    finally:
        launch.stop_local(ranks)
    assert all(r.proc.poll() is not None for r in ranks)


def test_cluster_sim_run_rehearses_a_boot_and_asks_it_a_question(
    tmp_path: Path, weights: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([
        "sim", "run", "mistral-small4-1x-vllm", "--weights", str(weights), "--scale", "test",
        "--logs", str(tmp_path), "--head-port", str(free_port()), "--serve-port",
        str(free_port()), "--base-addr", BASE, "--timeout", "30", "--json",
    ])  # fmt: skip
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["ready"] and result["ranks"] == 1
    assert result["answer"].startswith("This is the vllm simulator")
    assert (tmp_path / "rank-0.log").exists()


def test_cluster_sim_run_reports_a_failed_boot_with_exit_6(tmp_path: Path, weights: Path) -> None:
    code = main([
        "sim", "run", "mistral-small4-1x-sglang", "--weights", str(weights),
        "--logs", str(tmp_path), "--head-port", str(free_port()), "--serve-port",
        str(free_port()), "--base-addr", BASE, "--timeout", "30",
        "--fault", "exit-at=kv:signature=kv-budget",
    ])  # fmt: skip
    assert code == 6
    assert "Not enough memory" in (tmp_path / "rank-0.log").read_text()
