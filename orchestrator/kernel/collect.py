"""At a verdict, an incident, `stop` or `supervise` resume: each node's kernel lines since the
boot's position, into `nodes/<node>/kernel.log` (async, bounded, never raising).

Each collection rewrites the whole window (position to now), so the last one holds it all:
- bounded in size: the newest `max_bytes` (a partial first line dropped; `truncated` says so);
- bounded in time: every node is asked at once and given `deadline_s` in all, the same order
  of deadline as the log saving around it; a node that does not answer keeps what an earlier
  collection wrote and says why in `kernel.json`;
- byte-exact: the node sends the bytes base64-encoded and they are written as received;
- dated: the node's clock is read beside (`date +%s.%N`, Cristian's midpoint as in
  `probes/clock.py`) and the offset kept in `kernel.json`, so the postmortem moves each line
  onto the controller's clock.

A node without a noted position (a run from before this feature, a position that failed) is
read from the start of what its log still holds, bounded the same way.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path

from orchestrator.errors import ClusterError
from orchestrator.kernel.command import argv, parse_answer, position_of
from orchestrator.kernel.model import (
    KERNEL_JSON,
    KERNEL_LOG,
    ClockOffset,
    KernelWindow,
    Position,
    node_dir,
)
from orchestrator.kernel.position import say_denied, write_window
from orchestrator.logging import get_logger
from orchestrator.probes.clock import CLOCK, clock_sample
from orchestrator.runstore import Run
from orchestrator.transport import Transport

log = get_logger(__name__)

COLLECT_DEADLINE_S = 20.0
MAX_BYTES = 4 * 2**20  # per node and collection: a boot's kernel window is far smaller

_DMESG_TIME = re.compile(rb"^\[\s*(\d+\.\d+)\]")


def read_window(run: Run, node: str) -> KernelWindow | None:
    path = run.dir / node_dir(node) / KERNEL_JSON
    try:
        return KernelWindow.model_validate_json(path.read_bytes())
    except (OSError, ValueError):
        return None


def since(body: bytes, mono_s: float) -> tuple[bytes, bool]:
    """dmesg output: the lines after `mono_s` (an untimed line follows the line before it),
    and whether the buffer no longer reaches back to the position (lines were lost)."""
    kept: list[bytes] = []
    keep = False
    first: float | None = None
    for line in body.splitlines(keepends=True):
        m = _DMESG_TIME.match(line)
        if m:
            t = float(m.group(1))
            first = t if first is None else first
            keep = t > mono_s
        if keep:
            kept.append(line)
    wrapped = first is not None and mono_s > 0 and first > mono_s
    return b"".join(kept), wrapped


def _whole_lines(body: bytes, max_bytes: int) -> tuple[bytes, bool]:
    """At most `max_bytes`, the newest, starting at a line: (bytes, truncated)."""
    if len(body) < max_bytes:
        return body, False
    cut = body.find(b"\n")
    return (body[cut + 1 :] if cut >= 0 else b""), True


def _write_log(path: Path, data: bytes) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


async def _clock(transport: Transport, deadline_s: float) -> ClockOffset | None:
    sent = time.time()
    try:
        result = await transport.run(CLOCK.argv, timeout_s=deadline_s)
        received = time.time()
        sample = clock_sample(result.stdout, sent, received)
    except (ClusterError, ValueError):
        return None
    return ClockOffset(offset_s=sample.offset_s, uncertainty_s=sample.uncertainty_s)


async def _one(
    run: Run, node: str, transport: Transport, deadline_s: float, max_bytes: int
) -> KernelWindow:
    started = time.time()
    old = read_window(run, node)
    position = old.position if old is not None else None
    if position is not None and position.source in ("denied", "none"):
        position = None  # ask again: the privilege may have been granted since
    clock = await _clock(transport, deadline_s)
    try:
        result = await transport.run(
            argv(node, "collect", position, max_bytes), timeout_s=deadline_s
        )
    except ClusterError as exc:
        base = position or Position(source="none", noted_at=started)
        return KernelWindow(
            node=node, position=base, clock=clock, collected_at=started, error=exc.line()
        )
    answer = parse_answer(result.stdout)
    now_position = position_of(answer, started)
    if position is None:
        # no position noted at boot start: read what the log still holds (bounded)
        position = now_position.model_copy(update={"cursor": None, "offset_bytes": 0})
        if position.source == "dmesg":
            position = position.model_copy(update={"mono_s": 0.0})
    if answer.body is None:
        return KernelWindow(
            node=node,
            position=position,
            clock=clock,
            collected_at=started,
            error=answer.problem or now_position.error or f"exit {result.exit_status}",
            hint=now_position.hint,
        )
    body, wrapped = answer.body, False
    if now_position.source == "dmesg":
        body, wrapped = since(body, position.mono_s or 0.0)
    body, truncated = _whole_lines(body, max_bytes)
    _write_log(run.dir / node_dir(node) / KERNEL_LOG, body)
    if position.boot_id and now_position.boot_id and position.boot_id != now_position.boot_id:
        log.warning("a node rebooted during the run: its kernel window restarts", node=node)
    return KernelWindow(
        node=node,
        position=position,
        clock=clock,
        collected_at=started,
        bytes=len(body),
        lines=body.count(b"\n"),
        truncated=truncated,
        wrapped=wrapped,
    )


async def collect_kernel_logs(
    run: Run,
    transports: Mapping[str, Transport],
    *,
    deadline_s: float = COLLECT_DEADLINE_S,
    max_bytes: int = MAX_BYTES,
    skip: Mapping[str, str] | None = None,
) -> dict[str, KernelWindow]:
    """Every node's kernel window into the run; returns what each node's kernel.json says.
    `skip`: nodes not to ask (node -> why: the supervisor just lost them); they keep what an
    earlier collection wrote, and `cluster stop` reads them once they answer."""
    started = time.time()
    skip = skip or {}
    said = set()  # nodes whose missing privilege was already said (at boot start): once a run
    for node in transports:
        old = read_window(run, node)
        if old is not None and old.position.source == "denied":
            said.add(node)
    tasks = {
        node: asyncio.ensure_future(_one(run, node, t, deadline_s, max_bytes))
        for node, t in transports.items()
        if node not in skip
    }
    done, pending = (
        await asyncio.wait(tasks.values(), timeout=deadline_s + 1.0) if tasks else (set(), set())
    )
    for task in pending:
        task.cancel()
    windows: dict[str, KernelWindow] = {}
    for node, why in skip.items():
        old = read_window(run, node)
        if old is not None:
            windows[node] = old.model_copy(update={"error": f"not asked: {why}"})
            write_window(run, windows[node])
    for node, task in tasks.items():
        if task in done and not task.cancelled() and task.exception() is None:
            windows[node] = task.result()
        else:
            old = read_window(run, node)
            why = (
                f"no answer within {deadline_s:.0f} s"
                if task not in done or task.cancelled()
                else f"{type(task.exception()).__name__}: {task.exception()}"
            )
            windows[node] = KernelWindow(
                node=node,
                position=old.position if old else Position(source="none", noted_at=started),
                clock=old.clock if old else None,
                collected_at=started,
                bytes=old.bytes if old else 0,
                lines=old.lines if old else 0,
                error=why,
            )
        try:
            write_window(run, windows[node])
        except OSError as exc:
            log.warning("kernel window not written", node=node, error=str(exc))
    say_denied({n: w for n, w in windows.items() if n not in said}, "collecting")
    return windows
