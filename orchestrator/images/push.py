"""Execute (thin): plan, send in rounds, verify every node, re-send to the starved, probe
exec-readiness, report."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.dockercli import DockerCli
from orchestrator.errors import ClusterError
from orchestrator.images.chain import (
    _abort_chain_head,
    _open_chain_head,
    check_hops,
    round_tag,
    run_round,
    stop_round_leftovers,
)
from orchestrator.images.context import ChainContext
from orchestrator.images.layers import failed_partial, plan_layers
from orchestrator.images.model import (
    Compression,
    EventSink,
    HopStatus,
    NodeAction,
    NodeResult,
    NodeState,
    PushEvent,
    PushOptions,
    PushReport,
    RoundReport,
    Source,
    SourceKind,
    TransportFactory,
)
from orchestrator.images.nodes import gather_states, run_bounded, with_held_layers
from orchestrator.images.plan import choose_mode, compression_pays, plan_push
from orchestrator.images.pump import SourceStream
from orchestrator.images.readiness import probe_exec_ready
from orchestrator.images.rounds import byte_times, judge_round, next_round
from orchestrator.images.source import _open_source, _read_upto, _zstd_size, resolve_source
from orchestrator.models.inventory import Connection, Inventory
from orchestrator.models.push import Mode
from orchestrator.probes.exec_ready import ExecReadiness
from orchestrator.probes.image import (
    ImageIdentity,
    ImageStoreKind,
    identity_of,
    image_inspect_probe,
    same_image,
)
from orchestrator.transport import Transport
from orchestrator.transport.pool import node_transports

SAMPLE_BYTES = 16 << 20


async def push_image(
    inventory: Inventory,
    reference: str,
    *,
    source: Source | None = None,
    options: PushOptions | None = None,
    on_event: EventSink | None = None,
    factory: TransportFactory | None = None,
) -> PushReport:
    """Put `reference` on every node of the inventory; see the module doc for how.

    Raises `ImageError` before any byte moves (no such image at the source, platform or digest
    mismatch); afterwards every node's fate is in the returned report (`raise_for_failures`)."""
    source = source or Source()
    options = options or PushOptions()
    emit: EventSink = on_event or (lambda _e: None)
    started = time.monotonic()
    async with node_transports(inventory, options.connect, factory) as transports:
        return await _push(inventory, reference, source, options, emit, started, transports)


