"""Small asyncio helpers for the edge's fan-outs."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


async def resolved(value: T) -> T:
    """`value`, awaitable: the branch of an `asyncio.gather` that has nothing to wait for (a rank
    that never started, a probe not asked for), so the results still line up with their nodes."""
    return value
