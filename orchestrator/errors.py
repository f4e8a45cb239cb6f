"""The whole error tree of `cluster`, caught once at the CLI.

Every error carries what happened, where (file, node, rank, run) and what to do, and maps to
one exit code from `ExitCode`. The CLI prints `str(error)` as one line; nothing else prints
tracebacks. Anything that is not a `ClusterError` is a bug: the CLI writes a crash file.

    ClusterError
    ├── ConfigError                      exit 2: usage or configuration
    │   ├── InventoryError               file, host, key
    │   └── RecipeError                  file, key
    ├── NodeError                        exit 3: a node could not be asked
    │   ├── NodeUnreachable              refused, timeout, no route, name not known, dropped
    │   ├── HostKeyError                 unknown or changed host key
    │   ├── AuthError                    the node refused our credentials
    │   ├── CommandFailed                non-zero exit, with argv and output tails
    │   ├── CommandTimeout               no exit in time; keeps the output that arrived
    │   └── ProbeParseError              a probe's output did not parse
    ├── UnhealthyCluster                 exit 3: one or more nodes failed a check
    ├── PreflightRefused                 exit 4: a doomed boot refused before touching anything
    ├── ImageError                       exit 5: image distribution or exec-readiness failed
    ├── WeightsError                     exit 9: weights did not reach every node whole
    ├── BootFailed                       exit 6: a rank exited or the barrier was missed
    └── RunStoreError                    exit 8: run directory missing, corrupt or locked
        └── RunLocked                    another live supervisor writes this run
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from enum import IntEnum

from orchestrator.redact import redact_argv


class ExitCode(IntEnum):
    """Process exit codes; `docs/exit-codes.md` is the table for people."""

    OK = 0
    INTERNAL = 1
    CONFIG = 2
    UNHEALTHY = 3
    PREFLIGHT_REFUSED = 4
    IMAGE_FAILED = 5
    BOOT_FAILED = 6
    STOPPED = 7
    RUN_STORE = 8
    WEIGHTS_FAILED = 9
    INTERRUPTED = 130


@dataclass(eq=False, repr=False)  # an exception compares and prints as exceptions do
class ClusterError(Exception):
    """Base of every expected failure: `what` happened at `where`; `hint` says what to do.

    `more`: further problems, one line each (a bad file can have several). `run_dir`: the run
    directory the failure belongs to, when there is one (the CLI prints it under the error
    line); a boot sets it on whatever error ends it."""

    # Not a field (no annotation): each class sets its own, and a boot may set an instance's
    # from its outcome.
    exit_code = ExitCode.INTERNAL

    what: str
    _: KW_ONLY
    where: str = ""
    hint: str = ""
    more: tuple[str, ...] = ()
    run_dir: str | None = None

    def __post_init__(self) -> None:
        # `str(err)` and `err.args` are the one line the CLI prints.
        super().__init__(self.line())

    def line(self) -> str:
        parts = [f"{self.where}: {self.what}" if self.where else self.what]
        if self.hint:
            parts.append(self.hint)
        return " — ".join(parts)

    def lines(self) -> list[str]:
        """The line, then one line per further problem (a bad file can have several)."""
        return [self.line(), *self.more]


class ConfigError(ClusterError):
    exit_code = ExitCode.CONFIG


class InventoryError(ConfigError):
    """A bad inventory: `where` is `file[:host][:key]`."""


class RecipeError(ConfigError):
    """A bad recipe: `where` is `file[:key]`."""


class NodeError(ClusterError):
    """A node could not answer; `node` names it (the inventory host name)."""

    exit_code = ExitCode.UNHEALTHY

    def __init__(self, what: str, *, node: str, hint: str = "") -> None:
        self.node = node
        super().__init__(what, where=f"node {node}", hint=hint)


class NodeUnreachable(NodeError):
    """Connecting failed. `reason` is one of: refused, timeout, no-route, dns, dropped, closed."""

    def __init__(self, what: str, *, node: str, reason: str, hint: str = "") -> None:
        self.reason = reason
        super().__init__(what, node=node, hint=hint)


class HostKeyError(NodeError):
    """The node's host key is unknown or differs from the known_hosts file we trust."""

    def __init__(self, what: str, *, node: str, known_hosts: str, hint: str = "") -> None:
        self.known_hosts = known_hosts
        super().__init__(what, node=node, hint=hint)


class AuthError(NodeError):
    """The node refused our user or key."""


def tail(text: str, lines: int = 20) -> str:
    """The last `lines` lines of `text`: what an error shows of a command's output."""
    return "\n".join(text.splitlines()[-lines:])


