"""The pipelined chain on the nodes: check the hops, run one round (chain, or fan-out waves),
hear its words, and stop what a broken round left running."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Sequence
from typing import Any

from orchestrator.errors import ClusterError
from orchestrator.images.context import ChainContext, _quint
from orchestrator.images.model import Compression, PushEvent, Source, SourceKind
from orchestrator.images.nodes import run_bounded
from orchestrator.images.pump import SourceStream, _os_pipe, _Progress, _pump_copy, _pump_direct
from orchestrator.images.rounds import (
    UNPACK_ERROR,
    ChainEvent,
    RoundLog,
    _safe_int,
    parse_chain_line,
)
from orchestrator.images.source import _open_source
from orchestrator.models.push import Mode
from orchestrator.transport.base import LineSplitter
from orchestrator.transport.pipe import Pipe, open_pipe


async def check_hops(
    ctx: ChainContext, pairs: Sequence[tuple[str, str]], rnd: int | None = None
) -> list[tuple[str, str, str]]:
    """Can each sender open an SSH session on its receiver? Returns the broken hops.

    Each sender leaves its connection up for a while (the chain script's ControlPersist), named
    after round `rnd`: that round's hop is one more session on it, not a new connection."""
    tag = f"{ctx.tag_base}-r{rnd}hc" if rnd is not None else f"{ctx.tag_base}-hc"

    async def one(pair: tuple[str, str]) -> tuple[str, str, str] | None:
        a, b = pair
        args = [*ctx.common(tag, Compression.none), *_quint(ctx.node(a)), *_quint(ctx.node(b))]
        try:
            r = await run_bounded(
                ctx.transports[a], ctx.argv("hopcheck", args), ctx.options.connect_timeout_s + 20
            )
        except ClusterError as exc:
            return a, b, exc.line()
        events = [e for e in map(parse_chain_line, r.stdout.splitlines()) if e is not None]
        check = next((e for e in events if e.event == "hopcheck"), None)
        if check is not None and check.fields[-1:] == ("0",):
            return None
        errs = [e.text for e in events if e.event in ("hoperr", "error")]
        return a, b, (errs[-1] if errs else f"exit {r.exit_status}: {r.stderr.strip()[-200:]}")

    results = await asyncio.gather(*(one(p) for p in pairs))
    return [r for r in results if r is not None]


async def _read_events(
    ctx: ChainContext,
    pipe: Pipe,
    log: RoundLog,
    prog: _Progress,
    rnd: int,
) -> None:
    """Read one pipe's stdout (the chain's words) and stderr (the first hop's own evidence)."""

    async def out() -> None:
        splitter = LineSplitter()
        while chunk := await pipe.stdout.read(65536):
            for line, _end in splitter.feed(chunk):
                _on_line(ctx, line, log, prog, rnd)
        for line, _end in splitter.close():
            _on_line(ctx, line, log, prog, rnd)

    async def err() -> None:
        buf = bytearray()
        while chunk := await pipe.stderr.read(65536):
            buf.extend(chunk)
            del buf[:-8192]
        log.first_hop_stderr[pipe.node.name] = buf.decode(errors="replace")

    await asyncio.gather(out(), err())
    log.first_hop_rc[pipe.node.name] = await pipe.wait()


def _on_line(ctx: ChainContext, line: str, log: RoundLog, prog: _Progress, rnd: int) -> None:
    ev = parse_chain_line(line)
    if ev is None:
        return
    log.events.append((time.monotonic() - ctx.started, ev))
    if ev.event == "progress" and ev.fields:
        n = _safe_int(ev.fields[0])
        if n is not None:
            if n != prog.node_bytes.get(ev.node):
                prog.moved()
            prog.node_bytes[ev.node] = n
            ctx.emit(PushEvent("progress", node=ev.node, round=rnd, wire_bytes=n))
    elif ev.event in ("sending", "sent") and len(ev.fields) >= 2:  # a node source: wire, raw
        wire, raw = _safe_int(ev.fields[0]), _safe_int(ev.fields[1])
        if wire is not None and raw is not None:
            if wire != prog.wire:
                prog.moved()
            prog.raw, prog.wire = raw, wire
            ctx.emit(PushEvent("source", round=rnd, wire_bytes=wire, raw_bytes=raw))
    elif ev.event == "load" and ev.fields:
        ok = ev.fields[0] == "0" and not any(
            UNPACK_ERROR in e.text
            for _, e in log.events
            if e.event == "loadout" and e.node == ev.node
        )
        ctx.emit(PushEvent("loaded", node=ev.node, round=rnd, ok=ok))
    elif ev.event == "recv" and ev.fields:
        n = _safe_int(ev.fields[0])
        if n is not None:
            ctx.emit(PushEvent("progress", node=ev.node, round=rnd, wire_bytes=n))
    elif ev.event == "hop" and len(ev.fields) >= 2 and ev.fields[1] != "0":
        ctx.emit(PushEvent("note", node=ev.fields[0], round=rnd, text=f"hop from {ev.node} failed"))


def round_tag(ctx: ChainContext, rnd: int, mode: Mode) -> str:
    """The tag a round's sessions and work folders on the nodes carry (TAG-r1). A round that
    fans out takes its own (TAG-r1f): the chain head opened for it while the hops were checked
    (`_open_chain_head`) may still be leaving its folder on the first node when the fan-out
    starts there, and a shared name then refused the fan-out ("cannot create ... exists
    already": a fresh-clone CI, ctb-node0)."""
    return f"{ctx.tag_base}-r{rnd}" + ("" if mode is Mode.chain else "f")


async def _open_chain_head(
    ctx: ChainContext, rnd: int, targets: Sequence[str], compression: Compression
) -> tuple[Pipe, int]:
    """Start round `rnd`'s chain from the controller (its first hop, which starts the rest) and
    return its pipe and the fd that feeds it. Started while the hops are still being checked:
    the chain's SSH sessions open while the check runs, not after it (`_abort_chain_head` if the
    check then picks a fan-out)."""
    common = ctx.common(round_tag(ctx, rnd, Mode.chain), compression, ctx.reference)
    quints = [q for name in targets for q in _quint(ctx.node(name))]
    sink_r, sink_w = _os_pipe()
    try:
        first = await open_pipe(
            ctx.inventory,
            ctx.node(targets[0]),
            ctx.argv("chain", [*common, *quints]),
            options=ctx.pipe_options(),
            stdin=sink_r,
        )
    except BaseException:
        os.close(sink_w)
        raise
    finally:
        os.close(sink_r)
    return first, sink_w


async def _abort_chain_head(
    ctx: ChainContext, rnd: int, head: tuple[Pipe, int], targets: Sequence[str]
) -> None:
    """Undo `_open_chain_head` before any byte was sent: end the first hop, and stop what it
    started on the nodes, so the round's tag is free again."""
    pipe, sink_w = head
    with contextlib.suppress(OSError):
        os.close(sink_w)
    pipe.kill()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(pipe.wait(), 10)
    await stop_round_leftovers(ctx, round_tag(ctx, rnd, Mode.chain), targets)


async def run_round(
    ctx: ChainContext,
    rnd: int,
    source: Source,
    targets: list[str],
    mode: Mode,
    compression: Compression,
    total_estimate: int | None,
    stream: SourceStream | None,
    head: tuple[Pipe, int] | None = None,
) -> tuple[RoundLog, _Progress]:
    """One round: chain (or fan-out waves) from `source` to `targets`; the words it heard.
    `head`: the chain's first hop, already started (`_open_chain_head`)."""
    tag = round_tag(ctx, rnd, mode)
    log = RoundLog()
    prog = _Progress()
    popts = ctx.pipe_options()
    common = ctx.common(tag, compression, ctx.reference)
    stall_s = ctx.options.stall_timeout_s * 2 + 10
    helpers: list[asyncio.subprocess.Process] = []

    def report() -> None:
        ctx.emit(
            PushEvent(
                "source",
                round=rnd,
                wire_bytes=prog.wire,
                raw_bytes=prog.raw,
                total_estimate=total_estimate,
            )
        )

    async def watchdog(pipes: list[Pipe], work: asyncio.Future[Any]) -> None:
        while not work.done():
            await asyncio.sleep(0.5)
            if time.monotonic() - prog.last_move > stall_s:
                log.stalled = True
                for p in pipes:
                    p.kill()
                if stream is not None:
                    stream.kill()
                for h in helpers:
                    if h.returncode is None:
                        with contextlib.suppress(ProcessLookupError):
                            h.kill()
                return

    async def supervise(pipes: list[Pipe], work: asyncio.Future[Any]) -> None:
        dog = asyncio.ensure_future(watchdog(pipes, work))
        try:
            await work
        finally:
            dog.cancel()

    if source.kind is SourceKind.node and mode is Mode.chain:
        assert source.node is not None
        quints = [q for name in [source.node, *targets] for q in _quint(ctx.node(name))]
        pipe = await open_pipe(
            ctx.inventory,
            ctx.node(source.node),
            ctx.argv("source", [*common, *quints]),
            options=popts,
            stdin=asyncio.subprocess.DEVNULL,
        )
        await supervise([pipe], asyncio.ensure_future(_read_events(ctx, pipe, log, prog, rnd)))
        log.source_error = _node_source_error(source.node, log, ctx.kind.save_word)
        return log, prog

    assert stream is not None
    if mode is Mode.chain:
        waves = [targets]
    else:
        k = max(1, ctx.options.fanout_streams)
        waves = [targets[i : i + k] for i in range(0, len(targets), k)]
    for i, wave in enumerate(waves):
        if i > 0:  # another wave reads the source again
            stream = await (ctx.opener or _open_source)(ctx, source)
        if mode is Mode.chain:
            if head is not None:
                first, sink_w = head
                head = None
            else:
                first, sink_w = await _open_chain_head(ctx, rnd, wave, compression)
            sinks = [first]
            pump = _pump_direct(ctx, source, stream, sink_w, compression, prog, report, helpers)
        else:
            sinks = [
                await open_pipe(
                    ctx.inventory,
                    ctx.node(name),
                    ctx.argv("chain", [*common, *_quint(ctx.node(name))]),
                    options=popts,
                )
                for name in wave
            ]
            pump = _pump_copy(source, stream, sinks, compression, prog, report, helpers)
        readers = [_read_events(ctx, s, log, prog, rnd) for s in sinks]

        async def both(pump: Any = pump, readers: list[Any] = readers) -> None:
            err, *_ = await asyncio.gather(pump, *readers)
            if err:
                log.source_error = err

        await supervise(sinks, asyncio.ensure_future(both()))
        if log.stalled:
            break
    log.events.append(
        (
            time.monotonic() - ctx.started,
            ChainEvent("sent", "controller", (str(prog.wire), str(prog.raw)), ""),
        )
    )
    return log, prog


def _node_source_error(name: str, log: RoundLog, save_word: str = "docker save") -> str | None:
    """Why a node source sent nothing usable: its `docker save` (or a payload's reader) failed,
    or it was never reached (the controller's session to it failed before it said anything)."""
    mine = [e for _, e in log.events if e.node == name]
    save = next((e for e in mine if e.event == "save"), None)
    if save is not None and save.fields[:1] != ("0",):
        errs = [e.text for e in mine if e.event == "saveerr"]
        return f"{save_word} on {name} exited {save.fields[0]}" + (f": {errs[-1]}" if errs else "")
    if not mine and not log.stalled:
        err = log.first_hop_stderr.get(name, "").strip().splitlines()[-1:]
        rc = log.first_hop_rc.get(name)
        return f"the source node {name} could not be reached (exit {rc})" + (
            f": {err[0]}" if err else ""
        )
    return None


async def stop_round_leftovers(ctx: ChainContext, tag: str, names: Sequence[str]) -> None:
    """Stop what a round left running on nodes that never said `end` (after a broken hop)."""

    async def one(name: str) -> None:
        with contextlib.suppress(ClusterError):
            await run_bounded(
                ctx.transports[name],
                ctx.argv("cleanup", [tag, name]),
                ctx.options.connect_timeout_s,
            )

    await asyncio.gather(*(one(n) for n in names))
