"""The exec-readiness probe: what a `docker run` answer means, and the retry through the
lazy-unpack window (captured answers in tests/fixtures/image/exec_ready/, real containerd lines
from the engine-lines corpus)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.dockercli import DockerCli
from orchestrator.errors import CommandTimeout, NodeUnreachable
from orchestrator.models.inventory import Node
from orchestrator.probes.exec_ready import (
    ExecReadiness,
    Verdict,
    classify,
    exec_ready_argv,
    wait_exec_ready,
)
from tests.engine_lines import by_id
from tests.fake_transport import FakeReply, FakeTransport

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "image" / "exec_ready"
NODE = Node(name="spark-3", address="10.0.0.3", user="root", rank=3, fabric_iface="enp1s0f1np1")


def captured(case: str) -> tuple[int, str, str]:
    exit_file = FIXTURES / f"{case}.exit"
    stderr = FIXTURES / f"{case}.stderr"
    return (
        int(exit_file.read_text()) if exit_file.exists() else 0,
        (FIXTURES / f"{case}.stdout").read_text(),
        stderr.read_text() if stderr.exists() else "",
    )


@pytest.mark.parametrize(
    ("case", "verdict", "evidence"),
    [
        ("ok", Verdict.ready, ""),
        ("lazy-wrapper", Verdict.lazy, "stat /bin/sh: no such file or directory"),
        ("missing-entrypoint", Verdict.lazy, "stat /nonexistent: no such file or directory"),
        ("no-such-image", Verdict.failed, "No such image: ctb/none:1"),
        ("daemon-down", Verdict.failed, "Cannot connect to the Docker daemon"),
    ],
)
def test_a_captured_docker_run_answer_is_ready_lazy_or_failed(
    case: str, verdict: Verdict, evidence: str
) -> None:
    got, line = classify(*captured(case))
    assert got is verdict
    assert evidence in line


@pytest.mark.parametrize(
    "line_id",
    ["containerd-rootfs-not-ready-stat-no-such-file"],
)
def test_the_containerd_rootfs_not_ready_line_from_the_corpus_is_a_lazy_unpack(
    line_id: str,
) -> None:
    verdict, evidence = classify(
        125, "", "docker: Error response from daemon: " + by_id(line_id).text
    )
    assert verdict is Verdict.lazy
    assert "stat /server" in evidence


@pytest.mark.parametrize(
    "stderr",
    [
        "docker: Error response from daemon: failed to create containerd task: unknown",
        "docker: Error response from daemon: parent snapshot sha256:70798fd does not exist: not found.",
    ],
)
def test_each_named_lazy_unpack_signature_is_retried(stderr: str) -> None:
    assert classify(125, "", stderr)[0] is Verdict.lazy


def test_an_exec_format_error_inside_an_oci_runtime_failure_fails_at_once() -> None:
    stderr = (
        "docker: Error response from daemon: failed to create shim task: OCI runtime create "
        'failed: runc create failed: unable to start container process: exec: "/bin/sh": exec '
        "format error: unknown."
    )
    assert classify(126, "", stderr)[0] is Verdict.failed


def test_the_probe_never_pulls_never_keeps_the_container_and_names_it_for_cleanup() -> None:
    argv = exec_ready_argv("img:1", docker=DockerCli("unix:///d.sock"), name="x")
    assert argv[:4] == ("docker", "--host", "unix:///d.sock", "run")
    assert "--rm" in argv
    assert argv[argv.index("--pull") + 1] == "never"
    assert argv[argv.index("--name") + 1] == "x"
    assert argv[argv.index("--entrypoint") + 1] == "/bin/sh"
    assert argv[-3:] == ("img:1", "-c", "true")


def _scripted(replies: list[FakeReply]) -> tuple[FakeTransport, list[tuple[str, ...]]]:
    runs: list[tuple[str, ...]] = []

    def handler(argv: tuple[str, ...], stdin: bytes | None) -> FakeReply:
        runs.append(argv)
        if "run" in argv:
            return replies.pop(0) if len(replies) > 1 else replies[0]
        return FakeReply()

    return FakeTransport(NODE, handler), runs


LAZY = FakeReply(exit_status=125, stderr=captured("lazy-wrapper")[2])


async def test_a_node_that_fails_like_a_lazy_unpack_twice_is_ready_after_three_tries() -> None:
    transport, runs = _scripted([LAZY, LAZY, FakeReply()])
    got = await wait_exec_ready(transport, "img:1", window_s=10, initial_wait_s=0.01)
    assert got.ready and got.tries == 3
    assert got.last_error is None
    assert "stat /bin/sh" in (got.first_error or "")
    assert got.summary().startswith("ready after 3 tries")
    assert len({argv[argv.index("--name") + 1] for argv in runs}) == 3  # a fresh name per try


async def test_a_lazy_unpack_longer_than_the_window_gives_up_with_the_last_error() -> None:
    transport, _ = _scripted([LAZY])
    got = await wait_exec_ready(
        transport, "img:1", window_s=0.3, initial_wait_s=0.02, max_wait_s=0.05
    )
    assert not got.ready and got.gave_up == "window"
    assert got.tries >= 2
    assert "stat /bin/sh: no such file or directory" in (got.last_error or "")
    assert got.summary().startswith("still failing after")


async def test_a_missing_image_fails_after_one_try() -> None:
    code, out, err = captured("no-such-image")
    transport, runs = _scripted([FakeReply(exit_status=code, stdout=out, stderr=err)])
    got = await wait_exec_ready(transport, "ctb/none:1", window_s=30, initial_wait_s=0.01)
    assert not got.ready and got.tries == 1 and got.gave_up == "fatal"
    assert "No such image" in (got.last_error or "")
    assert len(runs) == 1


async def test_a_try_that_hangs_is_timed_out_its_container_removed_and_retried() -> None:
    calls: list[tuple[str, ...]] = []

    def handler(argv: tuple[str, ...], stdin: bytes | None) -> FakeReply:
        calls.append(argv)
        if "run" in argv and sum("run" in c for c in calls) == 1:
            raise CommandTimeout(node=NODE.name, argv=list(argv), timeout_s=1.0)
        return FakeReply()

    got = await wait_exec_ready(FakeTransport(NODE, handler), "img:1", initial_wait_s=0.01)
    assert got.ready and got.tries == 2
    removed = [c for c in calls if "rm" in c and "-f" in c]
    assert len(removed) == 1
    first_name = calls[0][calls[0].index("--name") + 1]
    assert removed[0][-1] == first_name


async def test_a_node_that_cannot_be_reached_raises_its_own_error() -> None:
    transport = FakeTransport(NODE, lambda argv, stdin: FakeReply())
    transport.connect_error = NodeUnreachable("refused", node=NODE.name, reason="refused")
    with pytest.raises(NodeUnreachable):
        await wait_exec_ready(transport, "img:1", window_s=1)


def test_a_readiness_answer_is_a_frozen_model_that_serialises() -> None:
    r = ExecReadiness(node="n", image="i", ready=True, tries=1, seconds=0.4)
    assert r.model_dump(mode="json")["ready"] is True
    assert r.summary() == "ready after 1 try, 0.4 s"
