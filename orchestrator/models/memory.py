"""The memory reading of a node: what MemFree, MemAvailable, Cached and Dirty mean, once.

On a GB10 the GPU and the CPU share one pool, and `cudaMemGetInfo` free tracks `MemFree`, not
`MemAvailable`: page cache from reading weights counts as used (unslothai/unsloth PR #10704,
measured on a GB10). So the supervisor samples these four per node during a load, and the
page-cache watcher weighs MemFree against Cached.

The runtime's sample (`NodeSample`), the reducer's `Sample` event and its `RankState` take
this model; the parsed /proc/meminfo (`probes.meminfo.MemInfo`) has the same fields with every
value present, and `MemoryReading.of` reads a reading off it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class MemoryReading(BaseModel):
    """A node's memory from /proc/meminfo, in bytes; None where the reading lacks a value."""

    model_config = ConfigDict(frozen=True)

    mem_free: int | None = Field(
        default=None, description="MemFree: what cudaMemGetInfo reports as free on a GB10"
    )
    mem_available: int | None = Field(
        default=None, description="MemAvailable: free plus what the kernel could reclaim"
    )
    cached: int | None = Field(
        default=None, description="Cached: page cache, including weights read from disk or NFS"
    )
    dirty: int | None = Field(default=None, description="Dirty: page cache not yet written back")

    @staticmethod
    def of(source: object) -> MemoryReading:
        """The reading among another model's fields of the same names (a `Sample`, a
        `MemInfo`): just these four, so a `MemoryReading` compares equal to another."""
        return MemoryReading(**{name: getattr(source, name) for name in MemoryReading.model_fields})
