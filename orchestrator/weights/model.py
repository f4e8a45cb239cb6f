"""What `cluster weights` talks about: a node's holding (what its copy is), the push's options,
the report per node (pydantic and frozen dataclasses; no I/O). The fields it shares with the
image push (a node as asked, a round, a node's row) are in `models/push.py`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import Field

from orchestrator.errors import WeightsError
from orchestrator.models.base import StrictModel
from orchestrator.models.push import AskedNode, PushedNode, PushRound
from orchestrator.transport import ConnectOptions

DEFAULT_ROOT = "/models"
GIB = 1 << 30


class Holding(AskedNode):
    """One node's copy, as its node program described it (`probe`)."""

    dest: str = ""
    exists: bool = False
    free_bytes: int | None = None
    free_path: str | None = None
    manifest_id: str | None = Field(default=None, description="the manifest recorded there")
    model: str | None = None
    complete: bool = False
    files: dict[str, str] = Field(default_factory=dict, description="path -> held|missing|…")
    held: dict[str, str] = Field(default_factory=dict, description="verified path -> sha256")
    extra: tuple[str, ...] = ()
    total_bytes: int | None = None
    cached_bytes: int | None = None
    mem: dict[str, int] = Field(default_factory=dict)

    @property
    def state(self) -> str:
        if not self.reachable:
            return "unreachable"
        if self.manifest_id is None:
            return "partial" if self.held else "none"
        return "complete" if self.complete else "incomplete"


class NodeAction(StrEnum):
    skipped = "skipped"  # held every file already
    sent = "sent"  # received what it lacked and verified it
    failed = "failed"


class NodeResult(PushedNode):
    action: NodeAction
    files_sent: int = 0
    bytes_needed: int = 0
    manifest_id: str | None = None
    error: str | None = None


class RoundReport(PushRound):
    files: int
    bytes: int


class WeightsReport(StrictModel):
    model: str
    source: str
    dest: str
    manifest_id: str
    files: int
    total_bytes: int
    sums_from_hub: int = 0
    sums_from_record: int = 0
    rounds: tuple[RoundReport, ...] = ()
    nodes: tuple[NodeResult, ...]
    seconds: float

    @property
    def failed(self) -> list[NodeResult]:
        return [n for n in self.nodes if n.action is NodeAction.failed]

    @property
    def ok(self) -> bool:
        return not self.failed

    def raise_for_failures(self) -> None:
        bad = self.failed
        if bad:
            raise WeightsError(
                f"{self.model} did not reach {len(bad)} of {len(self.nodes)} nodes whole: "
                + ", ".join(n.node for n in bad),
                hint="fix what each line names and push again: only what is missing is sent",
                more=tuple(f"{n.node}: {n.error or 'failed'}" for n in bad),
            )

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, **self.model_dump(mode="json")}


@dataclass(frozen=True)
class WeightsOptions:
    # How the push reaches the nodes: the caller's whole ConnectOptions, as for an image push.
    connect: ConnectOptions = field(default_factory=ConnectOptions)
    stall_timeout_s: float = 15.0  # a hop that moves nothing this long is dead
    max_rounds: int = 3
    headroom_bytes: int = 1 * GIB  # free space kept beyond what is sent
    headroom_fraction: float = 0.02  # ... or this share of the bytes sent, whichever is more
    verify: bool = False  # re-hash every node's copy before deciding what to send
    engine_args: tuple[str, ...] = ()  # the recipe's flags (which config/tokenizer files count)
    check_model: bool = True

    @property
    def connect_timeout_s(self) -> float:
        return self.connect.connect_timeout_s


@dataclass(frozen=True)
class WeightsEvent:
    """For a progress display. kind: plan (needs: node -> bytes), round (text), progress (node,
    bytes received), source (bytes sent), done (node, ok, text), note (text)."""

    kind: str
    node: str | None = None
    round: int = 0
    bytes: int | None = None
    ok: bool | None = None
    text: str = ""
    needs: dict[str, int] | None = None
