"""Execute (thin): scan and check the source, ask every node what it holds, send each group of
nodes what it lacks through the images' pipelined chain (`images_chain.sh` in its `wchain`
mode, one read of the source, every node writing and forwarding), re-probe, re-send to the
starved from the nearest node upstream that holds it whole, report."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.images.chain import check_hops, run_round, stop_round_leftovers
from orchestrator.images.context import ChainContext, ChainKind
from orchestrator.images.model import Compression, HopStatus, PushEvent, PushOptions, Source
from orchestrator.images.model import SourceKind as ImageSourceKind
from orchestrator.images.plan import choose_mode
from orchestrator.images.pump import SourceStream, spawn_stream
from orchestrator.images.rounds import judge_round, next_round
from orchestrator.models.inventory import Connection, Inventory
from orchestrator.models.push import Mode
from orchestrator.transport import Transport, TransportFactory
from orchestrator.transport.pool import node_transports
from orchestrator.weights.checks import check_model
from orchestrator.weights.manifest import manifest_of
from orchestrator.weights.model import (
    DEFAULT_ROOT,
    Holding,
    NodeAction,
    NodeResult,
    RoundReport,
    WeightsEvent,
    WeightsOptions,
    WeightsReport,
)
from orchestrator.weights.node_program import sha256_file
from orchestrator.weights.nodes import probe_nodes, probe_timeout_s
from orchestrator.weights.plan import destination, group_by_files, needs, space_problem
from orchestrator.weights.program import node_program
from orchestrator.weights.source import SourceModel, remember_sums, scan_source

KIND_WORDS = {"load_word": "writing the files", "save_word": "reading the files"}
EventSink = Callable[[WeightsEvent], None]


def weights_root(inventory: Inventory) -> str:
    return inventory.weights_root or DEFAULT_ROOT


def resolve_dest(
    inventory: Inventory, model_name: str, dest: str | None, host_dir: str | None
) -> str:
    return destination(
        dest, host_dir, weights_root(inventory), model_name, where=str(inventory.path)
    )


async def push_weights(
    inventory: Inventory,
    model_dir: Path,
    *,
    dest: str | None = None,
    host_dir: str | None = None,
    options: WeightsOptions | None = None,
    on_event: EventSink | None = None,
    factory: TransportFactory | None = None,
) -> WeightsReport:
    """Every node ends with a byte-identical, verified copy of `model_dir` at the destination.

    Raises ConfigError before any byte moves (bad source, destination outside the allowed root,
    a model that would not load); afterwards each node's fate is in the report."""
    options = options or WeightsOptions()
    emit: EventSink = on_event or (lambda _e: None)
    started = time.monotonic()
    if inventory.connection is Connection.local:
        raise ConfigError(
            "a local inventory's nodes all share this machine's disk: nothing to push",
            where=str(inventory.path),
            hint="push to an inventory of real nodes (or the netns testbed)",
        )
    src = await asyncio.to_thread(scan_source, model_dir)
    if options.check_model:
        problems = await asyncio.to_thread(check_model, src.root, src.manifest, options.engine_args)
        if problems:
            raise ConfigError(
                f"{model_dir}: {problems[0]}",
                hint="the engine would fail to load this model; nothing was sent",
                more=tuple(problems[1:]),
            )
    target = resolve_dest(inventory, src.default_name, dest, host_dir)
    async with node_transports(inventory, options.connect, factory) as transports:
        return await _Push(inventory, src, target, options, emit, started, transports).run()


def hash_files(root: Path, paths: Sequence[str]) -> dict[str, str]:
    """sha256 of files, several at once (hashlib releases the GIL on large buffers)."""
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return dict(zip(paths, pool.map(lambda p: sha256_file(str(root / p)), paths), strict=True))


