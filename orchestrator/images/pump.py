"""Moving the bytes: the controller's pipes, the source's raw stream, zstd in between, the kernel
copy into the chain's first hop, and the fan-out's copy of every chunk to every sink."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from orchestrator.images.context import ChainContext
from orchestrator.images.model import ZSTD_WIRE_LEVEL, Compression, Source
from orchestrator.transport.pipe import Pipe

CHUNK = 1 << 20
PIPE_BYTES = 1 << 20  # F_SETPIPE_SZ for the controller's own pipes
# A fixed level (model.ZSTD_WIRE_LEVEL). `--adapt` (a higher level while the next hop is slow)
# was tried and lost: on a CPU-bound chain the next hop is slow *because* its CPU is busy, and a
# higher level takes more of it (issue 30's bench: 0.80x with --adapt under a load of 15).
ZSTD_LEVEL = (f"-{ZSTD_WIRE_LEVEL}",)


class _Progress:
    """Byte counters of one round, and when anything last moved."""

    def __init__(self) -> None:
        self.raw = 0
        self.wire = 0
        self.last_move = time.monotonic()
        self.node_bytes: dict[str, int] = {}

    def moved(self) -> None:
        self.last_move = time.monotonic()

    def count_raw(self, n: int) -> None:
        """Raw bytes read off the source into zstd (the wire counts what comes out of it)."""
        self.raw += n


def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


@dataclass
class SourceStream:
    """The raw `docker save` stream of a source: a blocking pipe fd we own, and its process."""

    fd: int
    proc: asyncio.subprocess.Process
    head: bytes = b""  # bytes already read off `fd` (the compression sample), sent first

    def kill(self) -> None:
        _kill(self.proc)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _os_pipe() -> tuple[int, int]:
    r, w = os.pipe()
    for fd in (r, w):  # fewer, larger wakeups for a bulk stream (Linux; best effort)
        with contextlib.suppress(OSError, AttributeError):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    return r, w


async def _start_zstd() -> tuple[asyncio.subprocess.Process, int, int]:
    """`zstd -3 -T0` between two pipes we own: returns it, the fd to feed, the fd to read."""
    in_r, in_w = _os_pipe()
    out_r, out_w = _os_pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            "zstd", *ZSTD_LEVEL, "-T0", "-q", "-c", stdin=in_r, stdout=out_w
        )
    except BaseException:
        for fd in (in_w, out_r):
            os.close(fd)
        raise
    finally:
        os.close(in_r)
        os.close(out_w)
    return proc, in_w, out_r


async def _open_stream(
    start: Callable[[int], Awaitable[asyncio.subprocess.Process]],
) -> SourceStream:
    """A source stream: `start(fd)` launches what writes the raw bytes to `fd` (the write end of
    a pipe we own); we keep the read end. Our copy of the write end is closed either way, so the
    reader sees EOF when the writer exits."""
    r, w = _os_pipe()
    try:
        proc = await start(w)
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    return SourceStream(fd=r, proc=proc)


async def spawn_stream(argv: list[str]) -> SourceStream:
    """A source stream from a process on the controller (its stderr kept for `_source_error`)."""
    return await _open_stream(
        lambda w: asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=w, stderr=asyncio.subprocess.PIPE
        )
    )


def _move(src: int, dst: int, head: bytes, count: Callable[[int], None]) -> None:
    """Copy `head`, then everything from `src` to `dst` until EOF (blocking; run in a thread).
    `os.splice` moves pipe pages without copying them through Python where the OS has it."""
    if head:
        view = memoryview(head)
        while view:
            n = os.write(dst, view)
            view = view[n:]
            count(n)
    splice = getattr(os, "splice", None)
    while True:
        if splice is not None:
            try:
                n = splice(src, dst, CHUNK)
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.ENOSYS):
                    raise
                splice = None
                continue
        else:
            chunk = os.read(src, CHUNK)
            n = len(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(dst, view) :]
        if n == 0:
            return
        count(n)


def _feed_zstd(stream: SourceStream, z_in: int, prog: _Progress) -> None:
    """The source into zstd (blocking; run in a thread). zstd gone away is not this side's error:
    whoever reads its output notices and says so."""
    try:
        _move(stream.fd, z_in, stream.head, prog.count_raw)
    except OSError:
        pass
    finally:
        os.close(z_in)


async def _source_error(stream: SourceStream, label: str) -> str | None:
    """A clean end of the source, or the line that says why not."""
    rc = await stream.proc.wait()
    if rc == 0:
        return None
    err = b""
    if stream.proc.stderr is not None:
        with contextlib.suppress(Exception):
            err = await asyncio.wait_for(stream.proc.stderr.read(), 2)
    last = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {rc}"]
    return f"the source ({label}) failed: {last[0]}"


async def _pump_direct(
    ctx: ChainContext,
    source: Source,
    stream: SourceStream,
    sink_w: int,
    compression: Compression,
    prog: _Progress,
    report: Callable[[], None],
    helpers: list[asyncio.subprocess.Process],
) -> str | None:
    """One stream (the chain): source -> [zstd] -> the first hop, moved by the kernel in two
    threads; Python only counts. Returns the source's error, if any."""

    def raw(n: int) -> None:
        prog.raw += n
        if compression is Compression.none:
            prog.wire += n
            prog.moved()

    def wire(n: int) -> None:
        prog.wire += n
        prog.moved()

    async def ticker() -> None:
        while True:
            await asyncio.sleep(0.5)
            report()

    tick = asyncio.ensure_future(ticker())
    broken = False
    try:
        if compression is Compression.zstd:
            zproc, z_in, z_out = await _start_zstd()
            helpers.append(zproc)

            def drain() -> None:
                nonlocal broken
                try:
                    _move(z_out, sink_w, b"", wire)
                except OSError:  # the first hop went away: stop the rest of the line
                    broken = True
                    stream.kill()
                    _kill(zproc)
                finally:
                    os.close(z_out)

            await asyncio.gather(
                asyncio.to_thread(_feed_zstd, stream, z_in, prog), asyncio.to_thread(drain)
            )
            await zproc.wait()
        else:

            def send() -> None:
                nonlocal broken
                try:
                    _move(stream.fd, sink_w, stream.head, raw)
                except OSError:
                    broken = True
                    stream.kill()

            await asyncio.to_thread(send)
    finally:
        tick.cancel()
        with contextlib.suppress(OSError):
            os.close(sink_w)
        stream.close()
    report()
    if broken:
        stream.kill()
        await stream.proc.wait()
        return None
    return await _source_error(stream, source.label())


