"""A handler fake for core tests: decide each command's reply in a plain function, no I/O.

def handler(argv, stdin):
    if argv[:2] == ("cat", "/proc/meminfo"):
        return FakeReply(stdout=MEMINFO_TEXT)
    raise NodeUnreachable("...", node="n1", reason="refused")

transport = FakeTransport(node, handler)
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from orchestrator.errors import CommandFailed
from orchestrator.models.inventory import Node
from orchestrator.probes.batch import batch_output, unbatch
from orchestrator.transport.base import CommandResult, LineSplitter, OutputLine, Stream


@dataclass(frozen=True)
class FakeReply:
    exit_status: int = 0
    stdout: str = ""
    stderr: str = ""


Handler = Callable[[tuple[str, ...], bytes | None], FakeReply]


@dataclass
class FakeTransport:
    _node: Node
    handler: Handler
    calls: list[tuple[str, ...]] = field(default_factory=list)
    connect_error: Exception | None = None

    @property
    def node(self) -> Node:
        return self._node

    async def connect(self) -> None:
        if self.connect_error is not None:
            raise self.connect_error

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        stdin: bytes | None = None,
        check: bool = False,
    ) -> CommandResult:
        await self.connect()
        argv = tuple(argv)
        batch = unbatch(argv)
        if batch is not None:
            # A probe batch: each command answered by the handler, as the node's shell would run
            # them (probes/batch.py), so handlers see the commands and never the script.
            token, commands = batch
            answers = []
            for command in commands:
                self.calls.append(command)
                r = self.handler(command, None)
                answers.append((r.exit_status, r.stdout, r.stderr))
            reply = FakeReply(stdout=batch_output(token, answers))
        else:
            self.calls.append(argv)
            reply = self.handler(argv, stdin)
        result = CommandResult(
            node=self._node.name,
            argv=argv,
            exit_status=reply.exit_status,
            stdout=reply.stdout,
            stderr=reply.stderr,
            duration_s=0.0,
        )
        return result.check() if check else result

    async def stream(self, argv: Sequence[str]) -> AsyncIterator[OutputLine]:
        await self.connect()
        argv = tuple(argv)
        self.calls.append(argv)
        reply = self.handler(argv, None)
        for stream, text in ((Stream.stdout, reply.stdout), (Stream.stderr, reply.stderr)):
            splitter = LineSplitter()
            for line, end in [*splitter.feed(text.encode()), *splitter.close()]:
                yield OutputLine(stream, line, end)
        if reply.exit_status != 0:
            raise CommandFailed(
                node=self._node.name,
                argv=list(argv),
                exit_status=reply.exit_status,
                stderr=reply.stderr,
            )

    async def stream_chunks(
        self, argv: Sequence[str]
    ) -> AsyncGenerator[tuple[Stream, bytes], None]:
        await self.connect()
        argv = tuple(argv)
        self.calls.append(argv)
        reply = self.handler(argv, None)
        for stream, text in ((Stream.stdout, reply.stdout), (Stream.stderr, reply.stderr)):
            if text:
                yield stream, text.encode()
        if reply.exit_status != 0:
            raise CommandFailed(
                node=self._node.name,
                argv=list(argv),
                exit_status=reply.exit_status,
                stderr=reply.stderr,
            )

    async def close(self) -> None:
        return None
