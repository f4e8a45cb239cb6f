"""The runtime interface: start a rank detached, follow its output, read its exit state, stop it."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.models.inventory import Node
from orchestrator.models.memory import MemoryReading

STREAMS = ("stdout", "stderr")

# How long a node may take to answer the supervisor's 2-second sampling (a sample, a container
# state) before it counts as not answering: under the cadence's double.
SAMPLE_TIMEOUT_S = 4.0


@dataclass(frozen=True)
class RankSpec:
    """Everything needed to run one rank on its node, from the launch plan."""

    rank: int
    node: Node
    name: str  # container name (docker) or process folder name; deterministic per run and rank
    argv: tuple[str, ...]  # the engine's program and arguments
    env: Mapping[str, str] = field(default_factory=dict)
    docker_run: tuple[str, ...] = ()  # the whole `docker run -d ...` argv (docker runtime)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExitState:
    """What the runtime says about a rank's process."""

    status: str  # created, running, exited, missing
    exit_code: int | None = None
    oom_killed: bool = False
    signal: str | None = None
    finished_at: str | None = None

    @property
    def running(self) -> bool:
        return self.status in ("created", "running", "restarting")

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "oom_killed": self.oom_killed,
            "signal": self.signal,
            "finished_at": self.finished_at,
        }


@dataclass(frozen=True)
class NodeSample:
    """One reading of a rank's node (meminfo) and its processes (I/O counters)."""

    memory: MemoryReading
    rchar: int | None
    read_bytes: int | None
    loadavg: float | None = None

    def as_json(self) -> dict[str, Any]:
        """Flat, as a line of samples.jsonl has it (docs/run-directory.md)."""
        return {
            **self.memory.model_dump(),
            "rchar": self.rchar,
            "read_bytes": self.read_bytes,
            "loadavg": self.loadavg,
        }


class Runtime(Protocol):
    async def start(self, spec: RankSpec) -> None:
        """Start detached; a rank that fails to start raises (nothing is removed)."""
        ...

    def follow(
        self, spec: RankSpec, since: str | None
    ) -> AsyncGenerator[tuple[str, list[bytes]], None]:
        """Yield (stream, raw lines) as `docker logs --timestamps` prints them, a batch at a
        time (each line ends in \\n), from `since` (an RFC 3339 timestamp, inclusive) on; ends
        when the rank has exited and all is read."""
        ...

    async def full_logs(self, spec: RankSpec) -> dict[str, bytes]:
        """The node's whole record of the rank's output, per stream, for reconciliation."""
        ...

    async def tail(
        self, spec: RankSpec, lines: int, *, timeout_s: float | None = None
    ) -> list[tuple[str, bytes]]:
        """The last `lines` raw lines of each stream (`docker logs --tail`), without following.
        `timeout_s`: as `state`'s."""
        ...

    async def state(self, spec: RankSpec, *, timeout_s: float | None = None) -> ExitState:
        """The container's state. `timeout_s`: how long the node may take to answer (None: the
        runtime's default); the supervisor's sampling passes SAMPLE_TIMEOUT_S, so a node cut
        off while it is asked is found as fast as by a failed sample."""
        ...

    async def inspect(self, spec: RankSpec) -> dict[str, Any]: ...

    async def sample(self, spec: RankSpec) -> NodeSample: ...

    async def stop(self, spec: RankSpec, *, remove: bool = False) -> None: ...
