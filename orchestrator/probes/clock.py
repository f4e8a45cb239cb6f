"""`date +%s.%N`: a node's clock, read between two readings of the controller's clock.

The offset is the node's time minus the midpoint of the controller's send and receive times;
half the round trip bounds the error (Cristian's algorithm). Skew does not stop NCCL, but it
makes every cross-rank comparison lie: log lines from eight nodes merged by timestamp, the
barrier window ("first rank finished loading at T"), and the postmortem's timeline. Preflight
warns past a bound, with the uncertainty stated.

`%N` is GNU date (DGX OS, Debian); a date without it prints whole seconds or a literal `N`,
which parses to whole seconds (uncertainty then includes the missing fraction).
"""

from __future__ import annotations

import re

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.probes.base import Probe, excerpt, fail

NAME = "clock"
_EPOCH = re.compile(r"^(\d+)(?:\.(\d+))?")


class ClockSample(StrictModel):
    """One reading of a node's clock against the controller's."""

    node_time: float = Field(description="the node's clock, seconds since the epoch")
    sent: float = Field(description="the controller's clock when the command was sent")
    received: float = Field(description="the controller's clock when the answer came back")
    whole_seconds: bool = Field(default=False, description="the node printed no fraction")

    @property
    def offset_s(self) -> float:
        """Node minus controller, positive when the node is ahead."""
        return self.node_time - (self.sent + self.received) / 2

    @property
    def uncertainty_s(self) -> float:
        return (self.received - self.sent) / 2 + (1.0 if self.whole_seconds else 0.0)


def parse_epoch(stdout: str) -> tuple[float, bool]:
    """`1764430285.123456789` -> (seconds, whole_seconds)."""
    text = stdout.strip()
    match = _EPOCH.match(text)
    if match is None:
        raise fail(NAME, f"not seconds since the epoch: {excerpt(text)!r}")
    if match.group(2) is None:
        return float(match.group(1)), True
    return float(f"{match.group(1)}.{match.group(2)}"), False


def clock_sample(stdout: str, sent: float, received: float) -> ClockSample:
    """Pure: the node's answer and the controller's two readings -> `ClockSample`."""
    node_time, whole = parse_epoch(stdout)
    return ClockSample(node_time=node_time, sent=sent, received=received, whole_seconds=whole)


CLOCK: Probe[tuple[float, bool]] = Probe(name=NAME, argv=("date", "+%s.%N"), parse=parse_epoch)
