"""`cluster sim make-weights` and `cluster sim twin`: the tools around the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli.main import main


def test_make_weights_writes_the_requested_size_and_shards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            ["sim", "make-weights", str(tmp_path / "w"), "--size", "2MB", "--shards", "3", "--json"]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["total_bytes"] == 2_000_000 and summary["shards"] == 3


def test_make_weights_can_size_the_weights_for_a_recipes_twin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # mistral-small4-1x-sglang: 66.4 GB for its one rank; at 1/100000, 664 kB.
    args = ["sim", "make-weights", str(tmp_path), "--recipe", "mistral-small4-1x-sglang"]
    assert main([*args, "--scale", "1/100000", "--shards", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total_bytes"] == 664_000


def test_make_weights_refuses_a_bad_size_and_a_full_directory(tmp_path: Path) -> None:
    assert main(["sim", "make-weights", str(tmp_path), "--size", "lots"]) == 2
    (tmp_path / "x").write_text("x")
    assert main(["sim", "make-weights", str(tmp_path), "--size", "1MB"]) == 2


def test_twin_prints_the_manifest_record(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "twin", "mistral-large4-8x-vllm", "--scale", "test", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["scale"] == "test" and record["recipe"] == "mistral-large4-8x-vllm"
    assert record["twin"]["entrypoint"][1:] == ["-m", "orchestrator.simulator", "vllm", "serve"]
    assert main(["sim", "twin", "mistral-large4-8x-vllm", "--scale", "fast"]) == 2
