"""What a boot is doing and how it ended: phases, outcomes, and the events the supervisor folds.

Outcomes are enum members that carry their exit code and postmortem category, so a verdict
never needs a lookup table elsewhere (dstack `core/models/runs.py` does the same for job status).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from orchestrator.errors import ExitCode
from orchestrator.models.base import StrictModel
from orchestrator.models.memory import MemoryReading


class RankPhase(StrEnum):
    """Where one rank is, in boot order. `order` compares progress across ranks."""

    pending = "pending"  # planned, not started
    starting = "starting"  # container/process started, no engine line yet
    initializing = "initializing"  # engine up: server args, torch distributed init
    loading = "loading"  # between `Load weight begin` and `Load weight end`
    loaded = "loaded"  # weights in; waiting at the post-load barrier
    warming = "warming"  # KV cache, CUDA graphs, autotune
    serving = "serving"  # the engine said it is ready (rank 0 also answers HTTP)
    exited = "exited"  # the process is gone
    unreachable = "unreachable"  # its node cannot be asked

    @property
    def order(self) -> int:
        return _PHASE_ORDER[self]

    @property
    def finished_loading(self) -> bool:
        return self in (RankPhase.loaded, RankPhase.warming, RankPhase.serving)


_PHASE_ORDER = {phase: i for i, phase in enumerate(RankPhase)}  # read per log line: a dict


class RunPhase(StrEnum):
    """Where a whole run is (status.json's `phase`); what follows it is `phase_detail`."""

    booting = "booting"  # ranks starting, loading, warming
    ready = "ready"  # the head answered (READY)
    failed = "failed"  # a verdict other than READY
    stopped = "stopped"  # `cluster stop` ended it


class Outcome(StrEnum):
    """How a boot ended. Each has an exit code and a postmortem category."""

    READY = "READY"
    PREFLIGHT_REFUSED = "PREFLIGHT_REFUSED"
    IMAGE_FAILED = "IMAGE_FAILED"
    RANK_EXITED = "RANK_EXITED"
    BARRIER_TIMEOUT = "BARRIER_TIMEOUT"
    RENDEZVOUS_STALLED = "RENDEZVOUS_STALLED"  # ranks never joined the group (torch init)
    NODE_LOST = "NODE_LOST"
    STALLED = "STALLED"
    READY_TIMEOUT = "READY_TIMEOUT"
    SMOKE_FAILED = "SMOKE_FAILED"  # READY, but the smoke request after it failed (ranks serve on)
    INTERRUPTED = "INTERRUPTED"
    # Incidents after READY (supervisor/serving.py): the serving watch names them.
    RANK_DIED = "RANK_DIED"  # a rank's process ended while the group served
    WEDGED = "WEDGED"  # alive, /health 200, but no token comes out
    MEMORY_LOW = "MEMORY_LOW"  # a node's MemAvailable under the floor
    STOPPED = "STOPPED"  # `cluster stop` ended the run before it had a verdict of its own

    @property
    def exit_code(self) -> ExitCode:
        return {
            Outcome.READY: ExitCode.OK,
            Outcome.PREFLIGHT_REFUSED: ExitCode.PREFLIGHT_REFUSED,
            Outcome.IMAGE_FAILED: ExitCode.IMAGE_FAILED,
            Outcome.INTERRUPTED: ExitCode.INTERRUPTED,
            Outcome.STOPPED: ExitCode.STOPPED,
        }.get(self, ExitCode.BOOT_FAILED)

    @property
    def serving(self) -> bool:
        """The ranks serve on after this outcome (a later incident or stop may still end it)."""
        return self in (Outcome.READY, Outcome.SMOKE_FAILED)

    @property
    def category(self) -> str:
        """The postmortem vocabulary (`docs/postmortem.md`)."""
        return {
            Outcome.READY: "ready",
            Outcome.IMAGE_FAILED: "image-unpack-race",
            Outcome.BARRIER_TIMEOUT: "load-barrier-timeout",
            Outcome.NODE_LOST: "rendezvous-network",
            Outcome.RENDEZVOUS_STALLED: "rendezvous-network",
            Outcome.SMOKE_FAILED: "smoke-failed",
            Outcome.RANK_DIED: "rank-died-serving",
            Outcome.WEDGED: "wedged-serving",
            Outcome.MEMORY_LOW: "memory-low-serving",
        }.get(self, "unknown")


class _Event(StrictModel):
    ts: float  # controller monotonic-ish wall time (time.time()), seconds


class RankEvent(_Event):
    """An event about one rank: the reducer folds it into that rank's state."""

    rank: int


class LogLine(RankEvent):
    kind: Literal["log"] = "log"
    stream: Literal["stdout", "stderr"]
    text: str


class Sample(RankEvent, MemoryReading):
    """One sampler reading for a rank's node (its memory) and the rank's processes."""

    kind: Literal["sample"] = "sample"
    rchar: int | None = None  # bytes read by the rank's processes (page cache hits included)
    read_bytes: int | None = None  # bytes that came from the block device


class RankStarted(RankEvent):
    kind: Literal["rank_started"] = "rank_started"
    container: str


class RankExited(RankEvent):
    kind: Literal["rank_exited"] = "rank_exited"
    exit_code: int | None
    oom_killed: bool = False
    finished_at: float | None = None  # when the process ended (runtime's clock), for ordering
    last_lines: tuple[str, ...] = ()


class NodeLost(RankEvent):
    kind: Literal["node_lost"] = "node_lost"
    reason: str


class NodeBack(RankEvent):
    kind: Literal["node_back"] = "node_back"


class NodeSlow(RankEvent):
    """The node answered (its sshd opened the session) but a sampling command ran past its
    deadline: a busy node or docker daemon, not a lost node. Recorded once per episode."""

    kind: Literal["node_slow"] = "node_slow"
    reason: str


class HeadReady(_Event):
    """The head answered the readiness path."""

    kind: Literal["head_ready"] = "head_ready"
    latency_s: float


Event = Annotated[
    LogLine | Sample | RankStarted | RankExited | NodeLost | NodeBack | NodeSlow | HeadReady,
    Field(discriminator="kind"),
]


class Finding(StrictModel):
    """A watcher's word: a warning while the boot goes on, or a verdict that ends it."""

    watcher: str  # barrier, page-cache, exits, loss, stall, ready
    severity: Literal["warning", "verdict"]
    rank: int | None
    message: str  # what happened, on which rank, with the numbers
    advice: str = ""  # what to do
    outcome: Outcome | None = None  # for verdicts

    @classmethod
    def verdict(
        cls,
        watcher: str,
        outcome: Outcome,
        message: str,
        *,
        rank: int | None = None,
        advice: str = "",
    ) -> Finding:
        """A finding that ends the run with `outcome`."""
        return cls(
            watcher=watcher,
            severity="verdict",
            rank=rank,
            message=message,
            advice=advice,
            outcome=outcome,
        )
