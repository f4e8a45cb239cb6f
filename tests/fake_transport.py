"""A handler fake for core tests: decide each command's reply in a plain function, no I/O.

def handler(argv, stdin):
    if argv[:2] == ("cat", "/proc/meminfo"):
        return FakeReply(stdout=MEMINFO_TEXT)
    raise NodeUnreachable("...", node="n1", reason="refused")

transport = FakeTransport(node, handler)
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field

from orchestrator.models.inventory import Node
from orchestrator.probes.batch import batch_output, unbatch
from orchestrator.transport.base import Stream, Transport


@dataclass(frozen=True)
class FakeReply:
    exit_status: int = 0
    stdout: str = ""
    stderr: str = ""


Handler = Callable[[tuple[str, ...], bytes | None], FakeReply]


@dataclass
class FakeTransport(Transport):
    _node: Node
    handler: Handler
    calls: list[tuple[str, ...]] = field(default_factory=list)
    connect_error: Exception | None = None

    async def connect(self) -> None:
        if self.connect_error is not None:
            raise self.connect_error

    async def _execute(
        self, argv: tuple[str, ...], timeout_s: float | None, stdin: bytes | None
    ) -> tuple[int | None, str, str]:
        batch = unbatch(argv)
        if batch is None:
            reply = self._ask(argv, stdin)
            return reply.exit_status, reply.stdout, reply.stderr
        # A probe batch: each command answered by the handler, as the node's shell would run
        # them (probes/batch.py), so handlers see the commands and never the script.
        token, commands = batch
        answers = []
        for command in commands:
            r = self._ask(command, None)
            answers.append((r.exit_status, r.stdout, r.stderr))
        return 0, batch_output(token, answers), ""

    async def stream_chunks(
        self, argv: Sequence[str]
    ) -> AsyncGenerator[tuple[Stream, bytes], None]:
        await self.connect()
        argv = tuple(argv)
        reply = self._ask(argv, None)
        for stream, text in ((Stream.stdout, reply.stdout), (Stream.stderr, reply.stderr)):
            if text:
                yield stream, text.encode()
        if reply.exit_status != 0:
            raise self._failed(argv, reply.exit_status, reply.stderr)

    def _ask(self, argv: tuple[str, ...], stdin: bytes | None) -> FakeReply:
        self.calls.append(argv)
        return self.handler(argv, stdin)
