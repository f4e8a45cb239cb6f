"""The postmortem's data: what was read from a run (facts) and what was concluded (diagnosis).

Facts are built by `collect` (the only module that touches the disk), concluded by `diagnose`
(pure), shown by `report`. `Diagnosis` is the `--json` document; `docs/postmortem.md` describes
its schema and `SCHEMA` names its version.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import ConfigDict, Field, computed_field

from orchestrator.models.base import StrictModel
from orchestrator.models.run import RankPhase
from orchestrator.postmortem.measured import Measured
from orchestrator.postmortem.signatures import Category, Role

SCHEMA = "cluster.postmortem/1"

PHASES: tuple[str, ...] = tuple(
    p.value for p in RankPhase if p not in (RankPhase.exited, RankPhase.unreachable)
)
"""Boot phases in order, as far as a rank's own lines can show (`RankPhase` without the states
the supervisor sets from outside the log: exited, unreachable)."""


def iso(ts: float | None) -> str | None:
    """Epoch seconds as ISO-8601 UTC with milliseconds, or None."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Evidence(StrictModel):
    """One line that supports a conclusion: where it is and what it says."""

    file: str  # relative to the run directory (or the path given with --logs)
    line: int  # 1-based line number in that file
    text: str  # the line without its docker timestamp (the \\r segment that matched)
    ts: float | None = None  # epoch seconds UTC; None when neither the line nor its past had one
    rank: int | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def time(self) -> str | None:
        return iso(self.ts)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


class Hit(StrictModel):
    """A signature matched on a rank."""

    signature: str
    category: Category
    role: Role
    evidence: Evidence
    via: Literal["log", "exit"] = "log"  # a log line, or the rank's exit state


class ExitInfo(StrictModel):
    """How a rank's process ended, from exit.json / inspect.json / events (in that order)."""

    status: str | None = None  # exited, running, created, dead, missing; stopped (by us)
    exit_code: int | None = None
    oom_killed: bool | None = None
    signal: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None  # docker's State.Error (why the start failed)
    source: str = ""  # file:line the state came from
    error_source: str = ""  # file:line of `error` (inspect.json's State.Error)

    @property
    def exited(self) -> bool:
        return self.status in ("exited", "dead") or (
            self.status is None and self.exit_code is not None
        )


class RankFacts(StrictModel):
    rank: int
    node: str | None = None
    files: tuple[str, ...] = ()
    lines: int = 0  # lines the rank printed (all its files)
    bytes: int = 0
    phase: str = "pending"  # the furthest phase its lines show (PHASES)
    engine: str | None = None  # sglang / vllm, from its dialect
    markers: dict[str, Evidence] = Field(default_factory=dict)  # first line of each milestone
    hits: tuple[Hit, ...] = ()  # first few per signature, in time order
    exceptions: tuple[Evidence, ...] = ()  # the last `Cls: message` lines (traceback fallback)
    exception_frames: tuple[str, ...] = ()  # for each, its traceback's file paths
    stated: tuple[Evidence, ...] = ()  # the last lines that state a failure in words (stated.py)
    counts: dict[str, int] = Field(default_factory=dict)  # matches per signature, all of them
    first_line: Evidence | None = None
    last_line: Evidence | None = None
    exit: ExitInfo | None = None
    lost: Evidence | None = None  # the supervisor lost the rank's node (events.jsonl node_lost)


class RunFacts(StrictModel):
    kind: Literal["run", "logs"]
    run_id: str | None = None
    path: str  # the run directory, or the common folder of the log files
    engine: str | None = None
    recipe: str | None = None
    recipe_args: tuple[str, ...] = ()
    recipe_env: dict[str, str] = Field(default_factory=dict)
    created: float | None = None
    supervisor_verdict: dict[str, Any] | None = None
    stopped_at: float | None = None  # when `cluster stop` began (events.jsonl), if it ran
    warnings: tuple[Evidence, ...] = ()  # the supervisor's warnings (events.jsonl), by rank
    notes: tuple[str, ...] = ()
    # what the supervisor measured (samples, starts, losses, warnings): blame weighs it; not in
    # --json (its evidence lines are, in root_cause.evidence)
    measured: Measured | None = Field(default=None, exclude=True)


