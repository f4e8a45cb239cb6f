"""Transport pieces without a network: line splitting, the local transport, fan-out."""

from __future__ import annotations

import asyncio
import time

import pytest

from orchestrator.errors import CommandFailed, CommandTimeout, NodeUnreachable
from orchestrator.fanout import settle
from orchestrator.models.inventory import Node
from orchestrator.transport.base import LineSplitter
from orchestrator.transport.local import LocalTransport
from tests.fake_transport import FakeReply, FakeTransport


def node(name: str = "n0", rank: int = 0) -> Node:
    return Node(name=name, address="127.0.0.10", user="u", rank=rank, fabric_iface="lo")


def test_lines_split_on_cr_and_lf_with_crlf_as_one_end_across_chunks():
    s = LineSplitter()
    out = s.feed(b"a\rb\r") + s.feed(b"\nc\n") + s.feed("d\xc3".encode("latin-1")) + s.feed(b"\xa9")
    out += s.close()
    # text + end is exactly what arrived: the \r\n split across chunks stays one end
    assert out == [("a", "\r"), ("b", "\r\n"), ("c", "\n"), ("d\u00e9", "")]
    assert "".join(t + e for t, e in out) == "a\rb\r\nc\nd\u00e9"


async def test_the_local_transport_runs_argv_without_a_shell(tmp_path):
    t = LocalTransport(node())
    marker = tmp_path / "x"
    r = await t.run(["printf", "%s|", "$(touch " + str(marker) + ")", "a;b"])
    assert r.stdout == f"$(touch {marker})|a;b|"
    assert not marker.exists()


async def test_the_local_transport_reports_a_missing_program_as_exit_127():
    r = await LocalTransport(node()).run(["no-such-program-xyz"])
    assert r.exit_status == 127
    with pytest.raises(CommandFailed, match="127"):
        r.check()


async def test_a_local_timeout_kills_the_command_and_keeps_its_output():
    t = LocalTransport(node())
    started = time.monotonic()
    with pytest.raises(CommandTimeout) as info:
        await t.run(["sh", "-c", "echo early; sleep 30"], timeout_s=0.5)
    assert info.value.stdout == "early\n"
    assert time.monotonic() - started < 5


async def test_a_local_stream_yields_progress_lines_split_on_carriage_returns():
    t = LocalTransport(node())
    lines = [(x.text, x.end) async for x in t.stream(["printf", "1\r2\r3\n"])]
    assert lines == [("1", "\r"), ("2", "\r"), ("3", "\n")]


async def test_a_node_docker_host_reaches_the_local_command_environment():
    n = node().model_copy(update={"docker_host": "unix:///tmp/x.sock"})
    r = await LocalTransport(n).run(["sh", "-c", "echo $DOCKER_HOST"])
    assert r.stdout.strip() == "unix:///tmp/x.sock"


async def test_one_nodes_failure_never_hides_another_nodes_result():
    nodes = [node(f"n{i}", i) for i in range(4)]

    def handler(n: Node):
        def reply(argv, stdin):
            return FakeReply(stdout=n.name)

        return reply

    transports = {n.name: FakeTransport(n, handler(n)) for n in nodes}
    transports["n2"].connect_error = NodeUnreachable("refused", node="n2", reason="refused")

    async def ask(n: Node) -> str:
        return (await transports[n.name].run(["hostname"])).stdout

    outcomes = await settle(nodes, ask)
    assert [o.value for o in outcomes] == ["n0", "n1", None, "n3"]
    assert isinstance(outcomes[2].error, NodeUnreachable)
    assert [o.ok for o in outcomes] == [True, True, False, True]


async def test_fan_out_respects_its_concurrency_limit():
    active = peak = 0

    async def work(n: Node) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        active -= 1

    await settle([node(f"n{i}", i) for i in range(10)], work, limit=3)
    assert peak == 3
