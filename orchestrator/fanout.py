"""Do one thing on every node at once; every node gets its own answer.

`settle` never lets one node's failure hide another's: each node's outcome is a value, either a
result or the error it raised (Fabric's GroupResult, asyncio's gather(return_exceptions=True)).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from orchestrator.models.inventory import Node
from orchestrator.transport.base import DEFAULT_FANOUT

T = TypeVar("T")


@dataclass(frozen=True)
class NodeOutcome(Generic[T]):
    """What happened on one node: `value` when it worked, else `error`."""

    node: Node
    value: T | None = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


async def settle(
    nodes: Iterable[Node],
    fn: Callable[[Node], Awaitable[T]],
    limit: int = DEFAULT_FANOUT,
) -> list[NodeOutcome[T]]:
    """Run `fn(node)` for every node, at most `limit` at a time; outcomes in the nodes' order.

    Cancellation (Ctrl-C) is not swallowed: it propagates after the other tasks are cancelled.
    """
    gate = asyncio.Semaphore(max(1, limit))

    async def one(node: Node) -> NodeOutcome[T]:
        async with gate:
            try:
                return NodeOutcome(node, value=await fn(node))
            except Exception as exc:
                return NodeOutcome(node, error=exc)

    return list(await asyncio.gather(*(one(n) for n in nodes)))


async def settle_each(
    nodes: Iterable[Node],
    fn: Callable[[Node], Awaitable[T]],
    on_error: Callable[[Node, str], T],
    limit: int = DEFAULT_FANOUT,
) -> list[T]:
    """`settle`, with a node whose `fn` raised unexpectedly given its own value by `on_error`
    (its row, its facts: never the whole command's failure). `on_error` gets the error as
    `Type: message`."""
    outcomes = await settle(nodes, fn, limit)
    return [
        o.value if o.value is not None else on_error(o.node, f"{type(o.error).__name__}: {o.error}")
        for o in outcomes
    ]