# -- the diagnosis: the --json document ---------------------------------------------------------


class RecipeChange(StrictModel):
    """What to change in the recipe, and what it is now (when the manifest says)."""

    name: str  # the flag (--moe-runner-backend) or environment variable
    kind: Literal["flag", "env"]
    value: str | None = None  # the value to set, when a signature knows it
    current: str | None = None  # the recipe's value now, or None (unset / unknown)
    note: str = ""
    signature: str


class SignatureReport(StrictModel):
    id: str
    title: str
    category: Category
    role: Role
    meaning: str
    remedy: str
    changes: tuple[str, ...]  # rendered ("--attention-backend dsa", "NCCL_DEBUG=INFO")
    sources: tuple[str, ...]
    ranks: tuple[int, ...]
    count: int
    evidence: tuple[Evidence, ...]  # the first lines (at most a few per rank)


class RankReport(StrictModel):
    rank: int
    node: str | None
    role: Literal["root-cause", "same-cause", "other-cause", "cascade", "ok", "unknown"]
    last_phase: str
    exit_code: int | None
    oom_killed: bool | None
    status: str | None
    signatures: tuple[str, ...]
    reason: str  # one line: why this role
    last_line: Evidence | None


class RootCause(StrictModel):
    rank: int | None
    category: Category
    signature: str | None
    title: str
    confidence: Literal["high", "medium", "low"]
    reason: str
    evidence: tuple[Evidence, ...]
    also_on: tuple[int, ...] = ()  # ranks that failed the same way on their own


class TimelineEntry(StrictModel):
    ts: float | None
    rank: int | None
    kind: Literal["milestone", "match", "exit"]
    what: str
    file: str | None = None
    line: int | None = None
    text: str | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def time(self) -> str | None:
        return iso(self.ts)


Outcome = Literal["ready", "failed", "failed-unknown", "no-failure"]
"""What the boot came to, for scripts: `ready` (its ready marker, or the run's READY verdict);
`failed` (a cause is named: `category`); `failed-unknown` (it failed, but no cause is named with
enough confidence: `closest` says the best guess, if any); `no-failure` (nothing failed and
nothing is ready: stopped, cut short, or still booting: `no_failure` says how far it got)."""


class NoFailure(StrictModel):
    """Where a boot with no failure stood: its furthest phase and the last line there."""

    furthest_phase: str
    rank: int | None = None  # the rank that got furthest
    last_line: Evidence | None = None

    def phase_words(self) -> str:
        return self.furthest_phase


class Dissent(StrictModel):
    """The learned model's other reading of a boot the rules named (learned.dissent): where it
    put another category first with high probability, the rules' answer was withheld."""

    category: Category
    probability: float
    lines: tuple[Evidence, ...] = ()  # the lines whose words pulled most towards it


class Diagnosis(StrictModel):
    schema_: str = Field(default=SCHEMA, alias="schema", serialization_alias="schema")
    source: RunFacts
    category: Category
    verdict: str  # the one-paragraph answer
    first_failing_rank: int | None  # the root cause's rank (causal order, not print order)
    root_cause: RootCause | None
    first_error: Evidence | None  # the earliest failure line printed anywhere (may be a cascade)
    cascade_ranks: tuple[int, ...]
    ranks: tuple[RankReport, ...]
    signatures: tuple[SignatureReport, ...]
    recipe_changes: tuple[RecipeChange, ...]
    timeline: tuple[TimelineEntry, ...]
    notes: tuple[str, ...] = ()
    # schema 1 additions (issue 29); readers of older documents see the defaults
    outcome: Outcome = "failed-unknown"
    confidence: float | None = None  # measured precision of the deciding path (calibration.json)
    closest: Category | None = None  # the withheld category when `category` is unknown for it
    decided_by: str | None = None  # the deciding path: sig:ID, family:N, hang:CATEGORY, ...
    named_by: str = ""  # the same in words: "signature S", "exception family: ... (line L)"
    no_failure: NoFailure | None = None
    dissent: Dissent | None = None  # set when the model's reading withheld the rules' answer

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)
