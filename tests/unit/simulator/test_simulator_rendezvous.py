"""The rendezvous and its collectives over real loopback sockets, in threads of one process."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from orchestrator.simulator.rendezvous import (
    Group,
    PeerLost,
    RendezvousError,
    SyncTimeout,
    gloo_interface_problem,
    interfaces,
    nccl_interface_problem,
    nccl_matches,
)


def free_port(addr: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


def join_all(groups: list[Group], timeout: float = 5.0) -> None:
    errors: list[BaseException] = []

    def one(g: Group) -> None:
        try:
            g.join(timeout, 600)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(g,)) for g in groups]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors


def test_three_ranks_meet_and_pass_a_collective() -> None:
    port = free_port()
    groups = [Group(r, 3, "127.0.0.1", port) for r in range(3)]
    try:
        join_all(groups)
        done: list[int] = []

        def meet(g: Group) -> None:
            g.sync("kv", 5.0)
            done.append(g.rank)

        threads = [threading.Thread(target=meet, args=(g,)) for g in groups]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert sorted(done) == [0, 1, 2]
    finally:
        for g in groups:
            g.close()


def test_a_closed_head_is_felt_by_the_others_at_once() -> None:
    port = free_port()
    groups = [Group(r, 2, "127.0.0.1", port) for r in range(2)]
    try:
        join_all(groups)
        groups[0].drop()
        started = time.monotonic()
        with pytest.raises(PeerLost) as lost:
            groups[1].sync("kv", 10.0)
        assert time.monotonic() - started < 2
        assert lost.value.peer.port == port
    finally:
        for g in groups:
            g.close()


def test_a_missing_rank_times_the_collective_out() -> None:
    port = free_port()
    groups = [Group(r, 2, "127.0.0.1", port) for r in range(2)]
    try:
        join_all(groups)
        with pytest.raises(SyncTimeout):
            groups[0].sync("barrier", 0.3)
    finally:
        for g in groups:
            g.close()


def test_a_rank_that_never_comes_fails_both_sides_with_torchs_words() -> None:
    port = free_port()
    head = Group(0, 2, "127.0.0.1", port)
    with pytest.raises(RendezvousError) as exc:
        head.join(0.3, 600)
    assert exc.value.lines == [
        "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. "
        "1/2 clients joined."
    ]
    client = Group(1, 2, "127.0.0.1", free_port())
    with pytest.raises(RendezvousError, match="The client socket has timed out after 600000ms"):
        client.join(0.3, 600)


def test_nccl_ifname_semantics_prefix_exact_and_exclude() -> None:
    names = ["lo", "eth0", "eth1", "docker0"]
    assert nccl_matches("eth", names) == ["eth0", "eth1"]
    assert nccl_matches("=eth", names) == []
    assert nccl_matches("=eth1", names) == ["eth1"]
    assert nccl_matches("^docker,lo", names) == ["eth0", "eth1"]


def test_interfaces_are_checked_on_this_node() -> None:
    assert "lo" in interfaces()
    assert gloo_interface_problem({"GLOO_SOCKET_IFNAME": "lo"}) is None
    assert gloo_interface_problem({}) is None
    assert "Unable to find address for: enp1s0f1np1" in (
        gloo_interface_problem({"GLOO_SOCKET_IFNAME": "enp1s0f1np1"}) or ""
    )
    assert not nccl_interface_problem({"NCCL_SOCKET_IFNAME": "lo"})
    assert nccl_interface_problem({"NCCL_SOCKET_IFNAME": "enP2p1s0f1np1"})