async def _push(
    inventory: Inventory,
    reference: str,
    source: Source,
    options: PushOptions,
    emit: EventSink,
    started: float,
    transports: dict[str, Transport],
) -> PushReport:
    phases: dict[str, float] = {}

    def mark(what: str) -> None:
        phases[what] = round(time.monotonic() - started, 3)

    states = await gather_states(
        inventory, reference, transports, timeout_s=max(10.0, options.connect_timeout_s * 2)
    )
    src = await resolve_source(inventory, reference, source, states)
    if src.layers:
        states = await with_held_layers(
            inventory,
            states,
            transports,
            src.identity,
            timeout_s=max(10.0, options.connect_timeout_s * 2),
        )
    mark("probed")
    plan = plan_push(
        reference,
        src,
        states,
        expected_digest=options.expected_digest,
        platform=options.platform,
        compress=options.compress,
    )
    emit(PushEvent("plan", plan=plan))
    mark("planned")
    by_state = {s.node: s for s in states}
    stores = {s.node: (s.store.kind if s.store else ImageStoreKind.unknown) for s in states}
    rows: dict[str, dict[str, Any]] = {}
    for s in states:
        rows[s.node] = {
            "node": s.node,
            "rank": s.rank,
            "store": s.store.driver if s.store else None,
            "identity": s.identity.short() if s.holds_image else None,
        }
        if s.holds_image and s.image is not None:
            rows[s.node].update(image_id=s.image.id, config_digest=s.identity.config_digest or None)
        gaps = plan.layers.missing_of(s.node) if plan.layers else None
        if gaps is not None:
            rows[s.node].update(layers_missing=len(gaps.missing), partial=gaps.partial)
    for name in plan.skipped:
        note = "the source" if source.kind is SourceKind.node and name == source.node else None
        rows[name].update(action=NodeAction.skipped, verified=True, note=note)
    for p in plan.unreachable:
        rows[p.node].update(action=NodeAction.failed, error=p.evidence)
    ctx = ChainContext(inventory, options, transports, emit, started, reference=reference)
    rounds: list[RoundReport] = []
    compression = plan.compression
    compression_reason = plan.compression_reason
    first_mode: tuple[Mode, str] | None = None
    targets = list(plan.targets)
    round_source = source
    verified: set[str] = set(plan.skipped)
    sends: dict[str, int] = {}
    whole_for: set[str] = set()  # a partial load failed there: the whole image next time
    held = {s.node: s.held for s in states}
    for rnd in range(1, options.max_rounds + 1):
        if not targets:
            break
        t0 = time.monotonic()
        chain_nodes = [*([round_source.node] if round_source.node else []), *targets]
        pairs = list(itertools.pairwise(chain_nodes))
        local = inventory.connection is Connection.local
        needs_check = options.mode != "fanout" and not local and pairs
        stream: SourceStream | None = None
        ctx.drop = ()
        if round_source.kind is not SourceKind.node and src.layers:
            lp = plan.layers if rnd == 1 else None
            if lp is None:  # a later round: only what its targets lack
                lp = plan_layers(src.layers, targets, held, stores, whole_for=sorted(whole_for))
            ctx.drop = lp.drop
        total = None if ctx.drop else src.size_bytes
        report_fd, report_path = tempfile.mkstemp(prefix="cluster-image-layers.", suffix=".json")
        os.close(report_fd)
        ctx.filter_report = Path(report_path)

        # The hop check, the source's start (with round 1's compression sample) and, once the
        # wire format is known, the chain's first hop, all at once: a chain is the likely
        # outcome, and its SSH sessions open while the hops are checked. A broken hop found
        # meanwhile (a fan-out) undoes that first hop before any byte was sent.
        hop_task = asyncio.ensure_future(
            check_hops(ctx, pairs, rnd) if needs_check else _none_broken()
        )
        head = None
        try:
            stream, compression, compression_reason = await _open_round_source(
                ctx,
                round_source,
                sample=rnd == 1 and options.compress == "auto",
                compression=compression,
                reason=compression_reason,
            )
            if needs_check and stream is not None and options.mode != "fanout":
                head = await _open_chain_head(ctx, rnd, targets, compression)
            broken = await hop_task
        except BaseException:
            hop_task.cancel()
            if head is not None:
                await _abort_chain_head(ctx, rnd, head, targets)
            if stream is not None:
                stream.kill()
                stream.close()
            raise
        mark(f"hops_checked_{rnd}")
        missing_ssh = [(a, b, "no ssh client there") for a, b in pairs if not _has_ssh(by_state[a])]
        mode, why = choose_mode(options.mode, local=local, broken_hops=broken + missing_ssh)
        if mode is Mode.chain and len(targets) == 1 and round_source.kind is not SourceKind.node:
            why = "one node: a single stream from the controller"
        first_mode = first_mode or (mode, why)
        emit(
            PushEvent(
                "round", round=rnd, text=f"{round_source.label()} -> {', '.join(targets)}: {why}"
            )
        )
        if head is not None and mode is not Mode.chain:
            await _abort_chain_head(ctx, rnd, head, targets)
            head = None
        if stream is None and mode is not Mode.chain:  # a node source, fanned out
            stream = await _open_source(ctx, round_source)
        mark(f"source_open_{rnd}")
        for t in targets:
            sends[t] = sends.get(t, 0) + 1
        log, prog = await run_round(
            ctx, rnd, round_source, targets, mode, compression, total, stream, head
        )
        kept, dropped = _filter_report(ctx.filter_report) if ctx.drop else (None, None)
        with contextlib.suppress(OSError):
            os.unlink(report_path)
        mark(f"round_{rnd}")
        outcomes = judge_round(targets, log, upstream_label=round_source.label())
        unfinished = [o.node for o in outcomes if not o.ended]
        tag = round_tag(ctx, rnd, mode)
        # The exec-readiness probe of the nodes whose load succeeded runs beside their re-probe,
        # not after it; a node the re-probe does not verify has its probe thrown away.
        said_loaded = [o.node for o in outcomes if o.status is HopStatus.loaded]
        _, checks, early = await asyncio.gather(
            stop_round_leftovers(ctx, tag, unfinished),
            _verify(ctx, targets, src.identity, stores),
            _probe_ready(ctx, said_loaded) if options.probe else _no_readiness(),
        )
        mark(f"verified_{rnd}")
        rounds.append(
            RoundReport(
                round=rnd,
                source=round_source.label(),
                mode=mode,
                mode_reason=why,
                targets=tuple(targets),
                seconds=round(time.monotonic() - t0, 3),
                wire_bytes=prog.wire or None,
                raw_bytes=prog.raw or None,
                layers_sent=len(kept) if kept is not None else None,
                layers_dropped=len(dropped) if dropped is not None else None,
                dropped_bytes=sum(n for _, n in dropped) if dropped is not None else None,
            )
        )
        starved: list[str] = []
        for o in outcomes:
            ok, evidence, short, image_id = checks[o.node]
            row = rows[o.node]
            first_byte, last_byte = byte_times(log, o.node)
            row.update(
                sends=sends[o.node],
                sent_from=round_source.label(),
                received_bytes=o.received,
                first_byte_s=first_byte,
                last_byte_s=last_byte,
            )
            if ok:
                config = image_id if stores.get(o.node) is ImageStoreKind.graphdriver else None
                row.update(image_id=image_id, config_digest=config)
            if ok and o.status is HopStatus.loaded:
                verified.add(o.node)
                if o.node in early:
                    row["probe"] = early[o.node]
                row.update(
                    action=NodeAction.loaded,
                    verified=True,
                    identity=short,
                    seconds=round(o.load_at, 3) if o.load_at is not None else None,
                    error=None,
                )
            elif ok:  # loaded after all (e.g. the report was lost with a hop): the probe says so
                verified.add(o.node)
                row.update(action=NodeAction.loaded, verified=True, identity=short, error=None)
            else:
                evidence_all = o.evidence + (f"; re-probe: {evidence}" if evidence else "")
                row.update(action=NodeAction.failed, verified=False, error=evidence_all)
                reprobe_reached = not evidence.startswith("cannot re-probe")
                if ctx.drop and failed_partial(o.evidence):
                    # Its daemon lacked a layer the plan thought it held (pruned meanwhile),
                    # or cannot take a partial archive: the whole image, next round.
                    whole_for.add(o.node)
                    starved.append(o.node)
                    ctx.emit(
                        PushEvent(
                            "note",
                            node=o.node,
                            text=f"{o.node} could not load a partial archive: "
                            "sending it the whole image",
                        )
                    )
                elif o.status is HopStatus.starved or (
                    o.status is HopStatus.failed and "ssh from" in o.evidence and reprobe_reached
                ):
                    starved.append(o.node)
        if log.source_error:
            break  # the source itself is broken: re-sending from it helps nobody
        order = [n.name for n in inventory.nodes]
        resend_from, targets = next_round(order, verified, starved)
        if ctx.drop and source.kind is not SourceKind.node:
            # A node's `docker save` would send the whole image again; the original source,
            # through the layer filter, sends only what the starved nodes still lack.
            resend_from = None
        round_source = (
            Source(kind=SourceKind.node, node=resend_from) if resend_from is not None else source
        )
        if targets:
            emit(
                PushEvent(
                    "note",
                    text=f"re-sending to {', '.join(targets)} from {round_source.label()}",
                )
            )
    # Exec-readiness on every node that loaded in this push.
    wanted = (NodeAction.loaded, NodeAction.skipped) if options.probe_all else (NodeAction.loaded,)
    loaded = [name for name, r in rows.items() if r.get("action") in wanted and "probe" not in r]
    if options.probe and loaded:
        results = await probe_exec_ready(
            inventory,
            reference,
            names=loaded,
            window_s=options.ready_window_s,
            command=options.ready_command,
            transports=transports,
            on_result=lambda r: emit(PushEvent("probe", node=r.node, ok=r.ready, readiness=r)),
        )
        for readiness in results:
            rows[readiness.node]["probe"] = readiness
        mark("ready")
    results_rows = []
    for node in inventory.nodes:
        row = rows[node.name]
        if "action" not in row:
            row.update(action=NodeAction.failed, error="not sent: the push stopped before it")
        results_rows.append(NodeResult(**row))
    report_mode: Mode | None = first_mode[0] if first_mode else None
    mode_reason = first_mode[1] if first_mode else None
    return PushReport(
        reference=reference,
        source=source.label(),
        identity=src.identity.short(),
        compression=compression,
        compression_reason=compression_reason,
        mode=report_mode,
        mode_reason=mode_reason,
        rounds=tuple(rounds),
        nodes=tuple(results_rows),
        seconds=round(time.monotonic() - started, 3),
        layer_plan=plan.layers.summary() if plan.layers else None,
        phases=phases,
    )


