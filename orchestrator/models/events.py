"""The records of a run's `events.jsonl`: one closed union, discriminated by `kind`.

Every line of the file is one of these models, written by `Run.append_event` and read back by
`Run.events` (runstore.py), so a writer cannot invent a field a reader looks up by string, and a
reader gets typed records. The supervisor's own events (rank started/exited, node lost/back, head
ready) are the reducer's models from `models/run.py`; the rest are defined here. Log lines and
samples are not records (the rank logs and samples.jsonl keep those).

`ts` is always seconds since the epoch (a float). Runs written before the records were typed
kept an ISO 8601 string for the records that were not the supervisor's; reading accepts both.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter, field_validator

from orchestrator.models.base import StrictModel
from orchestrator.models.bench import SmokeResult
from orchestrator.models.run import (
    Finding,
    HeadReady,
    NodeBack,
    NodeLost,
    NodeSlow,
    RankExited,
    RankStarted,
)


def _epoch(value: Any) -> Any:
    """An ISO 8601 time (an older run's record) as epoch seconds; anything else as given."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return value
    return value


class _Record(StrictModel):
    """`ts` of a record: epoch seconds, now unless given (an ISO string from an older run)."""

    ts: float = Field(default_factory=time.time, description="when, in epoch seconds")

    @field_validator("ts", mode="before")
    @classmethod
    def _iso_ts(cls, value: Any) -> Any:
        return _epoch(value)


class Step(_Record):
    """A step of the boot began (`boot.py` sequences them): twin, preflight, start, ..."""

    kind: Literal["step"] = "step"
    step: str
    detail: str = ""


class Resumed(_Record):
    """`cluster supervise` took the run over again."""

    kind: Literal["resumed"] = "resumed"
    bytes_preserved: int


class FollowInterrupted(_Record):
    """Following a rank's output broke off (the follower resumes where its copy ends)."""

    kind: Literal["follow_interrupted"] = "follow_interrupted"
    rank: int
    reason: str


class WatcherWarning(Finding, _Record):
    """A watcher's warning while the boot went on (the finding's fields, flat)."""

    kind: Literal["warning"] = "warning"


class VerdictRecord(Finding, _Record):
    """How the supervised boot ended (verdict.json says the same)."""

    kind: Literal["verdict"] = "verdict"
    decided_at: float | None = None


class Incident(Finding, _Record):
    """Something that went wrong after READY, named by the serving watch (supervisor/serving.py):
    RANK_DIED, NODE_LOST, WEDGED, MEMORY_LOW. A verdict of its own: the boot's verdict stays
    READY; `incidents.json` lists them all. `signal` says which rule fired (wedge: `metrics` or
    `canary`); `attempt` which restart attempt of the group was serving (0: the first)."""

    kind: Literal["incident"] = "incident"
    signal: str = ""
    attempt: int = 0
    exit_code: int | None = None
    oom_killed: bool = False
    last_lines: tuple[str, ...] = ()
    final: bool = True  # False when the recipe's restart policy brings the group back


class Restarted(_Record):
    """The serving watch restarted the whole TP group (the recipe's `restart:` asked for it);
    the previous attempt's logs and inspect output are kept under `attempt-N/`."""

    kind: Literal["restarted"] = "restarted"
    attempt: int  # the attempt now starting (1: the first restart)
    reason: str
    kept: str  # the folder that holds the previous attempt


class Smoke(SmokeResult, _Record):
    """The smoke request after READY (the result's fields, flat)."""

    kind: Literal["smoke"] = "smoke"


class Preflight(_Record):
    kind: Literal["preflight"] = "preflight"
    ok: bool
    errors: int
    warnings: int
    problems: tuple[str, ...] = ()


class NcclCheck(_Record):
    kind: Literal["nccl_check"] = "nccl_check"
    ok: bool
    culprits: tuple[int, ...] = ()
    elapsed_s: float


class Stopped(_Record):
    """`cluster stop` ran: what ranks printed after `began` is the stop's doing."""

    kind: Literal["stopped"] = "stopped"
    began: float
    saved: tuple[int, ...] = ()
    removed: tuple[str, ...] = ()
    gone: tuple[int, ...] = ()


Record = Annotated[
    RankStarted
    | RankExited
    | NodeLost
    | NodeBack
    | NodeSlow
    | HeadReady
    | Step
    | Resumed
    | FollowInterrupted
    | WatcherWarning
    | VerdictRecord
    | Incident
    | Restarted
    | Smoke
    | Preflight
    | NcclCheck
    | Stopped,
    Field(discriminator="kind"),
]
"""Every kind of line `events.jsonl` holds."""

# Built at its first use, not at import: the postmortem of a pasted log never reads an
# events.jsonl, and this schema is most of this module's import time.
RECORD: TypeAdapter[Record] = TypeAdapter(Record, config=ConfigDict(defer_build=True))
