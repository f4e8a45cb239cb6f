"""The typed files of a run's `nodes/<node>/` folder: where the kernel window starts and what
was read into `kernel.log`.

`kernel.json` is written at boot start (the position) and rewritten at every collection (the
position, plus what the last read found). The clock offset (node minus controller, Cristian's
midpoint like `probes/clock.py`) is what moves a kernel line's time onto the controller's clock
when the postmortem merges it into the timeline.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel

Source = Literal["journal", "dmesg", "file", "denied", "none"]
"""Where a node's kernel log was read: the systemd journal (`journalctl -k`), the ring buffer
(`dmesg`), a test's fixture file (CLUSTER_KERNEL_LOG), `denied` (a privilege is missing) or
`none` (neither tool answered)."""

KERNEL_LOG = "kernel.log"
KERNEL_JSON = "kernel.json"


def node_dir(node: str) -> str:
    """The run-relative folder of one node's files."""
    return f"nodes/{node}"


class Position(StrictModel):
    """Where a node's kernel log stood when the boot began."""

    source: Source
    cursor: str | None = Field(default=None, description="journal: the cursor of the last entry")
    mono_s: float | None = Field(
        default=None, description="dmesg: the last line's monotonic time (seconds since boot)"
    )
    offset_bytes: int | None = Field(default=None, description="file: its size at boot start")
    boot_id: str | None = Field(default=None, description="/proc/sys/kernel/random/boot_id")
    boot_wall: float | None = Field(
        default=None,
        description="the node's wall clock at its kernel's boot (now - uptime): dmesg times "
        "plus this are wall times (approximate: printk's clock drifts from the wall clock)",
    )
    noted_at: float = Field(description="controller time when the position was noted")
    error: str | None = None
    hint: str | None = Field(default=None, description="how to grant the missing privilege")


class ClockOffset(StrictModel):
    offset_s: float = Field(description="node clock minus controller clock")
    uncertainty_s: float


class KernelWindow(StrictModel):
    """`nodes/<node>/kernel.json`: the position, and what the last collection read."""

    schema_version: Literal[1] = 1
    node: str
    position: Position
    clock: ClockOffset | None = None
    collected_at: float | None = None
    bytes: int = 0
    lines: int = 0
    truncated: bool = Field(
        default=False, description="more than the size bound: the oldest lines were dropped"
    )
    wrapped: bool = Field(
        default=False, description="dmesg: the ring buffer no longer reaches back to the position"
    )
    error: str | None = None
    hint: str | None = None


class KernelHealth(StrictModel):
    """What preflight asks a node about its kernel and fabric before a boot (`health.py`)."""

    node: str
    remove_ipc: tuple[tuple[str, str], ...] = Field(
        default=(),
        description="(value, file) of every RemoveIPC= set in logind's configuration, in the "
        "order logind reads them: the last one wins; none set: systemd's compiled default",
    )
    iface: str = ""
    speed_mbps: int | None = Field(default=None, description="negotiated (/sys/class/net/*/speed)")
    rated_mbps: int | None = Field(
        default=None, description="the fastest of ethtool's supported link modes"
    )
    recent_source: Source = "none"
    xid: int = 0
    aer: int = 0
    link_down: int = 0
    evidence: tuple[str, ...] = Field(default=(), description="the first such lines, verbatim")
    error: str | None = None
    hint: str | None = None