class _Push:
    def __init__(
        self,
        inventory: Inventory,
        src: SourceModel,
        dest: str,
        options: WeightsOptions,
        emit: EventSink,
        started: float,
        transports: dict[str, Transport],
    ) -> None:
        self.inventory = inventory
        self.src = src
        self.manifest = src.manifest
        self.dest = dest
        self.options = options
        self.emit = emit
        self.started = started
        self.transports = transports
        self.order = [n.name for n in inventory.nodes]
        self.rows: dict[str, dict[str, Any]] = {}
        self.rounds: list[RoundReport] = []
        self.verified: set[str] = set()  # nodes holding the whole model: re-send sources
        self._manifest_out = ""  # where this round's controller source writes the sums
        chain_options = PushOptions(
            compress="none",
            mode="chain",
            connect=options.connect,
            stall_timeout_s=options.stall_timeout_s,
        )
        self.ctx = ChainContext(
            inventory,
            chain_options,
            transports,
            self._relay,
            started,
            kind=ChainKind(prefix="w", extra=(node_program(),), **KIND_WORDS),
            opener=self._open_controller,
        )

    def _relay(self, ev: PushEvent) -> None:
        """The chain's events, in the weights' words."""
        if ev.kind == "progress" and ev.node is not None:
            self.emit(WeightsEvent("progress", node=ev.node, round=ev.round, bytes=ev.wire_bytes))
        elif ev.kind == "source":
            self.emit(WeightsEvent("source", round=ev.round, bytes=ev.wire_bytes))
        elif ev.kind == "note":
            self.emit(WeightsEvent("note", node=ev.node, round=ev.round, text=ev.text))

    async def _probe(
        self, names: Sequence[str] | None = None, verify: bool = False
    ) -> list[Holding]:
        return await probe_nodes(
            self.inventory,
            self.transports,
            {"dest": self.dest, "verify": verify},
            names=names,
            timeout_s=probe_timeout_s(
                verify=verify, connect_timeout_s=self.options.connect_timeout_s
            ),
        )

    async def run(self) -> WeightsReport:
        holdings = await self._probe(verify=self.options.verify)
        # A file the source cannot name yet but some node holds at that path and size: hash it
        # here first, or the plan would send it again to everyone.
        held_paths = {p for h in holdings for p in h.held}
        unknown = [f.path for f in self.manifest.files if f.sha256 is None and f.path in held_paths]
        if unknown:
            self.emit(WeightsEvent("note", text=f"hashing {len(unknown)} files nodes already hold"))
            sums = await asyncio.to_thread(hash_files, self.src.root, unknown)
            self.manifest = self.manifest.with_sums(sums)
        pending: dict[str, list[str]] = {}
        needs_bytes: dict[str, int] = {}
        for h in holdings:
            row = self.rows.setdefault(h.node, {"node": h.node, "rank": h.rank})
            if not h.reachable:
                row.update(action=NodeAction.failed, error=h.error)
                continue
            lack = needs(self.manifest, h)
            nbytes = sum(f.size for f in lack)
            row["bytes_needed"] = nbytes
            why = space_problem(h, nbytes, self.options)
            if why:
                row.update(action=NodeAction.failed, error=why)
            elif not lack and h.complete and h.manifest_id == self.manifest.id():
                row.update(action=NodeAction.skipped, manifest_id=h.manifest_id)
                self.verified.add(h.node)
            else:
                pending[h.node] = [f.path for f in lack]
                needs_bytes[h.node] = nbytes
        self.emit(WeightsEvent("plan", needs=needs_bytes, text=self.dest))
        rnd = 0
        tries: dict[str, int] = {}
        retry: set[str] = set()
        while pending and rnd < self.options.max_rounds * max(1, len(self.order)):
            groups = group_by_files(pending, self.order)
            nodes, paths = groups[0]
            rnd += 1
            for n in nodes:
                tries[n] = tries.get(n, 0) + 1
                del pending[n]
            src_node: str | None = None
            if retry & set(nodes):
                src_node, _ = next_round(self.order, self.verified, nodes)
            again = await self._round(rnd, nodes, paths, src_node)
            for name, left in again.items():
                if tries[name] < self.options.max_rounds:
                    pending[name] = left
                    retry.add(name)
                else:
                    self.rows[name].setdefault("error", "still incomplete after the last round")
                    self.rows[name]["action"] = NodeAction.failed
        if any(f.sha256 for f in self.manifest.files):
            await asyncio.to_thread(remember_sums, self.src.root, self.manifest)
        return WeightsReport(
            model=self.manifest.model,
            source=str(self.src.root),
            dest=self.dest,
            manifest_id=self.manifest.id(),
            files=len(self.manifest.files),
            total_bytes=self.manifest.total_bytes,
            sums_from_hub=self.src.from_hub,
            sums_from_record=self.src.from_record,
            rounds=tuple(self.rounds),
            nodes=tuple(self._result(n) for n in self.order),
            seconds=round(time.monotonic() - self.started, 3),
        )

    def _result(self, name: str) -> NodeResult:
        row = self.rows[name]
        row.setdefault("action", NodeAction.failed)
        if row["action"] is NodeAction.failed:
            row.setdefault("error", "not sent: the push stopped before it")
        return NodeResult(**row)

    def _spec(self, paths: Sequence[str], root: str) -> dict[str, Any]:
        return {
            "dest": self.dest,
            "root": root,
            # a receiver cut off from its sender gives up after the round's stall window
            "idle_s": self.options.stall_timeout_s * 2 + 10,
            "send": list(paths),
            "manifest": self.manifest.as_json(),
        }

    async def _open_controller(self, ctx: ChainContext, _source: Any) -> SourceStream:
        """The controller's node program reading the source files (`send`): the round's stream."""
        spec = json.loads(ctx.reference)
        spec.update(root=str(self.src.root), manifest_out=self._manifest_out)
        return await spawn_stream(
            [sys.executable, "-c", node_program(), "send", json.dumps(spec), "controller"]
        )

    async def _round(
        self, rnd: int, nodes: list[str], paths: list[str], src_node: str | None
    ) -> dict[str, list[str]]:
        """One chain to `nodes` of the files `paths`; returns the nodes to try again (starved by
        a broken hop upstream) with what they still lack."""
        t0 = time.monotonic()
        source = Source(kind=ImageSourceKind.node, node=src_node) if src_node else Source()
        label = f"node {src_node}" if src_node else "the controller"
        chain_nodes = [*([src_node] if src_node else []), *nodes]
        broken = await check_hops(self.ctx, list(itertools.pairwise(chain_nodes)), rnd)
        mode, why = choose_mode("auto", local=False, broken_hops=broken)
        if mode is Mode.fanout and src_node:  # a node source only feeds a chain
            source, label, src_node = Source(), "the controller", None
        nbytes = sum(f.size for f in self.manifest.files if f.path in set(paths))
        self.emit(
            WeightsEvent(
                "round",
                round=rnd,
                text=f"{label} -> {', '.join(nodes)}: {len(paths)} files, {nbytes} bytes; {why}",
                needs=dict.fromkeys(nodes, nbytes),
            )
        )
        with tempfile.TemporaryDirectory(prefix="cluster-weights-") as tmp:
            self._manifest_out = str(Path(tmp) / "manifest.json")
            root = self.dest if src_node else str(self.src.root)
            ctx = replace(self.ctx, reference=json.dumps(self._spec(paths, root)))
            stream = None if src_node else await self._open_controller(ctx, source)
            log, prog = await run_round(
                ctx, rnd, source, nodes, mode, Compression.none, nbytes, stream
            )
            if not src_node:
                computed = manifest_of(_read_json(self._manifest_out))
                if computed is not None:
                    self.manifest = self.manifest.with_sums(
                        {f.path: f.sha256 for f in computed.files if f.sha256}
                    )
        outcomes = judge_round(nodes, log, upstream_label=label, load_word=KIND_WORDS["load_word"])
        unfinished = [o.node for o in outcomes if not o.ended]
        _, after = await asyncio.gather(
            stop_round_leftovers(self.ctx, f"{self.ctx.tag_base}-r{rnd}", unfinished),
            self._probe(nodes),
        )
        self.rounds.append(
            RoundReport(
                round=rnd,
                source=label,
                mode=mode,
                mode_reason=why,
                targets=tuple(nodes),
                files=len(paths),
                bytes=nbytes,
                seconds=round(time.monotonic() - t0, 3),
                wire_bytes=prog.wire or None,
            )
        )
        by_node = {h.node: h for h in after}
        again: dict[str, list[str]] = {}
        for o in outcomes:
            h = by_node[o.node]
            row = self.rows[o.node]
            row.update(
                sends=row.get("sends", 0) + 1,
                sent_from=label,
                received_bytes=o.received,
                files_sent=row.get("files_sent", 0) + len(paths),
            )
            lack = needs(self.manifest, h) if h.reachable else None
            if lack == [] and h.complete and h.manifest_id == self.manifest.id():
                self.verified.add(o.node)
                row.update(
                    action=NodeAction.sent,
                    manifest_id=h.manifest_id,
                    error=None,
                    seconds=round(time.monotonic() - self.started, 3),
                )
                self.emit(WeightsEvent("done", node=o.node, ok=True))
                continue
            evidence = o.evidence
            if not evidence and lack:
                evidence = f"{len(lack)} files still missing after the round"
            if not h.reachable:
                evidence = "; ".join(filter(None, [evidence, f"re-probe: {h.error}"]))
            row.update(action=NodeAction.failed, error=evidence)
            self.emit(WeightsEvent("done", node=o.node, ok=False, text=evidence))
            hop_broke = o.status is HopStatus.failed and "ssh from" in o.evidence
            if (
                h.reachable
                and lack
                and (o.status in (HopStatus.starved, HopStatus.stalled) or hop_broke)
            ):
                again[o.node] = [f.path for f in lack]
        return again


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