async def _pump_copy(
    source: Source,
    stream: SourceStream,
    sinks: list[Pipe],
    compression: Compression,
    prog: _Progress,
    report: Callable[[], None],
    helpers: list[asyncio.subprocess.Process],
) -> str | None:
    """Several streams (the fan-out): every chunk written to every live sink. Returns the
    source's error, if any."""
    live = list(sinks)
    last = 0.0

    def tick() -> None:
        nonlocal last
        now = time.monotonic()
        if now - last > 0.5:
            last = now
            report()

    async def out(chunk: bytes) -> None:
        nonlocal live
        live = await _write_all(live, chunk)
        prog.wire += len(chunk)
        prog.moved()
        tick()

    try:
        if compression is Compression.zstd:
            zproc, z_in, z_out = await _start_zstd()
            helpers.append(zproc)

            async def drain() -> None:
                try:
                    while live and (chunk := await asyncio.to_thread(os.read, z_out, CHUNK)):
                        await out(chunk)
                finally:
                    os.close(z_out)
                    if not live:
                        stream.kill()
                        _kill(zproc)

            await asyncio.gather(asyncio.to_thread(_feed_zstd, stream, z_in, prog), drain())
            await zproc.wait()
        else:
            if stream.head:
                prog.raw += len(stream.head)
                await out(stream.head)
            while live and (chunk := await asyncio.to_thread(os.read, stream.fd, CHUNK)):
                prog.raw += len(chunk)
                await out(chunk)
            if not live:
                stream.kill()
    finally:
        stream.close()
        for s in sinks:
            await s.close_stdin()
    report()
    if not live:
        await stream.proc.wait()
        return None
    return await _source_error(stream, source.label())


async def _write_all(sinks: list[Pipe], chunk: bytes) -> list[Pipe]:
    """Write to every live sink at once; the ones that stopped reading drop out."""
    results = await asyncio.gather(*(s.write(chunk) for s in sinks), return_exceptions=True)
    return [s for s, r in zip(sinks, results, strict=True) if not isinstance(r, BaseException)]
