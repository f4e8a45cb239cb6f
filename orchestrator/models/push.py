"""What every node-to-node push reports, whatever it carries: a container image (`images/`) or a
model's weights (`weights/`, which sends its files through the images' chain). Each node as the
push asked it, each round of the chain, each node's row of the summary. The bases hold the fields
that mean the same in both pushes; `images/model.py` and `weights/model.py` add their own (after
these, so the base fields lead their JSON)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from orchestrator.models.base import StrictModel


class Mode(StrEnum):
    """How a round moves the bytes."""

    chain = "chain"  # node to node: the source feeds the first target, each target the next
    fanout = "fanout"  # the controller sends to a few targets at once (a hop did not work)


class AskedNode(StrictModel):
    """One node as a push asked it before sending: did it answer, and if not (or only in part),
    why."""

    node: str
    rank: int
    reachable: bool
    error: str | None = None


class PushRound(StrictModel):
    """One round: which source fed which targets, in which mode and why, how long, how many bytes
    crossed the wire."""

    round: int
    source: str
    mode: Mode
    mode_reason: str
    targets: tuple[str, ...]
    seconds: float
    wire_bytes: int | None = None


class PushedNode(StrictModel):
    """One node's row of a push's summary: what the push did there, when it was done, what the
    node received and from where. Each push names its own actions (`action`)."""

    node: str
    rank: int
    action: StrEnum
    seconds: float | None = Field(default=None, description="push start to this node holding it")
    received_bytes: int | None = None
    sends: int = Field(default=0, description="how many times the stream was sent to it")
    sent_from: str | None = None
