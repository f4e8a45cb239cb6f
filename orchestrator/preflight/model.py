"""What preflight finds and reports: severities, problems, limits, the real test's result, the
report and everything preflight learned."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.plan.launch import LaunchPlan
from orchestrator.plan.rendezvous import RendezvousPlan
from orchestrator.probes.node_facts import NodeFacts
from orchestrator.probes.tcp import ConnectResult, ListenerReport

GIB = 2**30
Runtime = Literal["docker", "process"]


def gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f} GiB"


class Severity(StrEnum):
    error = "error"  # refuses the boot
    warning = "warning"  # printed and kept


class Problem(StrictModel):
    """One thing wrong: which check, where, what, the evidence that shows it, and the fix."""

    check: str = Field(description="the check's id, e.g. fabric-mtu")
    severity: Severity
    node: str | None = Field(default=None, description="None: the cluster as a whole")
    rank: int | None = None
    what: str
    evidence: str
    fix: str


@dataclass(frozen=True)
class PreflightLimits:
    """Every bound preflight applies, in one place (named like the recipe's timeouts)."""

    mem_headroom: float = 1.10
    """A rank needs MemAvailable >= expected_bytes_per_rank x this (weights + CUDA context)."""
    min_mem_available: int = 8 * GIB
    """When the recipe gives no expected bytes: at least this much MemAvailable."""
    memfree_floor: int = 8 * GIB
    """Warning below: on a GB10 cudaMemGetInfo reports MemFree (a community guard uses 8 GiB)."""
    container_memory: int = 1 * GIB
    """A running container holding this much or more is an error (seed 001)."""
    image_free: int = 64 * GIB
    """Free on the daemon's data root when the image must still be loaded there and the recipe
    gives no `image.size_bytes` (a ~35 GB image archive unpacks next to itself)."""
    docker_free_floor: int = 10 * GIB
    """Warning below: the rank's log and the container's writable layer live there."""
    clock_skew_s: float = 2.0
    fabric_mtu: int = 9000
    engine_args_timeout_s: float = 300.0
    """The engine-args probe container: importing vLLM in an image takes 10-60 s on a Spark; a
    first `docker run` of a 30 GB image adds its layer setup."""
    tcp_timeout_s: float = 3.0
    """One connect to the head's rendezvous port over a LAN: milliseconds when it works."""


class Reachability(StrictModel):
    """The real test: a temporary listener on the head, a connect from every node."""

    head: str
    address: str
    port: int
    listener: ListenerReport | None = None
    listener_error: str | None = None
    results: dict[str, ConnectResult] = Field(default_factory=dict, description="node -> result")
    sources: dict[str, str] = Field(default_factory=dict, description="node -> source address")
    errors: dict[str, str] = Field(default_factory=dict, description="node -> why not tested")
    elapsed_s: float = 0.0


class NotChecked(StrictModel):
    """A check that did not run, and why: a report never passes what it did not look at."""

    check: str = Field(description="the check's name, as in CHECKS")
    because: str


class PreflightReport(StrictModel):
    """What `cluster preflight` prints and writes to `preflight.json`."""

    recipe: str
    inventory: str
    nodes: int
    runtime: Runtime
    checks: tuple[str, ...] = Field(description="the checks that ran")
    not_checked: tuple[NotChecked, ...] = Field(
        default=(), description="the checks that did not run, each with why"
    )
    problems: tuple[Problem, ...]
    reachability: Reachability | None = None
    elapsed_s: float | None = None

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity is Severity.error]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity is Severity.warning]

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            **self.model_dump(mode="json"),
        }


class PreflightResult(StrictModel):
    """Everything preflight learned: the report, the facts and both plans."""

    report: PreflightReport
    facts: tuple[NodeFacts, ...]
    rendezvous: RendezvousPlan
    launch: LaunchPlan | None = None
    launch_error: str | None = None
