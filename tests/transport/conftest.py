"""A real SSH server in this process (asyncssh), running each command with /bin/sh -c like sshd.

It counts concurrent sessions (to prove the channel budget) and can drop a client on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh
import pytest

from orchestrator.models.inventory import Node

DROP_COMMAND = "__drop_connection__"


@dataclass
class ServerState:
    port: int
    host_key: asyncssh.SSHKey
    client_key_path: Path
    known_hosts: Path
    active: int = 0
    peak: int = 0
    connections: list[asyncssh.SSHServerConnection] = field(default_factory=list)
    children: list[asyncio.subprocess.Process] = field(default_factory=list)

    def node(self, name: str = "node0", **kw: object) -> Node:
        return Node(
            name=name,
            address="127.0.0.1",
            port=self.port,
            user="tester",
            private_key=self.client_key_path,
            rank=0,
            fabric_iface="lo",
            **kw,  # type: ignore[arg-type]
        )


async def _run_with_sh(process: asyncssh.SSHServerProcess[bytes], state: ServerState) -> None:
    state.active += 1
    state.peak = max(state.peak, state.active)
    local: asyncio.subprocess.Process | None = None
    try:
        if process.command == DROP_COMMAND:
            process.get_extra_info("connection").abort()
            return
        local = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            process.command or "true",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        assert local.stdin and local.stdout and local.stderr
        state.children.append(local)

        async def feed_stdin() -> None:
            assert local is not None and local.stdin is not None
            with contextlib.suppress(Exception):
                while chunk := await process.stdin.read(65536):
                    local.stdin.write(chunk)
                    await local.stdin.drain()
            with contextlib.suppress(Exception):
                local.stdin.close()

        async def pump(reader: asyncio.StreamReader, writer: asyncssh.SSHWriter[bytes]) -> None:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()

        feeder = asyncio.create_task(feed_stdin())
        await asyncio.gather(pump(local.stdout, process.stdout), pump(local.stderr, process.stderr))
        code = await local.wait()
        feeder.cancel()
        process.exit(code)
    except (asyncssh.BreakReceived, asyncssh.SignalReceived, asyncssh.TerminalSizeChanged):
        process.exit(143)
    except Exception:
        with contextlib.suppress(Exception):
            process.exit(255)
    finally:
        state.active -= 1
        if local is not None and local.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(local.pid, signal.SIGKILL)
            await local.wait()


class _Server(asyncssh.SSHServer):
    def __init__(self, state: ServerState) -> None:
        self._state = state

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._state.connections.append(conn)

    def begin_auth(self, username: str) -> bool:
        return True  # authentication required (public key only)


@pytest.fixture
async def ssh_server(tmp_path: Path) -> AsyncIterator[ServerState]:
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key_path = tmp_path / "id_ed25519"
    client_key.write_private_key(str(client_key_path))
    client_key_path.chmod(0o600)
    state = ServerState(0, host_key, client_key_path, tmp_path / "known_hosts")

    server = await asyncssh.create_server(
        lambda: _Server(state),
        "127.0.0.1",
        0,
        server_host_keys=[host_key],
        authorized_client_keys=asyncssh.import_authorized_keys(
            client_key.export_public_key().decode()
        ),
        process_factory=lambda p: _run_with_sh(p, state),
        encoding=None,
    )
    state.port = server.sockets[0].getsockname()[1]
    state.known_hosts.write_text(
        f"[127.0.0.1]:{state.port} {host_key.export_public_key().decode().strip()}\n"
    )
    try:
        yield state
    finally:
        for child in state.children:  # commands the client abandoned (sshd would signal them)
            if child.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
        server.close()
        await server.wait_closed()
