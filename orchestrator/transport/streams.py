"""Merge a process's stdout and stderr into one ordered stream (any transport).

`merged_chunks` hands on the bytes as they were read, one chunk at a time: the log followers
take that (a chunk holds ~20 lines at serving volume, and per-chunk work is what keeps eight
ranks' chatter cheap). `merged_lines` splits on \r and \n for everything that reads lines.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from orchestrator.transport.base import OutputLine, Stream, lines_of

CHUNK = 65536


class ByteReader(Protocol):
    """What asyncio's StreamReader and asyncssh's SSHReader (encoding=None) both offer."""

    async def read(self, n: int = -1) -> bytes: ...


async def merged_lines(stdout: ByteReader, stderr: ByteReader) -> AsyncIterator[OutputLine]:
    """Yield lines from both readers as they arrive, split on \\r and \\n, until both hit EOF."""
    async with contextlib.aclosing(lines_of(merged_chunks(stdout, stderr))) as lines:
        async for line in lines:
            yield line


@dataclass
class StderrTail:
    """The last `keep` bytes of a command's stderr as its chunks stream past: what the error of
    a streamed command that failed quotes (its last lines)."""

    keep: int = 4096
    _tail: bytes = b""

    async def relay(
        self, stdout: ByteReader, stderr: ByteReader
    ) -> AsyncGenerator[tuple[Stream, bytes], None]:
        """`merged_chunks(stdout, stderr)`, keeping stderr's tail on the way."""
        async with contextlib.aclosing(merged_chunks(stdout, stderr)) as chunks:
            async for stream, chunk in chunks:
                if stream is Stream.stderr:
                    self._tail = (self._tail + chunk)[-self.keep :]
                yield stream, chunk

    def text(self, lines: int = 20) -> str:
        return "\n".join(self._tail.decode("utf-8", errors="replace").splitlines()[-lines:])


async def merged_chunks(
    stdout: ByteReader, stderr: ByteReader
) -> AsyncGenerator[tuple[Stream, bytes], None]:
    """Yield (stream, bytes) as each reader delivers them, until both hit EOF."""
    queue: asyncio.Queue[tuple[Stream, bytes] | None] = asyncio.Queue(maxsize=256)

    async def pump(reader: ByteReader, stream: Stream) -> None:
        try:
            while chunk := await reader.read(CHUNK):
                await queue.put((stream, chunk))
        finally:
            await queue.put(None)

    tasks = [
        asyncio.create_task(pump(stdout, Stream.stdout)),
        asyncio.create_task(pump(stderr, Stream.stderr)),
    ]
    open_readers = len(tasks)
    try:
        while open_readers:
            item = await queue.get()
            if item is None:
                open_readers -= 1
                continue
            yield item
        for task in tasks:  # surface a reader's error (e.g. the connection dropped)
            await task
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
