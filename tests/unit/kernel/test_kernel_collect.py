"""The kernel collector (issue 28): one node command, a position at boot start, the window since
it byte-exact, bounded in size and time, a missing privilege said once with its fix."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from orchestrator.kernel.collect import collect_kernel_logs, read_window, since
from orchestrator.kernel.command import ENV_FILE, HINT_DENIED, argv, parse_answer
from orchestrator.kernel.model import KERNEL_LOG
from orchestrator.kernel.position import note_positions
from orchestrator.models.inventory import Node
from orchestrator.runstore import Run, RunStore
from orchestrator.transport.base import Transport
from orchestrator.transport.local import LocalTransport
from tests.engine_lines import by_id
from tests.fake_transport import FakeReply, FakeTransport


def _node(name: str) -> Node:
    return Node(name=name, address="127.0.0.1", user="root", rank=0, fabric_iface="lo")


def _run(tmp_path: Path) -> Run:
    return RunStore(tmp_path / "runs").create()


def test_the_node_command_is_one_fixed_script_with_every_value_an_argument(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV_FILE, raising=False)
    a = argv("spark-1", "position")
    b = argv("spark-2; rm -rf /", "collect", max_bytes=100)
    assert a[:4] == ["sh", "-c", a[2], "sh"] and a[2] == b[2]  # the script never changes
    assert a[4:] == ["position", "", "", "", "0", "0"]
    monkeypatch.setenv(ENV_FILE, "/fixtures/{node}.log")
    assert argv("spark-1", "position")[5] == "/fixtures/spark-1.log"


def test_a_fixture_file_window_is_exactly_the_bytes_appended_after_the_position(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    monkeypatch.setenv(ENV_FILE, str(logs / "{node}.log"))
    before = by_id("kernel-global-oom-killed-process").text.encode() + b"\n"
    after = (
        by_id("mlx5-core-link-down").text.encode()
        + b"\n\xff\xfe raw byte\r\n"  # not UTF-8: must survive as is
        + by_id("nvrm-gpu-fallen-off-the-bus-no-xid").text.encode()
        + b"\n"
    )
    for n in ("a", "b"):
        (logs / f"{n}.log").write_bytes(before)
    run = _run(tmp_path)
    transports: dict[str, Transport] = {n: LocalTransport(_node(n)) for n in ("a", "b")}
    positions = asyncio.run(note_positions(run, transports))
    assert {n: (p.source, p.offset_bytes) for n, p in positions.items()} == {
        "a": ("file", len(before)),
        "b": ("file", len(before)),
    }
    with (logs / "a.log").open("ab") as fh:
        fh.write(after)
    windows = asyncio.run(collect_kernel_logs(run, transports))
    assert (run.dir / "nodes" / "a" / KERNEL_LOG).read_bytes() == after
    assert (run.dir / "nodes" / "b" / KERNEL_LOG).read_bytes() == b""
    a = windows["a"]
    assert (a.bytes, a.lines, a.truncated, a.error) == (len(after), 3, False, None)
    assert a.clock is not None and abs(a.clock.offset_s) < 1.0  # the same clock: ~0
    saved = read_window(run, "a")
    assert saved is not None and saved.position.offset_bytes == len(before)
    # each fixture stands for its node's own kernel: never "one kernel shared by both"
    assert saved.position.boot_id is None


def test_the_window_is_bounded_in_size_keeping_the_newest_whole_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_FILE, str(tmp_path / "{node}.log"))
    (tmp_path / "a.log").write_bytes(b"")
    run = _run(tmp_path)
    transports: dict[str, Transport] = {"a": LocalTransport(_node("a"))}
    asyncio.run(note_positions(run, transports))
    lines = [f"[{i:6d}.000000] line {i}\n".encode() for i in range(1, 2001)]
    (tmp_path / "a.log").write_bytes(b"".join(lines))
    windows = asyncio.run(collect_kernel_logs(run, transports, max_bytes=1000))
    kept = (run.dir / "nodes" / "a" / KERNEL_LOG).read_bytes()
    assert windows["a"].truncated and len(kept) < 1000
    assert kept.endswith(lines[-1]) and kept.split(b"\n")[0] + b"\n" in lines


@pytest.mark.skipif(os.geteuid() != 0, reason="reads this machine's dmesg as root")
def test_this_machines_own_kernel_is_read_through_dmesg_or_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_FILE, raising=False)
    run = _run(tmp_path)
    transports: dict[str, Transport] = {"self": LocalTransport(_node("self"))}
    positions = asyncio.run(note_positions(run, transports))
    assert positions["self"].source in ("journal", "dmesg"), positions
    assert positions["self"].boot_id
    windows = asyncio.run(collect_kernel_logs(run, transports))
    assert windows["self"].error is None
    assert (run.dir / "nodes" / "self" / KERNEL_LOG).is_file()


def _denied(argv_: tuple[str, ...], stdin: bytes | None) -> FakeReply:
    if argv_[:1] == ("date",):
        return FakeReply(stdout=f"{time.time():.6f}\n")
    return FakeReply(
        stdout="boot_id=x\nuptime=10.0\nnow=100.0\nsource=denied\n"
        "error=dmesg: read kernel buffer failed: Operation not permitted\n"
        "journal=No journal files were opened due to insufficient permissions.\n"
    )


def test_a_missing_privilege_is_said_once_with_how_to_grant_it_and_loses_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(tmp_path)
    transports: dict[str, Transport] = {
        n: FakeTransport(_node(n), _denied) for n in ("spark-0", "spark-1")
    }
    positions = asyncio.run(note_positions(run, transports))
    p = positions["spark-0"]
    assert p.source == "denied" and p.hint == HINT_DENIED
    assert "Operation not permitted" in (p.error or "") and "insufficient" in (p.error or "")
    windows = asyncio.run(collect_kernel_logs(run, transports))
    assert windows["spark-1"].hint == HINT_DENIED
    assert not (run.dir / "nodes" / "spark-1" / KERNEL_LOG).exists()
    said = capsys.readouterr()
    text = said.out + said.err
    assert text.count("kernel log not readable on spark-0, spark-1") == 1  # once a run
    assert "systemd-journal" in text and "dmesg_restrict" in text


class _Silent(Transport):
    """A node that takes every command and never answers (a hung sshd)."""

    def __init__(self, node: Node) -> None:
        self._node = node

    async def _execute(
        self, argv: tuple[str, ...], timeout_s: float | None, stdin: bytes | None
    ) -> tuple[int | None, str, str]:
        await asyncio.sleep(3600)
        return 0, "", ""

    def stream_chunks(self, argv):  # type: ignore[no-untyped-def,override]
        raise NotImplementedError


def test_a_node_that_never_answers_cannot_hold_up_the_verdict(tmp_path: Path) -> None:
    run = _run(tmp_path)
    transports: dict[str, Transport] = {"hung": _Silent(_node("hung"))}
    began = time.monotonic()
    positions = asyncio.run(note_positions(run, transports, deadline_s=0.5))
    windows = asyncio.run(collect_kernel_logs(run, transports, deadline_s=0.5))
    assert time.monotonic() - began < 10.0  # two deadlines of 0.5 s (+1 s each), generously
    assert "no answer within" in (positions["hung"].error or "")
    assert "no answer within" in (windows["hung"].error or "")


def test_dmesg_lines_after_the_position_are_kept_and_a_wrapped_buffer_is_noticed() -> None:
    body = b"[  1.000000] old\n[  5.500000] new\n  continued\n[  6.000000] newer\n"
    kept, wrapped = since(body, 5.0)
    assert kept == b"[  5.500000] new\n  continued\n[  6.000000] newer\n" and not wrapped
    assert since(body, 0.5)[1] is True  # the oldest line kept is after the position


def test_an_answer_that_does_not_decode_is_an_error_not_a_crash() -> None:
    ans = parse_answer("source=file\n---\n!!not base64!!\n")
    assert ans.body is None and ans.problem and "decode" in ans.problem


def test_a_node_the_supervisor_just_lost_is_not_asked_and_keeps_its_position(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_FILE, str(tmp_path / "{node}.log"))
    (tmp_path / "lost.log").write_bytes(b"")
    run = _run(tmp_path)
    asyncio.run(note_positions(run, {"lost": LocalTransport(_node("lost"))}))
    windows = asyncio.run(
        collect_kernel_logs(run, {"lost": _Silent(_node("lost"))}, skip={"lost": "ssh: timeout"})
    )
    assert windows["lost"].error == "not asked: ssh: timeout"
    assert windows["lost"].position.source == "file"


def test_the_boot_hooks_collect_nothing_without_a_position_and_never_raise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.kernel import hooks

    run = _run(tmp_path)
    asyncio.run(hooks.collect_for_run(run, {"a": _Silent(_node("a"))}))  # returns at once
    assert not (run.dir / "nodes").exists()

    async def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in the collector")

    monkeypatch.setattr(hooks, "note_positions", boom)
    monkeypatch.setattr(hooks, "collect_kernel_logs", boom)
    asyncio.run(hooks.note_at_boot_start(run, {"a": _Silent(_node("a"))}))
    (run.dir / "nodes").mkdir()
    asyncio.run(hooks.collect_for_run(run, {"a": _Silent(_node("a"))}))  # logged, not raised