async def _none_broken() -> list[tuple[str, str, str]]:
    return []


async def _no_readiness() -> dict[str, ExecReadiness]:
    return {}


async def _probe_ready(ctx: ChainContext, names: Sequence[str]) -> dict[str, ExecReadiness]:
    """The exec-readiness probe on `names` (reported as each answers), by node."""
    if not names:
        return {}
    results = await probe_exec_ready(
        ctx.inventory,
        ctx.reference,
        names=names,
        window_s=ctx.options.ready_window_s,
        command=ctx.options.ready_command,
        transports=ctx.transports,
        on_result=lambda r: ctx.emit(PushEvent("probe", node=r.node, ok=r.ready, readiness=r)),
    )
    return {r.node: r for r in results}


async def _open_round_source(
    ctx: ChainContext, source: Source, *, sample: bool, compression: Compression, reason: str
) -> tuple[SourceStream | None, Compression, str]:
    """The controller's or the archive's stream (None for a node source) and, when `sample`
    and zstd is planned, whether zstd pays on its first 16 MiB (kept, sent first)."""
    if source.kind is SourceKind.node:
        return None, compression, reason
    stream = await _open_source(ctx, source)
    if not (sample and compression is Compression.zstd):
        return stream, compression, reason
    try:
        stream.head = await asyncio.to_thread(_read_upto, stream.fd, SAMPLE_BYTES)
        pays, why = compression_pays(len(stream.head), await _zstd_size(stream.head))
    except BaseException:
        stream.kill()
        stream.close()
        raise
    return stream, (Compression.zstd if pays else Compression.none), why


