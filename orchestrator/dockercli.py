"""The `docker` client of one node: the only place that spells a `docker` command line.

A node's daemon may listen somewhere other than the default socket; the inventory says where
(`docker_host`, docs/inventory.md). Every command for that node must then carry `--host`:
an SSH session does not inherit the controller's environment, and sshd passes a client's
DOCKER_HOST only where `AcceptEnv` allows it, so the flag is what reaches the node's daemon
everywhere. Issue 14 found the launch plan adding `--host` while following, inspecting and
stopping a rank ran plain `docker`: the boot started ranks it then could not follow ("No such
container") or stop. So nothing outside this module writes `"docker"` as argv[0]; callers build
every command from `DockerCli.of(node)` (or `DockerCli()` for the controller's own daemon).

Pure: it builds argv tuples; the caller's transport runs them.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.models.inventory import Node

STOP_GRACE_S = 10
"""`docker stop -t`: what a rank gets to flush its log before SIGKILL."""


@dataclass(frozen=True)
class DockerCli:
    """`docker [--host H] ...` for one daemon. `host` None: the client's default daemon."""

    host: str | None = None

    @classmethod
    def of(cls, node: Node) -> DockerCli:
        """The client aimed at `node`'s daemon (its inventory `docker_host`, if any)."""
        return cls(node.docker_host)

    @property
    def base(self) -> tuple[str, ...]:
        """`docker` plus `--host H` when a host is named: the prefix of every command."""
        return ("docker", "--host", self.host) if self.host else ("docker",)

    def __call__(self, *args: str) -> tuple[str, ...]:
        """`docker [--host H] ARGS...`."""
        return (*self.base, *args)

    # The verbs more than one caller needs, spelled once.

    def logs(
        self,
        name: str,
        *,
        follow: bool = False,
        since: str | None = None,
        tail: int | None = None,
    ) -> tuple[str, ...]:
        """`docker logs --timestamps`: RFC 3339 stamps on every line make resuming exact."""
        argv = ["logs", *(["-f"] if follow else []), "--timestamps"]
        if since:
            argv += ["--since", since]
        if tail is not None:
            argv += ["--tail", str(tail)]
        return self(*argv, name)

    def inspect(self, name: str, fmt: str | None = None) -> tuple[str, ...]:
        return self("inspect", *(["--format", fmt] if fmt else []), name)

    def stop(self, name: str, grace_s: int = STOP_GRACE_S) -> tuple[str, ...]:
        return self("stop", "-t", str(grace_s), name)

    def rm(self, name: str, *, force: bool = False) -> tuple[str, ...]:
        return self("rm", *(["-f"] if force else []), name)

    def ps_labelled(self, label: str) -> tuple[str, ...]:
        """Every container (running or not) carrying `label`, one JSON object a line."""
        return self("ps", "-a", "--filter", f"label={label}", "--format", "{{json .}}")
