"""SSH to a node with asyncssh: the only module that imports it, and where its errors become ours.

One connection per node; every command is a channel on it, under a budget below OpenSSH's
default `MaxSessions` (10). Host keys are always verified against the inventory's
`cluster_known_hosts` (else `~/.ssh/known_hosts`); a new key is accepted only with the explicit
`accept_new_host_keys` option (OpenSSH's `StrictHostKeyChecking=accept-new`), a changed key never.
`~/.ssh/config` is honoured (asyncssh reads it by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shlex
import socket
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path

import asyncssh
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from orchestrator.errors import (
    AuthError,
    ClusterError,
    CommandTimeout,
    HostKeyError,
    NodeError,
    NodeUnreachable,
    shown_argv,
)
from orchestrator.logging import get_logger
from orchestrator.models.inventory import Node
from orchestrator.transport.base import ConnectOptions, Stream, Transport
from orchestrator.transport.streams import StderrTail

log = get_logger(__name__)


def default_known_hosts() -> Path:
    return Path("~/.ssh/known_hosts").expanduser()


def _cipher_preference() -> list[str]:
    """AES-GCM first, then asyncssh's own order (the client's order picks the cipher).

    asyncssh's chacha20-poly1305 builds three cipher contexts per packet, AES-GCM one; while
    following eight ranks' logs that was the controller's largest single cost (profiled with
    bench/supervisor_logs.py). GB10's Arm cores and x86 controllers both have AES instructions,
    and every OpenSSH since 6.2 offers AES-GCM, so nothing that connected before is refused."""
    preferred = ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com"]
    defaults = [a.decode() for a in asyncssh.encryption.get_default_encryption_algs()]
    return preferred + [a for a in defaults if a not in preferred]


_CIPHER_PREFERENCE = _cipher_preference()


class SshTransport(Transport):
    """A node reached over SSH."""

    def __init__(
        self, node: Node, *, known_hosts: Path | None, options: ConnectOptions | None = None
    ) -> None:
        self._node = node
        self._known_hosts = known_hosts or default_known_hosts()
        self._options = options or ConnectOptions()
        self._budget = asyncio.Semaphore(self._options.channel_budget)
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        # Commands abandoned at their deadline, being closed beside the caller (held here so
        # the tasks are not collected half-way)
        self._abandoning: set[asyncio.Task[None]] = set()

    # -- connecting -------------------------------------------------------------------------

    async def connect(self) -> None:
        async with self._lock:
            if self._conn is not None:
                return
            if self._options.accept_new_host_keys:
                await self._accept_new_host_key()
            elif not self._known_hosts.exists():
                raise HostKeyError(
                    f"known_hosts file {self._known_hosts} does not exist",
                    node=self._node.name,
                    known_hosts=str(self._known_hosts),
                    hint="set cluster_known_hosts in the inventory, or pass "
                    "--accept-new-host-keys once to record the nodes' keys",
                )
            # Retry only what a restarting sshd or a busy accept queue produces, only here.
            retrying = AsyncRetrying(
                retry=retry_if_exception(_is_transient),
                stop=stop_after_attempt(max(1, self._options.connect_attempts)),
                wait=wait_exponential(multiplier=0.25, max=2),
                reraise=True,
            )
            async for attempt in retrying:
                with attempt:
                    self._conn = await self._open()

    async def _open(self) -> asyncssh.SSHClientConnection:
        node = self._node
        try:
            return await asyncssh.connect(
                node.address,
                port=node.port,
                username=node.user,
                client_keys=[str(node.private_key)] if node.private_key else (),
                known_hosts=str(self._known_hosts),
                connect_timeout=self._options.connect_timeout_s,
                keepalive_interval=self._options.keepalive_interval_s,
                keepalive_count_max=self._options.keepalive_count_max,
                encryption_algs=_CIPHER_PREFERENCE,
            )
        except Exception as exc:
            raise self._map_connect_error(exc) from exc

    def _map_connect_error(self, exc: BaseException) -> ClusterError:
        name, where = self._node.name, f"{self._node.address}:{self._node.port}"
        if isinstance(exc, asyncssh.HostKeyNotVerifiable):
            listed = self._listed_keys()
            what = (
                f"host key of {where} differs from the one in {self._known_hosts}"
                if listed
                else f"host key of {where} is not listed in {self._known_hosts}"
            )
            hint = (
                "if the node was reinstalled, remove its old line from that file; "
                "otherwise treat this as a possible impersonation"
                if listed
                else "add the node's key to that file, or pass --accept-new-host-keys once"
            )
            return HostKeyError(what, node=name, known_hosts=str(self._known_hosts), hint=hint)
        if isinstance(exc, asyncssh.PermissionDenied):
            return AuthError(
                f"{where} refused user '{self._node.user}' with the configured key",
                node=name,
                hint="check ansible_user and ansible_ssh_private_key_file in the inventory",
            )
        if isinstance(exc, ConnectionRefusedError):
            return NodeUnreachable(
                f"connection refused by {where}",
                node=name,
                reason="refused",
                hint="is sshd running on the node?",
            )
        if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
            return NodeUnreachable(
                f"no SSH handshake with {where} within {self._options.connect_timeout_s:g} s",
                node=name,
                reason="timeout",
                hint="check the address, the management link and any firewall",
            )
        if isinstance(exc, socket.gaierror):
            return NodeUnreachable(f"cannot resolve {self._node.address}", node=name, reason="dns")
        if isinstance(exc, OSError) and exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return NodeUnreachable(
                f"no route to {where}", node=name, reason="no-route", hint="check the link"
            )
        if isinstance(exc, (asyncssh.DisconnectError, OSError)):
            return NodeUnreachable(
                f"connection to {where} failed: {exc}", node=name, reason="dropped"
            )
        return NodeError(f"cannot connect to {where}: {type(exc).__name__}: {exc}", node=name)

    def _listed_keys(self) -> bool:
        try:
            known = asyncssh.read_known_hosts(str(self._known_hosts))
        except (OSError, ValueError):
            return False
        host_keys = known.match(self._node.address, self._node.address, self._node.port)[0]
        return bool(host_keys)

    async def _accept_new_host_key(self) -> None:
        """Record the node's key if (and only if) the file lists no key for it yet."""
        if self._known_hosts.exists() and self._listed_keys():
            return  # listed: verify as usual, so a changed key is still refused
        node = self._node
        timeout = self._options.connect_timeout_s
        try:
            # Bounded like a connection: a silent listener held this for 122 s before.
            key = await asyncio.wait_for(
                asyncssh.get_server_host_key(node.address, node.port, config=None), timeout
            )
        except Exception as exc:
            raise self._map_connect_error(exc) from exc
        if key is None:
            return
        pattern = node.address if node.port == 22 else f"[{node.address}]:{node.port}"
        line = f"{pattern} {key.export_public_key().decode().strip()}\n"
        self._known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self._known_hosts, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write(line)
        log.warning(
            "accepted new host key",
            node=node.name,
            fingerprint=key.get_fingerprint(),
            known_hosts=str(self._known_hosts),
        )

    async def _connection(self) -> asyncssh.SSHClientConnection:
        if self._conn is None:
            await self.connect()
        assert self._conn is not None
        return self._conn

    # -- commands ---------------------------------------------------------------------------

    async def _execute(
        self, argv: tuple[str, ...], timeout_s: float | None, stdin: bytes | None
    ) -> tuple[int | None, str, str]:
        conn = await self._connection()
        async with self._budget:
            try:
                process = await conn.create_process(shlex.join(argv), encoding=None)
            except Exception as exc:
                raise self._map_session_error(exc, argv) from exc
            try:
                if stdin is not None:
                    process.stdin.write(stdin)
                process.stdin.write_eof()
                completed = await process.wait(check=False, timeout=timeout_s)
            except asyncssh.TimeoutError as exc:
                # The caller hears of the timeout at its deadline; closing the channel (up to
                # 2 s more) runs beside it. Awaited here, it pushed a slow command past the
                # runtime's whole-call bound, and a node whose sshd answered read as lost.
                task = asyncio.create_task(_abandon(process))
                self._abandoning.add(task)
                task.add_done_callback(self._abandoning.discard)
                raise CommandTimeout(
                    node=self._node.name,
                    argv=list(argv),
                    timeout_s=timeout_s or 0.0,
                    stdout=_text(exc.stdout),
                    stderr=_text(exc.stderr),
                    answered=True,  # the session opened: the node's sshd answered
                ) from exc
            except Exception as exc:
                raise self._map_session_error(exc, argv) from exc
        if completed.returncode is None:  # the channel closed without an exit status
            raise self._lost(argv)
        return completed.returncode, _text(completed.stdout), _text(completed.stderr)

    async def stream_chunks(
        self, argv: Sequence[str]
    ) -> AsyncGenerator[tuple[Stream, bytes], None]:
        argv = tuple(argv)
        conn = await self._connection()
        async with self._budget:
            try:
                process = await conn.create_process(
                    shlex.join(argv), encoding=None, stdin=asyncssh.DEVNULL
                )
            except Exception as exc:
                raise self._map_session_error(exc, argv) from exc
            tail = StderrTail()
            try:
                async with contextlib.aclosing(
                    tail.relay(process.stdout, process.stderr)
                ) as chunks:
                    async for item in chunks:
                        yield item
                completed = await process.wait(check=False)
            except ClusterError:
                raise
            except Exception as exc:
                raise self._map_session_error(exc, argv) from exc
            finally:
                await _abandon(process)
        if completed.returncode is None:
            raise self._lost(argv)
        if completed.returncode != 0:
            raise self._failed(argv, completed.returncode, tail.text())

    def _map_session_error(self, exc: BaseException, argv: tuple[str, ...]) -> ClusterError:
        if isinstance(exc, ClusterError):
            return exc
        if isinstance(exc, asyncssh.ChannelOpenError):
            return NodeError(
                f"could not open an SSH session for `{shown_argv(argv)}`: {exc.reason}",
                node=self._node.name,
                hint="the node's sshd may limit sessions (MaxSessions) or be shutting down",
            )
        if isinstance(exc, (asyncssh.DisconnectError, ConnectionError, BrokenPipeError)):
            return self._lost(argv, f": {exc}")
        return NodeError(
            f"`{shown_argv(argv)}` failed: {type(exc).__name__}: {exc}", node=self._node.name
        )

    def _lost(self, argv: tuple[str, ...], detail: str = "") -> NodeUnreachable:
        self._conn = None  # the next call reconnects
        return NodeUnreachable(
            f"connection lost while running `{shown_argv(argv)}`{detail}",
            node=self._node.name,
            reason="dropped",
            hint="check the node's management link and sshd",
        )

    async def close(self) -> None:
        if self._abandoning:
            await asyncio.wait(set(self._abandoning), timeout=3)
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 5)


async def _abandon(process: asyncssh.SSHClientProcess[bytes]) -> None:
    """Stop a command we no longer wait for: ask sshd to signal it, then close the channel."""
    if process.exit_status is None and process.exit_signal is None:
        with contextlib.suppress(Exception):
            process.send_signal("TERM")
    process.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(process.wait_closed(), 2)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")


def _is_transient(exc: BaseException) -> bool:
    """A drop during the handshake (a busy sshd's MaxStartups, a flapping link) is worth a
    retry. A refused connection is not: nothing listens, and retrying with back-off made 1,000
    refused hosts take 50 s to check. Timeouts are not either (the connect timeout is the
    budget), nor key or auth failures."""
    return isinstance(exc, NodeUnreachable) and exc.reason == "dropped"
