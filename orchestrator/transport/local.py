"""Run a node's commands as subprocesses of the controller: the built-in simulated cluster.

Same contract as SSH: argv lists (never a shell), output tails, a timeout that keeps what
arrived, streams split on \\r and \\n. A node's `docker_host` becomes DOCKER_HOST.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence

from orchestrator.errors import CommandFailed, CommandTimeout, NodeError
from orchestrator.models.inventory import Node
from orchestrator.transport.base import CommandResult, OutputLine, Stream
from orchestrator.transport.streams import last_lines_text, lines_of, merged_chunks, stderr_tail


class LocalTransport:
    """A node that is this machine."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._env = dict(os.environ)
        if node.docker_host:
            self._env["DOCKER_HOST"] = node.docker_host

    @property
    def node(self) -> Node:
        return self._node

    async def connect(self) -> None:
        return None

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

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        stdin: bytes | None = None,
        check: bool = False,
    ) -> CommandResult:
        argv = tuple(argv)
        started = time.monotonic()
        try:
            proc = await self._spawn(
                argv, asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL
            )
        except _NotFound:
            result = CommandResult(
                node=self._node.name,
                argv=argv,
                exit_status=127,
                stdout="",
                stderr=f"{argv[0]}: command not found",
                duration_s=time.monotonic() - started,
            )
            return result.check() if check else result
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
        result = CommandResult(
            node=self._node.name,
            argv=argv,
            exit_status=status,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            duration_s=time.monotonic() - started,
        )
        return result.check() if check else result

    async def stream(self, argv: Sequence[str]) -> AsyncIterator[OutputLine]:
        # aclosing: a consumer that stops early ends the command now, not at collection.
        async with contextlib.aclosing(lines_of(self.stream_chunks(argv))) as lines:
            async for line in lines:
                yield line

    async def stream_chunks(
        self, argv: Sequence[str]
    ) -> AsyncGenerator[tuple[Stream, bytes], None]:
        argv = tuple(argv)
        try:
            proc = await self._spawn(argv, asyncio.subprocess.DEVNULL)
        except _NotFound:
            raise CommandFailed(
                node=self._node.name,
                argv=list(argv),
                exit_status=127,
                stderr=f"{argv[0]}: command not found",
            ) from None
        assert proc.stdout is not None and proc.stderr is not None
        tail = b""
        try:
            async with contextlib.aclosing(merged_chunks(proc.stdout, proc.stderr)) as chunks:
                async for stream, chunk in chunks:
                    if stream is Stream.stderr:
                        tail = stderr_tail(tail, chunk)
                    yield stream, chunk
            status = await proc.wait()
        finally:
            if proc.returncode is None:
                _kill_group(proc)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), 2)
        if status != 0:
            raise CommandFailed(
                node=self._node.name,
                argv=list(argv),
                exit_status=status,
                stderr=last_lines_text(tail),
            )

    async def close(self) -> None:
        return None


class _NotFound(Exception):
    def __init__(self, argv: tuple[str, ...]) -> None:
        self.argv = argv


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
