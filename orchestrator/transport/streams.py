"""Merge a process's stdout and stderr into one ordered stream (any transport).

`merged_chunks` hands on the bytes as they were read, one chunk at a time: the log followers
take that (a chunk holds ~20 lines at serving volume, and per-chunk work is what keeps eight
ranks' chatter cheap). `merged_lines` splits on \r and \n for everything that reads lines.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Protocol

from orchestrator.transport.base import LineSplitter, OutputLine, Stream

CHUNK = 65536


class ByteReader(Protocol):
    """What asyncio's StreamReader and asyncssh's SSHReader (encoding=None) both offer."""

    async def read(self, n: int = -1) -> bytes: ...


async def merged_lines(stdout: ByteReader, stderr: ByteReader) -> AsyncIterator[OutputLine]:
    """Yield lines from both readers as they arrive, split on \\r and \\n, until both hit EOF."""
    async with contextlib.aclosing(lines_of(merged_chunks(stdout, stderr))) as lines:
        async for line in lines:
            yield line


async def lines_of(
    chunks: AsyncIterator[tuple[Stream, bytes]],
) -> AsyncGenerator[OutputLine, None]:
    """Split each stream's chunks into lines on \\r and \\n (a line may span chunks)."""
    splitters = {Stream.stdout: LineSplitter(), Stream.stderr: LineSplitter()}
    try:
        async for stream, chunk in chunks:
            for text, end in splitters[stream].feed(chunk):
                yield OutputLine(stream, text, end)
    finally:
        # A consumer that stops early ends the command now, not at garbage collection.
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()
    for stream, splitter in splitters.items():
        for text, end in splitter.close():
            yield OutputLine(stream, text, end)


def stderr_tail(tail: bytes, chunk: bytes, keep: int = 4096) -> bytes:
    """The last `keep` bytes of stderr seen so far: what a failed stream's error quotes."""
    return (tail + chunk)[-keep:]


def last_lines_text(tail: bytes, lines: int = 20) -> str:
    return "\n".join(tail.decode("utf-8", errors="replace").splitlines()[-lines:])


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
