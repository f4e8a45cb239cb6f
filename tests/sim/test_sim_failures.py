"""Failures travel as in the real stack: through closed sockets, windows and the engines' words."""

from __future__ import annotations

import threading
import time
import urllib.error
from pathlib import Path

import pytest

from orchestrator.runtime.node_sampler import mapped_weight_bytes, proc_io
from tests.engine_lines import by_id
from tests.sim.conftest import Cluster, RankProc, addr, free_port, post

pytestmark = pytest.mark.sim

BARRIER = by_id("sglang-barrier-unbalanced-loading").text.replace("TP rank 1 ", "TP rank {k} ")
GLOO_CLOSED = "Connection closed by peer ["


def seen_at(rank: RankProc, needle: str, timeout: float = 20.0) -> float:
    """When `needle` first showed in the rank's log (polled every 20 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in rank.text():
            return time.monotonic()
        time.sleep(0.02)
    raise AssertionError(f"rank {rank.rank}: no {needle!r}:\n{rank.text()}")


def loaded(pid: int) -> int:
    """What the node sampler measures of the child's reads: rchar (read()), or the resident pages
    of its weight-file mappings (mmap, the twin's default), whichever is larger."""
    rchar, _, readable = proc_io([pid])
    assert readable, "no /proc/PID/io"
    return max(rchar, mapped_weight_bytes([pid], {})[0])


def test_one_slow_rank_makes_the_others_fail_with_the_barrier_error_at_the_window(
    cluster: Cluster,
) -> None:
    # 720 s through the patched image's env knob, 1.5 s at the test scale.
    env = {
        "SGLANG_UNBALANCED_LOAD_TIMEOUT_S": "720",
        "CLUSTER_SIM_FAULT": "rank=2:slow-read=700KB/s",
    }
    ranks, _ = cluster.start("sglang", 4, env=env)
    assert "barrier window 720 s -> 1.50 s" in ranks[0].wait_for("[cluster-sim]")
    loaded = seen_at(ranks[1], "Load weight end.")
    failed = seen_at(ranks[1], "ValueError: TP rank 1 could finish")
    assert 1.2 <= failed - loaded <= 3.0, failed - loaded
    for k in (0, 1, 3):
        assert ranks[k].wait_exit(10) == 1
        text = ranks[k].text()
        assert BARRIER.format(k=k) in text
        assert text.index("Scheduler hit an exception") < text.index("ValueError")
        assert "Received sigquit from a child process" in text
    # The straggler never printed its load end before the window closed; like seed 002's rank 0
    # it keeps reading, then meets a barrier whose peers are gone, and ends too.
    straggler = ranks[2]
    assert "Load weight end." not in straggler.text()[: straggler.text().find("Failed to check")]
    assert "TCPStore server has shut down too early" in straggler.wait_for("should dump")
    assert straggler.wait_exit(15) == 1
    assert BARRIER.format(k=2) in straggler.text()


def test_a_missing_nccl_interface_fails_with_ncclss_text_and_takes_the_group_with_it(
    cluster: Cluster,
) -> None:
    bad = {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "NCCL_DEBUG": "WARN"}
    ranks, _ = cluster.start("sglang", 2, rank_env={1: bad})
    assert ranks[1].wait_exit() == 1
    text = ranks[1].text()
    assert "bootstrap.cc:45 NCCL WARN Bootstrap : no socket interface found" in text
    assert "torch.distributed.DistBackendError: NCCL error in:" in text
    assert text.rstrip().splitlines()[-2] == by_id("nccl-bootstrap-no-socket-interface").text
    # Rank 0 was creating the groups with it: Gloo's full mesh never forms.
    assert ranks[0].wait_exit() == 1
    assert by_id("gloo-connect-full-mesh-failed-sglang").text in ranks[0].text()


def test_a_missing_gloo_interface_fails_with_gloos_text(cluster: Cluster) -> None:
    ranks, _ = cluster.start("vllm", 1, env={"GLOO_SOCKET_IFNAME": "enP2p1s0f1np1"})
    assert ranks[0].wait_exit() == 1
    text = ranks[0].text()
    assert "ifa != nullptr. Unable to find address for: enP2p1s0f1np1" in text
    assert "WorkerProc failed to start." in text
    assert text.rstrip().endswith(by_id("vllm-engine-core-init-failed").text.split(") ", 1)[1])


SIGNATURE_CASES = [
    (
        "sglang",
        "exit-at=autotune:signature=trtllm-fmha",
        "flashinfer-trtllm-fmha-unsupported-architecture",
    ),
    ("sglang", "exit-at=warmup:signature=g1-scale-c", "sglang-fusedmoe-no-g1-scale-c"),
    ("sglang", "exit-at=kv:signature=sparse-mla", "sglang-flashinfer-sparse-mla-validator"),
    ("sglang", "exit-at=kv:signature=kv-budget", None),
    ("sglang", "exit-at=load", None),  # cuda-oom, halfway through the weights
    ("vllm", "exit-at=kv:signature=kv-budget", "vllm-estimated-max-model-length-seed002"),
    ("vllm", "exit-at=graph:signature=cuda-oom", None),
]
OWN_TEXT = {
    "exit-at=kv:signature=kv-budget": "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    "exit-at=load": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of",
    "exit-at=graph:signature=cuda-oom": "torch.OutOfMemoryError: CUDA out of memory.",
}


@pytest.mark.parametrize(("engine", "spec", "corpus_id"), SIGNATURE_CASES)
def test_each_failure_signature_ends_the_rank_with_its_real_text(
    cluster: Cluster, engine: str, spec: str, corpus_id: str | None
) -> None:
    ranks, _ = cluster.start(engine, 1, extra={0: ["--sim-fault", spec]})
    assert ranks[0].wait_exit() == 1
    text = ranks[0].text()
    expected = by_id(corpus_id).text if corpus_id else OWN_TEXT[spec]
    assert expected in text
    if engine == "sglang":
        assert text.index("Scheduler hit an exception: Traceback") < text.index(expected)
        assert text.rstrip().endswith("It usually means the child failed.")
        assert "fired up" not in text
    else:
        assert "Engine core initialization failed. See root cause above." in text
        assert "Application startup complete." not in text
    if spec == "exit-at=load":
        assert "Load weight begin." in text and "Load weight end." not in text


def test_exit_code_and_signal_options(cluster: Cluster) -> None:
    ranks, _ = cluster.start("sglang", 1, extra={0: ["--sim-fault", "exit-at=kv:code=3"]})
    assert ranks[0].wait_exit() == 3
    ranks, _ = cluster.start("vllm", 1, extra={0: ["--sim-fault", "exit-at=init:signal=KILL"]})
    assert ranks[0].wait_exit() == -9


def test_a_hang_stops_the_rank_and_its_reads_halfway(cluster: Cluster, weights: Path) -> None:
    ranks, _ = cluster.start("sglang", 1, extra={0: ["--sim-fault", "hang-at=load"]})
    rank = ranks[0]
    rank.wait_for("Load weight begin.")
    child = rank.child_pid()
    share = sum(p.stat().st_size for p in weights.glob("*.safetensors"))
    # Every byte the child loaded (by read(), its imports too): wait until it stops.
    last, stable_since, deadline = -1, time.monotonic(), time.monotonic() + 15
    while time.monotonic() < deadline and time.monotonic() - stable_since < 0.8:
        now = loaded(child)
        if now != last:
            last, stable_since = now, time.monotonic()
        time.sleep(0.1)
    assert time.monotonic() - stable_since >= 0.8, "the reads never stopped"
    assert share // 2 <= last < share  # halfway (plus its imports), never the whole share
    assert rank.proc.poll() is None and "Load weight end." not in rank.text()


def test_a_hog_really_allocates_in_the_worker_process(cluster: Cluster) -> None:
    ranks, _ = cluster.start("vllm", 1, extra={0: ["--sim-fault", "hog=256MiB:at=kv"]})
    ranks[0].wait_for("Available KV cache memory")
    status = Path(f"/proc/{ranks[0].child_pid()}/status").read_text()
    rss_kb = int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])
    assert rss_kb * 1024 >= 256 * 2**20


