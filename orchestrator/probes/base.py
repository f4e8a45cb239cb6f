"""A probe is one question asked of a node: an argv to run there, and a pure parser of its stdout.

Style rule 2 (pyinfra's facts): the command and the parser live together, and the parser is a
pure function of captured text, so every parser is tested on real output kept under
`tests/fixtures/probes/<probe>/`. Nothing here runs anything; the transport runs `argv` (quoted
with `shlex.join`, never a shell string) and hands the result to `Probe.interpret`.

`interpret` decides what an exit status means:

* exit 0: `parse(stdout)`;
* otherwise `on_failure(exit_status, stdout, stderr)`, where a probe has one: some answers come
  as failures ("nvidia-smi: command not found" means *no GPU*, not *broken probe*). It returns
  the model, or `None` when the failure is not one it understands;
* anything else raises `ProbeParseError` naming the probe, the exit status and the last line of
  stderr, so the one line the CLI prints already says what the node answered.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from orchestrator.errors import ProbeParseError, shown_argv, tail

T = TypeVar("T")


class ResultLike(Protocol):
    """What `Probe.read` needs of a command result (the transport's `CommandResult` has it)."""

    @property
    def node(self) -> str: ...
    @property
    def exit_status(self) -> int | None: ...
    @property
    def stdout(self) -> str: ...
    @property
    def stderr(self) -> str: ...


@dataclass(frozen=True)
class Probe(Generic[T]):
    """One question for a node: `argv` runs remotely, `parse` turns its stdout into a model.

    `parse` is pure and raises `ProbeParseError(what, probe=name)` on output it does not
    understand. `on_failure` (optional) turns a non-zero exit that *is* an answer into a model.
    """

    name: str
    argv: tuple[str, ...]
    parse: Callable[[str], T]
    # Receives the exit status (None: killed by a signal), stdout and stderr.
    on_failure: Callable[[int | None, str, str], T | None] | None = None

    def interpret(self, exit_status: int | None, stdout: str, stderr: str, *, node: str = "?") -> T:
        """What the node's answer means, or a `ProbeParseError` that says why it has none."""
        try:
            if exit_status == 0:
                return self.parse(stdout)
            if self.on_failure is not None:
                answer = self.on_failure(exit_status, stdout, stderr)
                if answer is not None:
                    return answer
        except ProbeParseError as exc:
            if node == "?":
                raise
            raise self._error(_detail(exc, self.name), node) from exc
        last = (tail(stderr, 1) or tail(stdout, 1)).strip()
        what = f"`{shown_argv(self.argv)}` exited {exit_status}" + (f": {last}" if last else "")
        raise self._error(what, node)

    def read(self, result: ResultLike) -> T:
        """`interpret` applied to a transport result; errors carry the result's node name."""
        return self.interpret(result.exit_status, result.stdout, result.stderr, node=result.node)

    def _error(self, what: str, node: str) -> ProbeParseError:
        return ProbeParseError(what, probe=self.name, node=node)


def _detail(exc: ProbeParseError, probe: str) -> str:
    """The message of a parser's error without the `probe NAME: ` prefix the error adds."""
    return exc.what.removeprefix(f"probe {probe}: ")


def fail(probe: str, what: str) -> ProbeParseError:
    """The error a parser raises: `raise fail(NAME, "no MemTotal line")`."""
    return ProbeParseError(what, probe=probe)


def parse_json(probe: str, text: str, where: str = "") -> Any:
    """`text` as JSON, or the error every probe gives for output that is not: `not JSON (why):
    excerpt`, after `where` (`"line 3 is "` for a JSON-lines probe)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(probe, f"{where}not JSON ({exc.msg}): {excerpt(text)!r}") from exc


def excerpt(text: str, limit: int = 80) -> str:
    """A short, one-line excerpt of unparseable output for an error message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
