"""The testbed's Unix-socket probes (a daemon is up when its socket answers) and its fault
parser (every fault names its node first), without a testbed: a socket in tmp_path, argparse."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from orchestrator.testbed.cli import _build_parser
from orchestrator.testbed.probes import _docker_ping, _unix_connects


def answer_once(server: socket.socket, reply: bytes) -> threading.Thread:
    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(128)
            conn.sendall(reply)

    t = threading.Thread(target=serve)
    t.start()
    return t


def test_a_socket_that_answers_connects_and_pings_only_with_a_200(tmp_path: Path) -> None:
    path = tmp_path / "docker.sock"
    assert not _unix_connects(path) and not _docker_ping(path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(4)
        for reply, ok in ((b"HTTP/1.1 200 OK\r\n", True), (b"HTTP/1.1 500 Error\r\n", False)):
            t = answer_once(server, reply)
            assert _docker_ping(path) is ok
            t.join()
        assert _unix_connects(path)
    assert not _unix_connects(path)  # the file is left, nobody listens


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["link-down", "n1"], {"node": "n1", "net": "fabric", "side": "node"}),
        (["link-up", "n1", "mgmt"], {"node": "n1", "net": "mgmt"}),
        (["shape", "n2", "fabric", "100mbit"], {"node": "n2", "net": "fabric", "rate": "100mbit"}),
        (["unshape", "n2"], {"node": "n2", "net": None}),
        (["loss", "n3", "mgmt", "5"], {"node": "n3", "net": "mgmt", "percent": 5}),
        (["port-drop", "n4", "29500"], {"node": "n4", "port": 29500, "proto": "tcp"}),
        (["dockerd-stop", "n5"], {"node": "n5"}),
        (["docker-wrapper", "n6", "--failures", "2"], {"node": "n6", "failures": 2}),
        (["listener", "n7", "29500"], {"node": "n7", "port": 29500}),
    ],
)
def test_each_fault_parses_its_node_first(argv: list[str], want: dict[str, object]) -> None:
    a = vars(_build_parser().parse_args(["fault", *argv]))
    assert a["fault"] == argv[0]
    assert {k: a[k] for k in want} == want


def test_a_fault_on_an_unknown_network_is_refused() -> None:
    with pytest.raises(SystemExit):
        _build_parser().parse_args(["fault", "delay", "n1", "wan", "50ms"])
