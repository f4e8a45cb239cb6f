"""Exec-readiness: can this node actually start a container from the image, right now?

`docker load` with the containerd image store can return (even exit 0 after printing `Error
unpacking image`) before the rootfs is unpacked; the first `docker run` then fails with
containerd's `stat /bin/sh: no such file or directory` or stalls while the layers unpack
(containerd#1785, unregistry PR #63, moby PR #53596). Seed 002's boot 1 died of it in one
second, and `--rm` deleted the evidence. So before any rank starts, every node proves it can
exec the image: create and start a throwaway container running `/bin/sh -c true` (or the
recipe's entrypoint with a version flag), removed afterwards (`--rm` is right here; rank
containers never use it).

A failure that matches a lazy-unpack signature is retried with exponential backoff (tenacity)
until the window (default 120 s, the recipe's `timeouts.exec_ready`) is spent; anything else
fails at once, because waiting does not fix a missing image or a missing runtime. The answer
per node: ready after N tries and T seconds, or the last error.

The probe is a command (`exec_ready_argv`) and a pure reading of its result (`classify`); the
retry loop (`wait_exec_ready`) only sequences them over a transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import time
from collections.abc import Sequence
from enum import StrEnum

from pydantic import Field
from tenacity import (
    AsyncRetrying,
    RetryError,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from orchestrator.deadlines import DEADLINES
from orchestrator.dockercli import DockerCli
from orchestrator.errors import ClusterError, CommandTimeout, tail
from orchestrator.models.base import StrictModel
from orchestrator.transport.base import Transport

NAME = "exec_ready"
DEFAULT_WINDOW_S = 120.0
PROBE_LABEL = "cluster.purpose=exec-ready"

# The lazy-unpack race, in the words containerd and runc use for it (issue 5; engine-lines
# corpus `docker-containerd.yaml`). Waiting can fix these.
LAZY_UNPACK_SIGNATURES: tuple[re.Pattern[str], ...] = (
    re.compile(r"stat \S+: no such file or directory"),
    re.compile(r"OCI runtime create failed"),
    re.compile(r"failed to create containerd task"),
    re.compile(r"parent snapshot \S+ does not exist"),
)

# Waiting fixes none of these, even when they arrive wrapped in `OCI runtime create failed`.
PERMANENT_SIGNATURES: tuple[re.Pattern[str], ...] = (
    re.compile(r"exec format error"),  # the wrong platform
    re.compile(r"[Nn]o such image"),
    re.compile(r"Unable to find image"),
    re.compile(r"Cannot connect to the Docker daemon"),
    re.compile(r"unknown or invalid runtime name"),
    re.compile(r"could not select device driver"),
    re.compile(r"permission denied while trying to connect"),
)


class Verdict(StrEnum):
    ready = "ready"
    lazy = "lazy"  # a lazy-unpack signature: retry
    failed = "failed"  # anything else: stop


def classify(exit_status: int | None, stdout: str, stderr: str) -> tuple[Verdict, str]:
    """What one `docker run` of the probe means, and the line that says so."""
    if exit_status == 0:
        return Verdict.ready, ""
    text = f"{stderr}\n{stdout}"
    evidence = _evidence(text) or f"exit status {exit_status}"
    if any(p.search(text) for p in PERMANENT_SIGNATURES):
        return Verdict.failed, evidence
    if any(p.search(text) for p in LAZY_UNPACK_SIGNATURES):
        return Verdict.lazy, evidence
    return Verdict.failed, evidence


def _evidence(text: str) -> str:
    """The most telling line: the first that names an error, else the first line (never the
    client's `See 'docker run --help'.` footer)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("See '")]
    for line in lines:
        if _TELLING.search(line):
            return line
    return lines[0] if lines else ""


_TELLING = re.compile(r"rror|failed|Cannot|[Nn]o such|denied|not found")


def exec_ready_argv(
    image: str,
    *,
    docker: DockerCli,
    command: Sequence[str] = ("/bin/sh", "-c", "true"),
    name: str | None = None,
) -> tuple[str, ...]:
    """`docker run --rm` of `command` in `image`: never a registry pull (a missing image is an
    answer, not a download), no network, no log, a recognisable name and label."""
    if not command:
        raise ValueError("the exec-readiness command is empty")
    entrypoint, *args = command
    return docker(
        "run",
        "--rm",
        "--pull",
        "never",
        "--name",
        name or f"cluster-exec-ready-{secrets.token_hex(4)}",
        "--label",
        PROBE_LABEL,
        "--network",
        "none",
        "--log-driver",
        "none",
        "--entrypoint",
        entrypoint,
        image,
        *args,
    )


class ExecReadiness(StrictModel):
    """One node's answer: ready after `tries` and `seconds`, or why not (the last error)."""

    node: str
    image: str
    ready: bool
    tries: int = Field(ge=0)
    seconds: float = Field(ge=0)
    last_error: str | None = None
    first_error: str | None = Field(default=None, description="the first failure seen, if any")
    gave_up: str | None = Field(
        default=None, description="'window' (retried until the budget ran out) or 'fatal'"
    )

    def summary(self) -> str:
        tries = f"{self.tries} {'try' if self.tries == 1 else 'tries'}, {self.seconds:.1f} s"
        if self.ready:
            return f"ready after {tries}"
        why = "still failing after" if self.gave_up == "window" else "failed after"
        return f"{why} {tries}: {self.last_error}"


class _Lazy(Exception):
    def __init__(self, evidence: str) -> None:
        self.evidence = evidence
        super().__init__(evidence)


async def wait_exec_ready(
    transport: Transport,
    image: str,
    *,
    window_s: float = DEFAULT_WINDOW_S,
    command: Sequence[str] = ("/bin/sh", "-c", "true"),
    initial_wait_s: float = 0.5,
    max_wait_s: float = 8.0,
) -> ExecReadiness:
    """Run the probe on one node until it is ready, a non-lazy error, or `window_s` is spent.

    Each try gets the rest of the window as its timeout (a lazy unpack may also *stall* the
    first `docker run`); a timed-out try leaves no container behind (`docker rm -f` by name).
    Connection errors propagate: they are the node's failure, not the image's."""
    node = transport.node.name
    docker = DockerCli.of(transport.node)
    started = time.monotonic()
    tries = 0
    first: str | None = None
    last: str | None = None

    async def one_try() -> None:
        nonlocal tries, first, last
        tries += 1
        name = f"cluster-exec-ready-{secrets.token_hex(4)}"
        argv = exec_ready_argv(image, docker=docker, command=command, name=name)
        left = max(1.0, window_s - (time.monotonic() - started))
        try:
            # The outer deadline also covers opening the session on a connection whose link
            # died (asyncssh would otherwise wait for its keepalive first).
            result = await asyncio.wait_for(transport.run(argv, timeout_s=left), left + 5)
        except TimeoutError:
            await _remove(transport, docker, name)
            last = f"`docker run` did not return within {left:.0f} s"
            first = first or last
            raise _Lazy(last) from None
        except CommandTimeout as exc:
            await _remove(transport, docker, name)
            last = f"`docker run` did not return within {left:.0f} s" + (
                f": {tail(exc.stderr, 1)}" if exc.stderr.strip() else ""
            )
            first = first or last
            raise _Lazy(last) from exc
        verdict, evidence = classify(result.exit_status, result.stdout, result.stderr)
        if verdict is Verdict.ready:
            return
        last = evidence
        first = first or evidence
        if verdict is Verdict.lazy:
            raise _Lazy(evidence)
        raise _Fatal(evidence)

    retrying = AsyncRetrying(
        retry=retry_if_exception_type(_Lazy),
        stop=stop_after_delay(window_s),
        wait=wait_exponential(multiplier=initial_wait_s, min=initial_wait_s, max=max_wait_s),
        reraise=False,
    )
    gave_up: str | None = None
    try:
        async for attempt in retrying:
            with attempt:
                await one_try()
    except RetryError:
        gave_up = "window"
    except _Fatal:
        gave_up = "fatal"
    return ExecReadiness(
        node=node,
        image=image,
        ready=gave_up is None,
        tries=tries,
        seconds=round(time.monotonic() - started, 3),
        last_error=last if gave_up else None,
        first_error=first,
        gave_up=gave_up,
    )


class _Fatal(Exception):
    pass


async def _remove(transport: Transport, docker: DockerCli, name: str) -> None:
    with contextlib.suppress(ClusterError, TimeoutError):
        rm = transport.run(docker.rm(name, force=True), timeout_s=DEADLINES.docker_call_s)
        # The transport's own deadline, and a second more for a channel that never closes.
        await asyncio.wait_for(rm, DEADLINES.docker_call_s + 5)
