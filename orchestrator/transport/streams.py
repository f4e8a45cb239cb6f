"""Merge a process's stdout and stderr into one ordered stream of lines (any transport)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Protocol

from orchestrator.transport.base import LineSplitter, OutputLine, Stream

CHUNK = 65536


class ByteReader(Protocol):
    """What asyncio's StreamReader and asyncssh's SSHReader (encoding=None) both offer."""

    async def read(self, n: int = -1) -> bytes: ...


async def merged_lines(stdout: ByteReader, stderr: ByteReader) -> AsyncIterator[OutputLine]:
    """Yield lines from both readers as they arrive, split on \\r and \\n, until both hit EOF."""
    queue: asyncio.Queue[OutputLine | None] = asyncio.Queue(maxsize=4096)

    async def pump(reader: ByteReader, stream: Stream) -> None:
        splitter = LineSplitter()
        try:
            while chunk := await reader.read(CHUNK):
                for text, end in splitter.feed(chunk):
                    await queue.put(OutputLine(stream, text, end))
            for text, end in splitter.close():
                await queue.put(OutputLine(stream, text, end))
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