def test_a_dropped_peer_fails_the_others_through_the_closed_socket(cluster: Cluster) -> None:
    ranks, _ = cluster.start("sglang", 3, extra={2: ["--sim-fault", "drop-peer:at=kv"]})
    for k in (0, 1):
        assert ranks[k].wait_exit() == 1
        assert GLOO_CLOSED in ranks[k].text()
        assert "KV Cache is allocated" not in ranks[k].text()
    assert ranks[2].proc.poll() is None  # the dropped rank itself is still there, cut off


def test_killing_rank_0_fails_the_serving_ranks_at_once(cluster: Cluster) -> None:
    ranks, _ = cluster.start("vllm", 3)
    ranks[0].wait_for("Application startup complete.")
    for k in (1, 2):
        ranks[k].wait_for("Available KV cache memory")
    cluster.kill(ranks[0])
    killed = time.monotonic()
    for k in (1, 2):
        assert ranks[k].wait_exit(10) == 1
        assert time.monotonic() - killed < 5
        text = ranks[k].text()
        assert (
            f"RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] {GLOO_CLOSED}{addr(0)}]"
            in text
        )
        assert "WorkerProc hit an exception." in text


def test_killing_rank_0_mid_load_is_felt_at_the_barrier_as_in_seed_002(cluster: Cluster) -> None:
    env = {"SGLANG_UNBALANCED_LOAD_TIMEOUT_S": "7200", "CLUSTER_SIM_READ_RATE": "1MB/s"}
    ranks, _ = cluster.start("sglang", 3, env=env)
    ranks[1].wait_for("Load weight begin.")
    cluster.kill(ranks[0])
    # The read goes on (only the TCPStore heartbeat warns); the barrier then fails at once.
    assert 'Failed to check the "should dump" flag on TCPStore' in ranks[1].wait_for("should dump")
    assert ranks[1].wait_exit(15) == 1
    text = ranks[1].text()
    assert text.index("Load weight end.") < text.index(BARRIER.format(k=1))


