"""At boot start: note where each node's kernel log stands (async, bounded, never raising).

`note_positions` asks every node at once (`command.py`'s one command) and writes each node's
`nodes/<node>/kernel.json` with the position; a node that does not answer within the deadline,
or whose kernel log the user may not read, gets a position that says why (the collection then
reports it again instead of guessing). Nothing here can fail a boot or hold it up longer than
`deadline_s`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from orchestrator.errors import ClusterError
from orchestrator.kernel.command import argv, parse_answer, position_of
from orchestrator.kernel.model import KERNEL_JSON, KernelWindow, Position, node_dir
from orchestrator.logging import get_logger
from orchestrator.runstore import Run
from orchestrator.transport import Transport

log = get_logger(__name__)

POSITION_DEADLINE_S = 15.0


async def _one(node: str, transport: Transport, deadline_s: float) -> Position:
    started = time.time()
    try:
        result = await transport.run(argv(node, "position"), timeout_s=deadline_s)
    except ClusterError as exc:
        return Position(source="none", noted_at=started, error=exc.line())
    if not result.ok:
        why = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        return Position(
            source="none", noted_at=started, error=f"exit {result.exit_status}: {why[0]}"
        )
    return position_of(parse_answer(result.stdout), started)


def write_window(run: Run, window: KernelWindow) -> None:
    run.write_text(f"{node_dir(window.node)}/{KERNEL_JSON}", window.model_dump_json(indent=2))


def say_denied(windows: Mapping[str, Position | KernelWindow], what: str) -> None:
    """One warning for every node whose kernel log the user may not read, with the fix."""
    denied = {}
    for node, w in windows.items():
        p = w.position if isinstance(w, KernelWindow) else w
        if p.source == "denied":
            denied[node] = p
    if denied:
        first = next(iter(denied.values()))
        log.warning(
            f"kernel log not readable on {', '.join(sorted(denied))} ({what}): {first.error}",
            hint=first.hint,
        )


async def note_positions(
    run: Run, transports: Mapping[str, Transport], *, deadline_s: float = POSITION_DEADLINE_S
) -> dict[str, Position]:
    """Each node's kernel log position now, written to `nodes/<node>/kernel.json`."""
    started = time.time()
    tasks = {
        node: asyncio.ensure_future(_one(node, t, deadline_s)) for node, t in transports.items()
    }
    done, pending = (
        await asyncio.wait(tasks.values(), timeout=deadline_s + 1.0)
        if tasks
        else (
            set(),
            set(),
        )
    )
    for task in pending:
        task.cancel()
    positions: dict[str, Position] = {}
    for node, task in tasks.items():
        if task in done and not task.cancelled() and task.exception() is None:
            positions[node] = task.result()
        else:
            positions[node] = Position(
                source="none",
                noted_at=started,
                error=f"no answer within {deadline_s:.0f} s",
            )
        try:
            write_window(run, KernelWindow(node=node, position=positions[node]))
        except OSError as exc:
            log.warning("kernel position not written", node=node, error=str(exc))
    say_denied(positions, "at boot start")
    return positions
