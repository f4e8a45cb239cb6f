"""The SSH transport against a real SSH server (asyncssh, in this process, commands via sh -c)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncssh
import pytest

from orchestrator.errors import CommandFailed, CommandTimeout, HostKeyError, NodeUnreachable
from orchestrator.transport.base import ConnectOptions, Stream
from orchestrator.transport.ssh import SshTransport
from tests.transport.conftest import DROP_COMMAND, ServerState

pytestmark = pytest.mark.transport


def transport(state: ServerState, **options: object) -> SshTransport:
    return SshTransport(
        state.node(),
        known_hosts=state.known_hosts,
        options=ConnectOptions(connect_timeout_s=3, **options),  # type: ignore[arg-type]
    )


async def test_a_command_returns_its_exit_status_and_both_output_tails(ssh_server):
    t = transport(ssh_server)
    result = await t.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.exit_status, result.stdout, result.stderr) == (3, "out\n", "err\n")
    with pytest.raises(CommandFailed) as info:
        result.check()
    assert info.value.exit_status == 3
    assert info.value.node == "node0"
    assert "err" in info.value.line()
    await t.close()


async def test_arguments_with_shell_metacharacters_arrive_verbatim(ssh_server, tmp_path):
    marker = tmp_path / "pwned"
    args = ["a b", f"$(touch {marker})", "; echo injected", "'quoted'", '"dq"', "`id`", "*"]
    t = transport(ssh_server)
    result = await t.run(["printf", "%s\\n", *args], check=True)
    assert result.stdout.splitlines() == args
    assert not marker.exists()
    await t.close()


async def test_stdin_bytes_reach_the_command(ssh_server):
    t = transport(ssh_server)
    result = await t.run(["wc", "-c"], stdin=b"x" * 100_000, check=True)
    assert result.stdout.strip() == "100000"
    await t.close()


async def test_a_timeout_keeps_the_output_received_before_it(ssh_server):
    t = transport(ssh_server)
    started = time.monotonic()
    with pytest.raises(CommandTimeout) as info:
        await t.run(["sh", "-c", "echo partial; echo e-partial >&2; sleep 30"], timeout_s=1.0)
    assert time.monotonic() - started < 10
    assert info.value.stdout == "partial\n"
    assert info.value.stderr == "e-partial\n"
    assert info.value.node == "node0"
    # the connection is still usable after a timeout
    assert (await t.run(["true"])).ok
    await t.close()


async def test_streaming_splits_lines_on_carriage_returns_and_newlines(ssh_server):
    t = transport(ssh_server)
    seen = [
        (line.stream, line.text, line.end)
        async for line in t.stream(["sh", "-c", r"printf '10%%\r20%%\r30%%\ndone\n'; echo e >&2"])
    ]
    stdout = [(text, end) for stream, text, end in seen if stream is Stream.stdout]
    assert stdout == [("10%", "\r"), ("20%", "\r"), ("30%", "\n"), ("done", "\n")]
    assert (Stream.stderr, "e", "\n") in seen
    await t.close()


async def test_streamed_lines_arrive_while_the_command_still_runs(ssh_server):
    t = transport(ssh_server)
    agen = t.stream(["sh", "-c", "echo first; sleep 30"])
    first = await asyncio.wait_for(agen.__anext__(), 10)
    assert first.text == "first"
    await agen.aclose()  # abandoning a stream stops the remote command
    await t.close()


async def test_a_stream_that_exits_non_zero_raises_with_its_stderr(ssh_server):
    t = transport(ssh_server)
    with pytest.raises(CommandFailed) as info:
        async for _ in t.stream(["sh", "-c", "echo boom >&2; exit 4"]):
            pass
    assert info.value.exit_status == 4
    assert "boom" in info.value.line()
    await t.close()


async def test_many_concurrent_commands_stay_under_the_channel_budget(ssh_server):
    t = transport(ssh_server, channel_budget=8)
    results = await asyncio.gather(*(t.run(["sleep", "0.3"]) for _ in range(24)))
    assert all(r.ok for r in results)
    assert 2 <= ssh_server.peak <= 8 < 10  # OpenSSH's default MaxSessions is 10
    assert len(ssh_server.connections) == 1  # one connection per node, channels multiplexed
    await t.close()


async def test_an_unknown_host_key_is_refused_naming_the_node_and_file(ssh_server, tmp_path):
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    t = SshTransport(ssh_server.node(), known_hosts=empty, options=ConnectOptions(3))
    with pytest.raises(HostKeyError) as info:
        await t.connect()
    assert "node0" in info.value.line()
    assert str(empty) in info.value.line()
    assert "not listed" in info.value.line()


async def test_a_changed_host_key_is_refused_even_when_accepting_new_keys(ssh_server, tmp_path):
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(f"[127.0.0.1]:{ssh_server.port} {other}\n")
    t = SshTransport(
        ssh_server.node(),
        known_hosts=wrong,
        options=ConnectOptions(3, accept_new_host_keys=True),
    )
    with pytest.raises(HostKeyError) as info:
        await t.connect()
    assert "differs" in info.value.line()
    assert wrong.read_text().count("\n") == 1  # nothing was added


async def test_accepting_new_host_keys_is_opt_in_and_records_the_key(ssh_server, tmp_path):
    fresh = tmp_path / "sub" / "known_hosts"
    t = SshTransport(
        ssh_server.node(), known_hosts=fresh, options=ConnectOptions(3, accept_new_host_keys=True)
    )
    assert (await t.run(["echo", "hi"], check=True)).stdout == "hi\n"
    await t.close()
    recorded = fresh.read_text()
    assert ssh_server.host_key.export_public_key().decode().split()[1] in recorded
    # and now it verifies without the opt-in
    t2 = SshTransport(ssh_server.node(), known_hosts=fresh, options=ConnectOptions(3))
    assert (await t2.run(["true"])).ok
    await t2.close()


async def test_a_missing_known_hosts_file_is_refused_with_what_to_do(ssh_server, tmp_path):
    t = SshTransport(ssh_server.node(), known_hosts=tmp_path / "nope", options=ConnectOptions(3))
    with pytest.raises(HostKeyError) as info:
        await t.connect()
    assert "--accept-new-host-keys" in info.value.line()


async def test_a_refused_port_is_reported_as_refused(ssh_server):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free_port = s.getsockname()[1]
    node = ssh_server.node().model_copy(update={"port": free_port})
    t = SshTransport(node, known_hosts=ssh_server.known_hosts, options=ConnectOptions(3))
    with pytest.raises(NodeUnreachable) as info:
        await t.connect()
    assert info.value.reason == "refused"
    assert "connection refused" in info.value.line()


async def test_a_port_that_never_speaks_ssh_times_out_within_the_connect_timeout(ssh_server):
    held: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    node = ssh_server.node().model_copy(update={"port": port})
    t = SshTransport(node, known_hosts=ssh_server.known_hosts, options=ConnectOptions(1.0))
    started = time.monotonic()
    with pytest.raises(NodeUnreachable) as info:
        await t.connect()
    elapsed = time.monotonic() - started
    assert info.value.reason == "timeout"
    assert elapsed < 5  # the connect timeout (1 s) is the budget: no retries on timeouts
    server.close()
    for w in held:
        w.close()


async def test_a_dropped_connection_is_mapped_to_node_unreachable(ssh_server):
    t = transport(ssh_server)
    await t.connect()
    with pytest.raises(NodeUnreachable) as info:
        await t.run([DROP_COMMAND])
    assert info.value.reason == "dropped"
    assert "node0" in info.value.line()
    # the next command reconnects
    assert (await t.run(["true"])).ok
    await t.close()


def test_the_ssh_module_is_the_only_importer_of_asyncssh():
    root = Path(__file__).resolve().parents[2] / "orchestrator"
    importers = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if "import asyncssh" in p.read_text() or "from asyncssh" in p.read_text()
    )
    assert importers == ["transport/ssh.py"]
