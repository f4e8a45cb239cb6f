"""The chain's words (pure): parse the `@@cluster-image` lines, judge what one round did per
node, and pick what the next round re-sends and from where."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from orchestrator.images.model import HopOutcome, HopStatus

PROTOCOL = "@@cluster-image"
UNPACK_ERROR = "Error unpacking image"


@dataclass(frozen=True)
class ChainEvent:
    """One `@@cluster-image EVENT NODE ...` line."""

    event: str
    node: str
    fields: tuple[str, ...]
    text: str  # everything after NODE, verbatim


def parse_chain_line(line: str) -> ChainEvent | None:
    if not line.startswith(PROTOCOL + " "):
        return None
    rest = line[len(PROTOCOL) + 1 :]
    parts = rest.split(" ", 2)
    if len(parts) < 2:
        return None
    text = parts[2] if len(parts) > 2 else ""
    return ChainEvent(event=parts[0], node=parts[1], fields=tuple(text.split()), text=text)


@dataclass
class RoundLog:
    """What one round heard: the chain's events (with arrival times) and the first hop."""

    events: list[tuple[float, ChainEvent]] = field(default_factory=list)
    first_hop_rc: dict[str, int | None] = field(default_factory=dict)
    first_hop_stderr: dict[str, str] = field(default_factory=dict)
    stalled: bool = False
    source_error: str | None = None


def _safe_int(s: str) -> int | None:
    try:
        return int(s)
    except ValueError:
        return None


def judge_round(
    order: Sequence[str], log: RoundLog, *, upstream_label: str, load_word: str = "docker load"
) -> list[HopOutcome]:
    """Per node of `order` (chain order), what happened, from the events alone.

    A node whose `load` succeeded (exit 0 and no `Error unpacking image`) loaded. A node whose
    load failed although the stream reached it whole failed on its own. A node that never
    reported, right after a hop that failed, is the broken hop's far end: failed, with the
    sender's evidence. Everyone after a break is starved: they lack the image through no fault
    of their own and may be re-sent."""
    per: dict[str, list[tuple[float, ChainEvent]]] = {n: [] for n in order}
    hop_fail: dict[str, str] = {}  # receiving node -> evidence
    hoperr: dict[str, list[str]] = {}
    for at, ev in log.events:
        if ev.node in per:
            per[ev.node].append((at, ev))
        if ev.event == "hoperr":
            hoperr.setdefault(ev.node, []).append(ev.text)
    for _at, ev in log.events:
        if ev.event == "hop" and len(ev.fields) >= 2:
            nxt, hop_rc = ev.fields[0], ev.fields[1]
            if hop_rc != "0":
                tail = "; ".join(hoperr.get(ev.node, [])[-3:])
                hop_fail[nxt] = f"ssh from {ev.node} to {nxt} failed (exit {hop_rc})" + (
                    f": {tail}" if tail else ""
                )
    if not log.stalled:
        for node, rc in log.first_hop_rc.items():
            if rc != 0:
                err = log.first_hop_stderr.get(node, "").strip()
                last = err.splitlines()[-1] if err else ""
                hop_fail.setdefault(
                    node,
                    f"stream from {upstream_label} to {node} failed (exit {rc})"
                    + (f": {last}" if last else ""),
                )
    out: list[HopOutcome] = []
    broke_at: str | None = None
    sent_bytes = _source_bytes(log)
    for node in order:
        evs = [e for _, e in per[node]]
        load = next((e for e in evs if e.event == "load"), None)
        load_at = next((at for at, e in per[node] if e.event == "load"), None)
        recv = next((_safe_int(e.fields[0]) for e in evs if e.event == "recv" and e.fields), None)
        ended = any(e.event == "end" for e in evs)
        loadout = [e.text for e in evs if e.event == "loadout"]
        errors = [e.text for e in evs if e.event == "error"]
        unpack = [line for line in loadout if UNPACK_ERROR in line]
        if load is not None and load.fields and load.fields[0] == "0" and not unpack:
            out.append(
                HopOutcome(
                    node=node,
                    status=HopStatus.loaded,
                    received=recv,
                    ended=ended,
                    load_at=load_at,
                )
            )
            continue
        whole = recv is not None and sent_bytes is not None and recv >= sent_bytes
        if load is not None and (unpack or broke_at is None or whole):
            load_rc = load.fields[0] if load.fields else "?"
            what = unpack[-1] if unpack else (loadout[-1] if loadout else f"exit {load_rc}")
            out.append(
                HopOutcome(
                    node=node,
                    status=HopStatus.failed,
                    evidence=f"{load_word} exited {load_rc}: {what}"
                    if not unpack
                    else f"{load_word} printed `{what}` (exit {load_rc})",
                    received=recv,
                    ended=ended,
                    load_at=load_at,
                )
            )
            continue
        if errors:
            out.append(
                HopOutcome(node=node, status=HopStatus.failed, evidence=errors[-1], ended=ended)
            )
            broke_at = broke_at or node
            continue
        if node in hop_fail and broke_at is None:
            broke_at = node
            out.append(
                HopOutcome(
                    node=node, status=HopStatus.failed, evidence=hop_fail[node], received=recv
                )
            )
            continue
        if log.stalled and broke_at is None:
            out.append(
                HopOutcome(
                    node=node,
                    status=HopStatus.stalled,
                    evidence="no byte moved anywhere for the stall window; the round was stopped",
                    received=recv,
                    ended=ended,
                )
            )
            continue
        if log.source_error:
            out.append(
                HopOutcome(
                    node=node,
                    status=HopStatus.failed,
                    evidence=log.source_error,
                    received=recv,
                    ended=ended,
                )
            )
            continue
        cause = broke_at or "an earlier hop"
        if broke_at is None:
            broke_at = node
        out.append(
            HopOutcome(
                node=node,
                status=HopStatus.starved,
                evidence=f"the stream stopped upstream ({cause})"
                if cause != node
                else "the stream never arrived whole and no hop reported why",
                received=recv,
                ended=ended,
            )
        )
    return out


def _source_bytes(log: RoundLog) -> int | None:
    for _, ev in log.events:
        if ev.event == "sent" and ev.fields:
            return _safe_int(ev.fields[0])
    return None


def next_round(
    order: Sequence[str],
    verified: set[str],
    starved: Sequence[str],
) -> tuple[str | None, list[str]]:
    """Which node re-sends, and to whom: the starved nodes, from the nearest node upstream of
    the first of them that holds the verified image (any verified node if none is upstream;
    None: the original source)."""
    todo = [n for n in order if n in set(starved)]
    if not todo:
        return None, []
    first = order.index(todo[0])
    upstream = [n for n in order[:first] if n in verified]
    if upstream:
        return upstream[-1], todo
    anywhere = [n for n in order if n in verified]
    return (anywhere[0] if anywhere else None), todo


def byte_times(log: RoundLog, node: str) -> tuple[float | None, float | None]:
    """When `node` reported its first byte received and when it first reported its final count
    (seconds from the push's start; its counter reports once a second, so to about 1 s)."""
    counts = [
        (at, n)
        for at, ev in log.events
        if ev.node == node and ev.event in ("progress", "recv") and ev.fields
        for n in [_safe_int(ev.fields[0])]
        if n is not None
    ]
    first = next((at for at, n in counts if n > 0), None)
    if not counts:
        return first, None
    final = max(n for _, n in counts)
    last = next((at for at, n in counts if n == final), None)
    return first, (last if final > 0 else None)
