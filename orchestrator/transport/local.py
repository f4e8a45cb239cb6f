"""Run a node's commands as subprocesses of the controller: the built-in simulated cluster.

Same contract as SSH: argv lists (never a shell), output tails, a timeout that keeps what
arrived, streams split on \\r and \\n. A node's `docker_host` becomes DOCKER_HOST.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncGenerator, Sequence

from orchestrator.errors import CommandTimeout, NodeError
from orchestrator.models.inventory import Node
from orchestrator.transport.base import Stream, Transport
from orchestrator.transport.streams import StderrTail


class LocalTransport(Transport):
    """A node that is this machine."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._env = dict(os.environ)
        if node.docker_host:
            self._env["DOCKER_HOST"] = node.docker_host

    async def _spawn(self, argv: tuple[str, ...], stdin: int) -> asyncio.subprocess.Process:
        try:
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=stdin,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env,
                start_new_session=True,  # its own process group, so a timeout kills it all
            )
        except FileNotFoundError:
            # What a shell on a remote node would say: exit 127, command not found.
            raise _NotFound(argv) from None
        except OSError as exc:
            raise NodeError(
                f"cannot start `{argv[0]}`: {exc.strerror}", node=self._node.name
            ) from exc

    async def _execute(
        self, argv: tuple[str, ...], timeout_s: float | None, stdin: bytes | None
    ) -> tuple[int | None, str, str]:
        try:
            proc = await self._spawn(
                argv, asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL
            )
        except _NotFound:
            return 127, "", f"{argv[0]}: command not found"
        out, err = bytearray(), bytearray()
        assert proc.stdout is not None and proc.stderr is not None

        async def collect(reader: asyncio.StreamReader, buf: bytearray) -> None:
            while chunk := await reader.read(65536):
                buf.extend(chunk)

        async def feed() -> None:
            if stdin is not None and proc.stdin is not None:
                proc.stdin.write(stdin)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    await proc.stdin.drain()
                proc.stdin.close()

        readers = asyncio.gather(collect(proc.stdout, out), collect(proc.stderr, err), feed())
        try:
            await asyncio.wait_for(asyncio.shield(readers), timeout_s)
            status = await proc.wait()
        except TimeoutError:
            _kill_group(proc)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(readers, 2)
            raise CommandTimeout(
                node=self._node.name,
                argv=list(argv),
                timeout_s=timeout_s or 0.0,
                stdout=out.decode(errors="replace"),
                stderr=err.decode(errors="replace"),
            ) from None
        except asyncio.CancelledError:
            # Cancelled (a `cluster stop` during preflight): end the process and reap it now,
            # not when its transport is collected after the event loop closed.
            _kill_group(proc)
            readers.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(proc.wait(), 2)
            raise
        return status, out.decode(errors="replace"), err.decode(errors="replace")

    async def stream_chunks(
        self, argv: Sequence[str]
    ) -> AsyncGenerator[tuple[Stream, bytes], None]:
        argv = tuple(argv)
        try:
            proc = await self._spawn(argv, asyncio.subprocess.DEVNULL)
        except _NotFound:
            raise self._failed(argv, 127, f"{argv[0]}: command not found") from None
        assert proc.stdout is not None and proc.stderr is not None
        tail = StderrTail()
        try:
            async with contextlib.aclosing(tail.relay(proc.stdout, proc.stderr)) as chunks:
                async for item in chunks:
                    yield item
            status = await proc.wait()
        finally:
            if proc.returncode is None:
                _kill_group(proc)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), 2)
        if status != 0:
            raise self._failed(argv, status, tail.text())


class _NotFound(Exception):
    def __init__(self, argv: tuple[str, ...]) -> None:
        self.argv = argv


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
