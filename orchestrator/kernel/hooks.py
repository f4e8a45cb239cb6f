"""The two calls the boot, `stop` and `supervise` make (one line each where they are made).

Both never raise and never take longer than their deadline: a kernel log is evidence beside
the verdict, never a reason to lose or delay it.

    note_at_boot_start(run, transports)                  before the ranks start
    collect_for_run(run, transports, specs, lost)        at a verdict, an incident, `stop`,
                                                         and when `supervise` resumes a run

A run without a noted position (the built-in simulated cluster, whose "nodes" are this
machine's processes; a run from before this feature) collects nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.kernel.collect import collect_kernel_logs
from orchestrator.kernel.position import note_positions
from orchestrator.logging import get_logger
from orchestrator.runstore import Run
from orchestrator.runtime.base import RankSpec
from orchestrator.transport import Transport

log = get_logger(__name__)


async def note_at_boot_start(run: Run, transports: Mapping[str, Transport]) -> None:
    try:
        await note_positions(run, transports)
    except Exception as exc:  # evidence, never a reason to fail the boot
        log.warning("kernel log positions not noted", error=f"{type(exc).__name__}: {exc}")


async def collect_for_run(
    run: Run,
    transports: Mapping[str, Transport],
    specs: Sequence[RankSpec] = (),
    lost: Mapping[int, str] | None = None,
) -> None:
    if not (run.dir / "nodes").is_dir() or not transports:
        return
    skip = {s.node.name: why for s in specs if lost and (why := lost.get(s.rank)) is not None}
    try:
        await collect_kernel_logs(run, transports, skip=skip)
    except Exception as exc:  # evidence, never a reason to lose the verdict
        log.warning("kernel logs not collected", error=f"{type(exc).__name__}: {exc}")
