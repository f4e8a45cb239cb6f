"""`/proc/meminfo`: the numbers the page-cache watcher and the GB10 memory floor need.

What MemFree, MemAvailable, Cached and Dirty mean (on a GB10, MemFree is what the GPU sees as
free) is `models.memory.MemoryReading`'s to say; `MemoryReading.of` reads one off a `MemInfo`.
The kernel prints kB (KiB); the model holds bytes.
"""

from __future__ import annotations

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.probes.base import Probe, excerpt, fail

NAME = "meminfo"

# /proc/meminfo key -> MemInfo field. Every key here exists on any kernel since 3.14.
_FIELDS = {
    "MemTotal": "mem_total",
    "MemFree": "mem_free",
    "MemAvailable": "mem_available",
    "Buffers": "buffers",
    "Cached": "cached",
    "Dirty": "dirty",
    "SwapTotal": "swap_total",
    "SwapFree": "swap_free",
}


class MemInfo(StrictModel):
    """Memory of one node, in bytes, every value present (preflight computes with them). The
    fields a `MemoryReading` has mean what it says they mean (models/memory.py)."""

    mem_total: int = Field(ge=0)
    mem_free: int = Field(ge=0)
    mem_available: int = Field(ge=0)
    buffers: int = Field(ge=0)
    cached: int = Field(ge=0)
    dirty: int = Field(ge=0)
    swap_total: int = Field(ge=0)
    swap_free: int = Field(ge=0)


def parse_meminfo_table(stdout: str) -> dict[str, int]:
    """Every `Key: value [kB]` line of /proc/meminfo, values in bytes (unitless counts as is)."""
    table: dict[str, int] = {}
    for number, line in enumerate(stdout.splitlines(), start=1):
        if not line.strip():
            continue
        key, colon, rest = line.partition(":")
        words = rest.split()
        if not colon or not key.strip() or not 1 <= len(words) <= 2:
            raise fail(NAME, f"line {number} is not `Key: value [kB]`: {excerpt(line)!r}")
        value, unit = words[0], words[1] if len(words) == 2 else ""
        if not value.isdigit() or unit not in ("", "kB"):
            raise fail(NAME, f"line {number} has no count in kB: {excerpt(line)!r}")
        table[key.strip()] = int(value) * (1024 if unit == "kB" else 1)
    return table


def parse_meminfo(stdout: str) -> MemInfo:
    """`cat /proc/meminfo` -> `MemInfo` (bytes)."""
    table = parse_meminfo_table(stdout)
    missing = [key for key in _FIELDS if key not in table]
    if missing:
        raise fail(NAME, f"no {', '.join(missing)} in /proc/meminfo: {excerpt(stdout)!r}")
    return MemInfo(**{field: table[key] for key, field in _FIELDS.items()})


MEMINFO: Probe[MemInfo] = Probe(name=NAME, argv=("cat", "/proc/meminfo"), parse=parse_meminfo)