_LONGEST_ARG = 200  # characters of one argument an error line shows


def shown_argv(argv: Sequence[str]) -> str:
    """`argv` as one line of an error: redacted, quoted as a shell would need it (copy, paste,
    run), and an inline program (`python3 -c PROGRAM`, `sh -c SCRIPT`: hundreds of lines) shown
    by its size, so that the line still reaches what went wrong. The whole argv stays on the
    command errors (`_CommandError.argv`)."""
    shown = []
    for arg in redact_argv(list(argv)):
        if "\n" in arg:
            shown.append(f"<{len(arg.splitlines())}-line program>")
        elif len(arg) > _LONGEST_ARG:
            shown.append(f"{shlex.quote(arg[:_LONGEST_ARG])}…<{len(arg)} characters>")
        else:
            shown.append(shlex.quote(arg))
    return " ".join(shown)


class _CommandError(NodeError):
    """A command on a node went wrong; `argv` is what ran (the message shows it redacted)."""

    def __init__(self, what: str, *, node: str, argv: list[str], hint: str = "") -> None:
        self.argv = argv
        super().__init__(f"`{shown_argv(argv)}` {what}", node=node, hint=hint)


class CommandFailed(_CommandError):
    """A command exited non-zero. Carries the evidence: argv, exit status, output tails."""

    def __init__(
        self,
        *,
        node: str,
        argv: list[str],
        exit_status: int | None,
        stdout: str = "",
        stderr: str = "",
        hint: str = "",
    ) -> None:
        self.exit_status = exit_status
        self.stdout_tail = tail(stdout)
        self.stderr_tail = tail(stderr)
        last = (self.stderr_tail or self.stdout_tail).splitlines()[-1:] or [""]
        what = f"exited {exit_status}" + (f": {last[0]}" if last[0] else "")
        super().__init__(what, node=node, argv=argv, hint=hint)


class CommandTimeout(_CommandError):
    """A command ran past its deadline. The output received until then is kept (whole)."""

    def __init__(
        self,
        *,
        node: str,
        argv: list[str],
        timeout_s: float,
        stdout: str = "",
        stderr: str = "",
        answered: bool = False,
    ) -> None:
        self.timeout_s = timeout_s
        self.stdout = stdout
        self.stderr = stderr
        # The node itself answered before the command ran out of time (its sshd opened the
        # session): the command was slow (a busy dockerd, a loaded host), the node not lost.
        self.answered = answered
        super().__init__(
            f"did not finish within {timeout_s:g} s",
            node=node,
            argv=argv,
            hint="the output received so far is kept with the error",
        )


def answered_late(exc: BaseException) -> bool:
    """A command that ran out of time on a node that answered: slow, not unreachable."""
    return isinstance(exc, CommandTimeout) and exc.answered


class ProbeParseError(NodeError):
    """A probe's output did not have the expected shape."""

    def __init__(self, what: str, *, probe: str, node: str = "?") -> None:
        self.probe = probe
        super().__init__(f"probe {probe}: {what}", node=node)


class UnhealthyCluster(ClusterError):
    """Something on the nodes is not healthy: a node failed `cluster inventory check`, lacks a
    whole copy (`cluster weights status`), kept a rank `cluster stop` could not end cleanly, or
    requests failed (`cluster bench`)."""

    exit_code = ExitCode.UNHEALTHY


class PreflightRefused(ClusterError):
    """A boot that would fail was refused before any rank started: preflight or the NCCL check
    found the cause, so nothing is left on the nodes to clean up."""

    exit_code = ExitCode.PREFLIGHT_REFUSED


class ImageError(ClusterError):
    """The image is missing at its source, did not reach a node whole, or a node that loaded it
    cannot start a container from it yet (`cluster image push`, a boot's push step)."""

    exit_code = ExitCode.IMAGE_FAILED


class WeightsError(ClusterError):
    """A model's weights did not reach every node whole (`cluster weights`)."""

    exit_code = ExitCode.WEIGHTS_FAILED


class BootFailed(ClusterError):
    """The boot did not reach READY: a rank exited, a node was lost, or the post-load barrier was
    missed. Every rank's log is in the run directory (`cluster postmortem`)."""

    exit_code = ExitCode.BOOT_FAILED


class RunStoreError(ClusterError):
    """A run directory is missing, unreadable or not a run (`--run`, `cluster runs`)."""

    exit_code = ExitCode.RUN_STORE


class RunLocked(RunStoreError):
    """Another supervisor holds this run's lock and its heartbeat is fresh."""
