"""The one way the orchestrator talks to a node: run an argv, or stream its output by line.

Implementations: `ssh.py` (asyncssh; Sparks and the testbed), `local.py` (subprocesses; the
built-in simulated cluster) and `fake.py` (handler fake for core tests). Commands are always
argv lists; the SSH transport quotes them with `shlex.join`, never by interpolation.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from enum import StrEnum

from orchestrator.deadlines import DEADLINES
from orchestrator.errors import CommandFailed, ConfigError
from orchestrator.models.inventory import Node

# OpenSSH allows 10 sessions per connection (MaxSessions); stay under it so that followers,
# samplers and one-off commands on one node never see "open failed: administratively prohibited".
DEFAULT_CHANNEL_BUDGET = 8
# Nodes asked at once by checks and probes. Each node gets one connection, so no sshd limit is
# in play; the controller's CPU is (every handshake is a key exchange, ~5 ms of Python here).
# 16 keeps an 8-node cluster in one wave and a large inventory from starving the event loop's
# timeouts; `--fanout` sets it.
DEFAULT_FANOUT = 16
MAX_FANOUT = 1024


@dataclass(frozen=True)
class ConnectOptions:
    """How to reach nodes. Host keys are always verified; accepting new ones is opt-in."""

    connect_timeout_s: float = DEADLINES.connect_s
    connect_attempts: int = 3
    keepalive_interval_s: float = 15.0
    keepalive_count_max: int = 4
    channel_budget: int = DEFAULT_CHANNEL_BUDGET
    accept_new_host_keys: bool = False
    fanout: int = DEFAULT_FANOUT

    def __post_init__(self) -> None:
        # 0 would mean "no deadline" to asyncssh and a negative one fails per node later:
        # both are the user's typo, said once, before any node is asked.
        t = self.connect_timeout_s
        if not (isinstance(t, int | float) and math.isfinite(t) and t > 0):
            raise ConfigError(
                f"--connect-timeout {t!r}: expected seconds greater than 0", where="options"
            )
        if not (isinstance(self.fanout, int) and 1 <= self.fanout <= MAX_FANOUT):
            raise ConfigError(
                f"--fanout {self.fanout!r}: expected 1 to {MAX_FANOUT} nodes at a time",
                where="options",
            )


@dataclass(frozen=True)
class CommandResult:
    """What a command did: enough evidence to explain a failure without running it again."""

    node: str
    argv: tuple[str, ...]
    exit_status: int | None
    stdout: str
    stderr: str
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def check(self, hint: str = "") -> CommandResult:
        """Return self when the command exited 0, else raise `CommandFailed` with the tails."""
        if not self.ok:
            raise CommandFailed(
                node=self.node,
                argv=list(self.argv),
                exit_status=self.exit_status,
                stdout=self.stdout,
                stderr=self.stderr,
                hint=hint,
            )
        return self


class Stream(StrEnum):
    stdout = "stdout"
    stderr = "stderr"


@dataclass(frozen=True)
class OutputLine:
    """One line of a streamed command. `end` is the separator that ended it: \\n, \\r, \\r\\n
    or '' (the last bytes before the command ended); `text + end` is exactly what arrived."""

    stream: Stream
    text: str
    end: str = "\n"


_LINE_END = re.compile(rb"\r\n|\r|\n")


@dataclass
class LineSplitter:
    """Split a byte stream on both \r and \n: tqdm joins its progress updates with \r.

    A \r\n pair is one line end, also when the chunk boundary falls between the two. Bytes
    are decoded per line with replacement, so a multi-byte character split across chunks is
    never mangled. The split is one regex pass per chunk (the supervisor's hot path: thousands
    of lines a second per rank), not a loop over bytes.
    """

    _buf: bytes = b""

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        data = self._buf + chunk
        out: list[tuple[str, str]] = []
        start = 0
        for m in _LINE_END.finditer(data):
            if m.group() == b"\r" and m.end() == len(data):
                break  # maybe the first half of a \r\n: decide when the next bytes come
            text = data[start : m.start()].decode("utf-8", errors="replace")
            out.append((text, m.group().decode()))
            start = m.end()
        self._buf = data[start:]
        return out

    def close(self) -> list[tuple[str, str]]:
        rest, self._buf = self._buf, b""
        if rest.endswith(b"\r"):
            return [(rest[:-1].decode("utf-8", errors="replace"), "\r")]
        return [(rest.decode("utf-8", errors="replace"), "")] if rest else []


async def lines_of(
    chunks: AsyncIterator[tuple[Stream, bytes]],
) -> AsyncGenerator[OutputLine, None]:
    """Split each stream's chunks into lines on \\r and \\n (a line may span chunks)."""
    splitters = {Stream.stdout: LineSplitter(), Stream.stderr: LineSplitter()}
    try:
        async for stream, chunk in chunks:
            for text, end in splitters[stream].feed(chunk):
                yield OutputLine(stream, text, end)
    finally:
        # A consumer that stops early ends the command now, not at garbage collection.
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()
    for stream, splitter in splitters.items():
        for text, end in splitter.close():
            yield OutputLine(stream, text, end)


class Transport(ABC):
    """One node's connection. `run` and `stream` may be called concurrently.

    The contract is written here once: an implementation says how one command runs
    (`_execute`) and how its output streams (`stream_chunks`); the result and its check, the
    split into lines and the error a failed stream ends with are this class's."""

    _node: Node

    @property
    def node(self) -> Node:
        return self._node

    async def connect(self) -> None:
        """Open the connection (maps failures to NodeUnreachable / HostKeyError / AuthError).
        `run` calls it first, so an implementation must return at once when already open."""
        return None  # nothing to open by default (the local and fake transports)

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        stdin: bytes | None = None,
        check: bool = False,
    ) -> CommandResult:
        """Run to completion. A timeout raises CommandTimeout carrying the output so far."""
        argv = tuple(argv)
        await self.connect()
        started = time.monotonic()
        status, stdout, stderr = await self._execute(argv, timeout_s, stdin)
        result = CommandResult(
            node=self._node.name,
            argv=argv,
            exit_status=status,
            stdout=stdout,
            stderr=stderr,
            duration_s=time.monotonic() - started,
        )
        return result.check() if check else result

    @abstractmethod
    async def _execute(
        self, argv: tuple[str, ...], timeout_s: float | None, stdin: bytes | None
    ) -> tuple[int | None, str, str]:
        """Run `argv` once on the node: (exit status, stdout, stderr)."""

    async def stream(self, argv: Sequence[str]) -> AsyncIterator[OutputLine]:
        """Yield output lines as they arrive; the iterator ends when the command exits."""
        # aclosing: a consumer that stops early ends the command now, not at collection.
        async with contextlib.aclosing(lines_of(self.stream_chunks(argv))) as lines:
            async for line in lines:
                yield line

    @abstractmethod
    def stream_chunks(self, argv: Sequence[str]) -> AsyncGenerator[tuple[Stream, bytes], None]:
        """Yield (stream, bytes) as they are read, unsplit; for followers that batch lines.
        A command that does not exit 0 ends the iteration with `_failed`'s error."""

    def _failed(self, argv: Sequence[str], status: int | None, stderr: str) -> CommandFailed:
        """The error a streamed command ends with when it did not exit 0."""
        return CommandFailed(
            node=self._node.name, argv=list(argv), exit_status=status, stderr=stderr
        )

    async def close(self) -> None:
        """Close the connection."""
        return None  # nothing to close unless an implementation opened something