def _has_ssh(state: NodeState) -> bool:
    return state.tools is None or "ssh" in state.tools.found


def _filter_report(path: Path | None) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """What the layer filter kept and dropped (empty lists when it wrote nothing)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8")) if path else {}
    except (OSError, ValueError):
        doc = {}
    return (
        [(str(d), int(n)) for d, n in doc.get("kept") or []],
        [(str(d), int(n)) for d, n in doc.get("dropped") or []],
    )


async def _verify(
    ctx: ChainContext, names: Sequence[str], want: ImageIdentity, stores: dict[str, ImageStoreKind]
) -> dict[str, tuple[bool, str, str | None, str | None]]:
    """Re-probe: node -> (holds the expected identity, evidence, short identity, image Id)."""
    timeout = max(5.0, ctx.options.connect_timeout_s * 2)

    async def one(name: str) -> tuple[bool, str, str | None, str | None]:
        node = ctx.node(name)
        probe = image_inspect_probe(ctx.reference, DockerCli.of(node))
        try:
            facts = probe.read(await run_bounded(ctx.transports[name], probe.argv, timeout))
        except ClusterError as exc:
            return False, f"cannot re-probe: {exc.line()}", None, None
        if not facts.present:
            return False, f"{ctx.reference} is not there after the load", None, None
        got = identity_of(facts, stores.get(name, ImageStoreKind.unknown))
        if same_image(got, want):
            return True, "", got.short(), facts.id
        return False, f"holds {got.short()}, expected {want.short()}", got.short(), facts.id

    results = await asyncio.gather(*(one(n) for n in names))
    out = dict(zip(names, results, strict=True))
    for name, (ok, *_) in out.items():
        ctx.emit(PushEvent("verify", node=name, ok=ok))
    return out
