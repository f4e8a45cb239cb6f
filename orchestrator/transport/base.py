"""The one way the orchestrator talks to a node: run an argv, or stream its output by line.

Implementations: `ssh.py` (asyncssh; Sparks and the testbed), `local.py` (subprocesses; the
built-in simulated cluster) and `fake.py` (handler fake for core tests). Commands are always
argv lists; the SSH transport quotes them with `shlex.join`, never by interpolation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from orchestrator.errors import CommandFailed
from orchestrator.models.inventory import Node

# OpenSSH allows 10 sessions per connection (MaxSessions); stay under it so that followers,
# samplers and one-off commands on one node never see "open failed: administratively prohibited".
DEFAULT_CHANNEL_BUDGET = 8


@dataclass(frozen=True)
class ConnectOptions:
    """How to reach nodes. Host keys are always verified; accepting new ones is opt-in."""

    connect_timeout_s: float = 10.0
    connect_attempts: int = 3
    keepalive_interval_s: float = 15.0
    keepalive_count_max: int = 4
    channel_budget: int = DEFAULT_CHANNEL_BUDGET
    accept_new_host_keys: bool = False


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
    """One line of a streamed command. `end` is the separator that ended it: \\n, \\r or ''."""

    stream: Stream
    text: str
    end: str = "\n"


@dataclass
class LineSplitter:
    """Split a byte stream on both \\r and \\n: tqdm joins its progress updates with \\r.

    A \\r\\n pair is one line end. Bytes are decoded per line with replacement, so a
    multi-byte character split across chunks is never mangled.
    """

    _buf: bytearray = field(default_factory=bytearray)
    _pending_cr: bool = False

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for byte in chunk:
            if self._pending_cr:
                self._pending_cr = False
                if byte == 0x0A:  # \r\n: the \r already ended the line
                    continue
            if byte == 0x0A:
                out.append((self._take(), "\n"))
            elif byte == 0x0D:
                out.append((self._take(), "\r"))
                self._pending_cr = True
            else:
                self._buf.append(byte)
        return out

    def close(self) -> list[tuple[str, str]]:
        return [(self._take(), "")] if self._buf else []

    def _take(self) -> str:
        text = self._buf.decode("utf-8", errors="replace")
        self._buf.clear()
        return text


class Transport(Protocol):
    """One node's connection. `run` and `stream` may be called concurrently."""

    @property
    def node(self) -> Node: ...

    async def connect(self) -> None:
        """Open the connection (maps failures to NodeUnreachable / HostKeyError / AuthError)."""
        ...

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        stdin: bytes | None = None,
        check: bool = False,
    ) -> CommandResult:
        """Run to completion. A timeout raises CommandTimeout carrying the output so far."""
        ...

    def stream(self, argv: Sequence[str]) -> AsyncIterator[OutputLine]:
        """Yield output lines as they arrive; the iterator ends when the command exits."""
        ...

    async def close(self) -> None: ...
