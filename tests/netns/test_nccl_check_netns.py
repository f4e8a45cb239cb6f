"""`nccl-check` on the testbed: eight real containers, one per node, a real torch.distributed
all-reduce over Gloo across the eight namespaces' fabric interfaces (CPU torch, no GPU).

Each container is the twin's busybox image running the controller's Python (and its torch)
bind-mounted read-only, with exactly the boot's docker options, per-host env and rendezvous.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.inventory import load_inventory
from orchestrator.nccl_check import NcclCheckOptions, NcclCheckReport, run_nccl_check
from orchestrator.runstore import RunStore
from orchestrator.testbed import Testbed
from orchestrator.transport import ConnectOptions
from tests.netns.test_preflight_netns import make_weights, restore, twin

pytestmark = [pytest.mark.netns, pytest.mark.timeout(420)]

torch = pytest.importorskip("torch", reason="nccl-check needs CPU torch: pip install torch==2.13.0")
PYTHON = str(Path(sys.prefix) / "bin" / "python")


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_weights(tmp_path_factory)


@pytest.fixture
def tb(clean_testbed: Testbed, testbed_image: str) -> Iterator[Testbed]:
    yield clean_testbed
    restore(clean_testbed)


def check(
    tb: Testbed, weights: Path, *, timeout_s: float, run_dir: Path | None = None
) -> tuple[NcclCheckReport, float]:
    inventory = load_inventory(tb.inventory)
    run = RunStore(run_dir).create() if run_dir is not None else None
    options = NcclCheckOptions(timeout_s=timeout_s, startup_s=150, python=PYTHON, iters=3)
    started = time.monotonic()
    report = asyncio.run(
        run_nccl_check(
            twin(weights), inventory, ConnectOptions(connect_timeout_s=10), options, run=run
        )
    )
    return report, time.monotonic() - started


def no_check_containers_left(tb: Testbed) -> bool:
    return all(
        not tb.docker(
            nd, "ps", "-aq", "--filter", "label=cluster.purpose=nccl-check"
        ).stdout.strip()
        for nd in tb.nodes
    )


def test_eight_ranks_join_over_gloo_on_the_fabric_interfaces_and_all_reduce_the_right_sum(
    tb: Testbed, weights_dir: Path, tmp_path: Path
) -> None:
    report, elapsed = check(tb, weights_dir, timeout_s=90, run_dir=tmp_path / "runs")
    assert report.ok, [
        (r.rank, r.start_error, r.log.error, r.last_lines[-3:]) for r in report.ranks
    ]
    assert report.backend == "gloo"
    assert report.head_addr == tb.node(0).fab_addr
    for nd, rank in zip(tb.nodes, report.ranks, strict=True):
        assert rank.node == nd.name and rank.address == nd.fab_addr and rank.iface == nd.fab_iface
        assert rank.log.joined and rank.log.sum == 36.0 and rank.log.sum_ok
        assert rank.log.transport == "gloo/tcp"
        assert len(rank.log.bandwidth) == 3 and all(b.busbw_gbps > 0 for b in rank.log.bandwidth)
        assert rank.exit_code == 0
    assert no_check_containers_left(tb)
    runs = list((tmp_path / "runs").iterdir())
    assert (runs[0] / "nccl-check.json").exists() and (
        runs[0] / "rank-3" / "nccl-check.log"
    ).exists()
    bw = {b.bytes: round(b.busbw_gbps, 4) for b in report.ranks[0].log.bandwidth}
    print(f"\nnccl-check, 8 ranks over Gloo: {elapsed:.1f} s in all; rank 0 busbw GB/s {bw}")


def test_a_cut_fabric_link_fails_within_the_timeout_and_names_that_rank(
    tb: Testbed, weights_dir: Path
) -> None:
    tb.cut_link(3, "fabric")
    timeout = 30.0
    report, elapsed = check(tb, weights_dir, timeout_s=timeout)
    assert not report.ok
    culprits = report.culprits()
    assert [r.rank for r in culprits] == [3], [
        (r.rank, r.log.stage, r.log.error) for r in report.ranks
    ]
    rank3 = culprits[0]
    assert not rank3.log.reached_store and rank3.log.error_stage == "store"
    assert rank3.last_lines and any("NCCLCHECK" in line for line in rank3.last_lines)
    others = [r for r in report.ranks if r.rank != 3]
    assert all(r.log.reached_store and not r.log.joined for r in others)
    assert any(r.log.missing_ranks == (3,) for r in others)
    # within its timeout: the ranks' own timeout plus container start and `import torch`
    assert elapsed < timeout + 150
    assert no_check_containers_left(tb)
    print(f"\nnccl-check with node 3's fabric cut: failed in {elapsed:.1f} s, naming rank 3")