def test_a_rank_that_never_joins_fails_both_sides_of_the_rendezvous(cluster: Cluster) -> None:
    port = free_port()
    timeout = ["--dist-timeout", "480"]  # 1 s at the test scale
    head, _ = cluster.start("sglang", 2, only=[0], port=port, extra={0: timeout})
    assert head[0].wait_exit() == 1
    assert (
        by_id("torch-dist-store-error-clients-joined").text.replace("601", "481") in head[0].text()
    )
    lone, _ = cluster.start("sglang", 2, only=[1], port=free_port(), extra={1: timeout})
    assert lone[0].wait_exit() == 1
    assert (
        "DistNetworkError: The client socket has timed out after 480000ms while trying to connect to (127.0.0.10, "
        in lone[0].text()
    )


def test_a_hung_rank_trips_the_nccl_watchdog_of_its_peers(cluster: Cluster) -> None:
    extra = {
        0: ["--dist-timeout", "480"],
        1: ["--dist-timeout", "480", "--sim-fault", "hang-at=kv"],
    }
    ranks, _ = cluster.start(
        "sglang", 2, extra=extra, env={"SGLANG_UNBALANCED_LOAD_TIMEOUT_S": "7200"}
    )
    assert ranks[0].wait_exit() == 1
    line = ranks[0].wait_for("Watchdog caught collective operation timeout")
    assert line.startswith("[rank0]:[E") and "Timeout(ms)=480000)" in line
    assert ranks[1].proc.poll() is None


def test_a_hang_while_serving_trips_sglangs_scheduler_watchdog(cluster: Cluster) -> None:
    ranks, serve = cluster.start(
        "sglang", 1, extra={0: ["--watchdog-timeout", "300", "--sim-fault", "hang-at=ready"]}
    )
    ranks[0].wait_for("fired up")
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            post(f"http://{addr(0)}:{serve}/v1/completions", {"prompt": "x"}, timeout=5)
        except (OSError, urllib.error.URLError) as exc:
            errors.append(exc)

    thread = threading.Thread(target=ask)
    thread.start()
    assert ranks[0].wait_exit() == 1
    thread.join(10)
    assert errors  # the request never got its answer
    assert by_id("sglang-scheduler-watchdog-timeout-new").text in ranks[0].text()


def test_a_worker_killed_before_ready_is_reported_by_each_engine(cluster: Cluster) -> None:
    slow = {"CLUSTER_SIM_READ_RATE": "2MB/s"}
    sglang, _ = cluster.start("sglang", 1, env=slow)
    vllm, _ = cluster.start("vllm", 1, env=slow)
    for rank in (sglang[0], vllm[0]):
        rank.wait_for("Load weight begin." if rank is sglang[0] else "Starting to load model")
        import os
        import signal

        os.kill(rank.child_pid(), signal.SIGKILL)  # what the OOM killer does to the fattest
        assert rank.wait_exit() == 1
    assert "Rank 0 scheduler is dead. Please check if there are relevant logs." in sglang[0].text()
    assert "Exit code: -9" in sglang[0].text()
    assert "Worker proc VllmWorker-0 died unexpectedly, shutting down executor." in vllm[0].text()


def test_a_taken_serve_port_fails_like_uvicorn(cluster: Cluster) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind((addr(0), 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        ranks, _ = cluster.start("sglang", 1, extra={0: ["--port", str(port)]})
        assert ranks[0].wait_exit() == 1
    assert (
        f"[Errno 98] error while attempting to bind on address ('{addr(0)}', {port}): address already in use"
        in ranks[0].text()
    )


def test_a_bad_fault_spec_is_a_usage_error(cluster: Cluster) -> None:
    ranks, _ = cluster.start("vllm", 1, extra={0: ["--sim-fault", "hang-at=barrier"]})
    assert ranks[0].wait_exit() == 2
    assert "vllm has no phase 'barrier'" in ranks[0].text()
