"""The testbed's Unix-socket probes (a daemon is up when its socket answers), its fault parser
(every fault names its node first) and its docker hook, without a testbed: a socket in
tmp_path, argparse, the hook run by sh over a fake docker."""

from __future__ import annotations

import socket
import subprocess
import threading
from pathlib import Path

import pytest

from orchestrator.testbed.cli import _build_parser
from orchestrator.testbed.errors import TestbedError
from orchestrator.testbed.faults import docker_hook_script
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


def test_the_docker_hook_runs_the_tests_shell_before_its_subcommand_only(tmp_path: Path) -> None:
    """`Testbed.hook_docker`'s wrapper: the hook runs before `docker run` (after global options
    such as -H), never before another subcommand, and the real docker gets every argument."""
    real = tmp_path / "real-docker"
    real.write_text('#!/bin/sh\necho "real: $*"\n')
    real.chmod(0o755)
    hooked = tmp_path / "docker"
    hooked.write_text(docker_hook_script("run", f"echo hooked >>{tmp_path / 'log'}", str(real)))
    hooked.chmod(0o755)

    def call(*args: str) -> str:
        return subprocess.run(
            [str(hooked), *args], capture_output=True, text=True, check=True
        ).stdout

    assert (
        call("-H", "unix:///x.sock", "run", "--rm", "img")
        == "real: -H unix:///x.sock run --rm img\n"
    )
    assert call("ps", "-a") == "real: ps -a\n"
    assert call("--log-level", "debug", "images") == "real: --log-level debug images\n"
    assert (tmp_path / "log").read_text() == "hooked\n"  # once: before `run` alone
    with pytest.raises(TestbedError):
        docker_hook_script("run; rm -rf /", ":")
