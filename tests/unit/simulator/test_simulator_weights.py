"""Simulated weights: the directory layout, each rank's share, the pacing."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from orchestrator.simulator.weights import (
    Pacer,
    WeightsError,
    find_weights,
    load_info,
    make_weights,
)


def test_make_weights_writes_shards_an_index_and_a_config(tmp_path: Path) -> None:
    info = make_weights(tmp_path / "w", 1000, 3, architecture="X", quant=None)
    names = sorted(p.name for p in (tmp_path / "w").iterdir())
    assert names == [
        "config.json",
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
    ]
    assert info.total_bytes == 1000 and info.architecture == "X" and info.quant is None
    index = json.loads((tmp_path / "w" / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == 1000
    assert set(index["weight_map"].values()) == {p.name for p in info.shards}
    # Random bytes: two shards are not the same.
    assert info.shards[0].read_bytes()[:300] != info.shards[1].read_bytes()[:300]


def test_ranks_split_every_shard_without_gap_or_overlap(tmp_path: Path) -> None:
    info = make_weights(tmp_path, 10_007, 4, force=True)
    shares = [info.share(rank, 3) for rank in range(3)]
    for i, path in enumerate(info.shards):
        pieces = [share[i] for share in shares]
        assert all(p[0] == path for p in pieces)
        ends = [(offset, offset + length) for _, offset, length in pieces]
        assert ends[0][0] == 0 and ends[-1][1] == path.stat().st_size
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ends))
    assert sum(info.share_bytes(r, 3) for r in range(3)) == 10_007


def test_a_directory_without_shards_fails_with_the_loaders_words(tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match="Cannot find any model weights with"):
        load_info(tmp_path)


def test_an_absent_model_path_falls_back_to_the_simulator_weights_dir(tmp_path: Path) -> None:
    make_weights(tmp_path / "w", 100, 1)
    info = find_weights("/models/not/here", {"CLUSTER_SIM_MODEL_DIR": str(tmp_path / "w")})
    assert info.directory == tmp_path / "w"
    with pytest.raises(WeightsError, match="make-weights"):
        find_weights("/models/not/here", {})


def test_make_weights_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    make_weights(tmp_path, 100, 1, force=True)
    with pytest.raises(WeightsError, match="not empty"):
        make_weights(tmp_path, 100, 1)


def test_the_pacer_holds_reads_to_the_rate() -> None:
    pacer = Pacer(1000.0, clock=100.0)
    assert pacer.delay(500, now=100.1) == pytest.approx(0.4)
    assert pacer.delay(500, now=101.0) == 0.0
    assert Pacer(0.0, clock=0.0).delay(10**9, now=0.0) == 0.0
