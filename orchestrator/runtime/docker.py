"""Ranks as Docker containers on their nodes, driven over the node's transport (SSH).

The launch plan's `docker run -d` argv starts each rank (never `--rm`: a dead rank's container
and log are the evidence). Output is followed with `docker logs -f --timestamps`, whose lines
carry the RFC 3339 timestamps that make resuming exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Mapping, Sequence
from importlib import resources
from typing import Any

from orchestrator.deadlines import DEADLINES
from orchestrator.dockercli import DockerCli
from orchestrator.errors import (
    BootFailed,
    ClusterError,
    CommandFailed,
    CommandTimeout,
    NodeError,
    NodeUnreachable,
)
from orchestrator.models.memory import MemoryReading
from orchestrator.plan.launch import with_secret_env
from orchestrator.runtime.base import SAMPLE_TIMEOUT_S, STREAMS, ExitState, NodeSample, RankSpec
from orchestrator.transport import CommandResult, Transport

# A command's timeout bounds its run once the SSH channel is open; opening the channel has no
# deadline of its own, so on a cut link it waits for the connection's keepalive (~60 s). Every
# call here is bounded as a whole: its timeout plus this.
OPEN_GRACE_S = 1.0
# After a command ran late on a node whose sshd had opened its session, a trivial session is
# asked for within this: a node cut while the command ran cannot open one (it is lost since the
# attempt began), a busy one can (slow, not lost). Short, so a cut is still named within ~7 s.
PROBE_TIMEOUT_S = 2.0


def _cli(spec: RankSpec) -> DockerCli:
    """The rank's node's docker client: the same daemon the launch plan started it on."""
    return DockerCli.of(spec.node)


def _no_answer(spec: RankSpec, timeout_s: float, what: str) -> NodeUnreachable:
    """A node that did not answer in time: lost, as the supervisor counts it."""
    return NodeUnreachable(
        f"no answer within {timeout_s:g} s to `{what}`",
        node=spec.node.name,
        reason="timeout",
        hint="check the node's management link and sshd",
    )


def _sampler_source() -> str:
    return resources.files("orchestrator.runtime").joinpath("node_sampler.py").read_text()


class DockerRuntime:
    def __init__(self, transports: Mapping[str, Transport]) -> None:
        self.transports = transports  # by node name
        self._pids: dict[str, int] = {}
        self._sampler = _sampler_source()

    def _t(self, spec: RankSpec) -> Transport:
        return self.transports[spec.node.name]

    async def _run(
        self,
        spec: RankSpec,
        argv: Sequence[str],
        *,
        timeout_s: float,
        check: bool = False,
        label: str | None = None,
        stdin: bytes | None = None,
    ) -> CommandResult:
        """`transport.run`, bounded as a whole (channel open included)."""
        try:
            return await asyncio.wait_for(
                self._t(spec).run(argv, timeout_s=timeout_s, check=check, stdin=stdin),
                timeout_s + OPEN_GRACE_S,
            )
        except TimeoutError:
            raise _no_answer(spec, timeout_s, label or " ".join(argv[:3])) from None

    async def _still_answers(self, spec: RankSpec) -> bool:
        """Whether the node's sshd opens a session now: a trivial command, bounded. A session
        that opens but runs late still counts (the node answers)."""
        try:
            await self._run(spec, ["true"], timeout_s=PROBE_TIMEOUT_S, label="true")
        except CommandTimeout as exc:
            return exc.answered
        except ClusterError:
            return False
        return True

    async def _late(self, spec: RankSpec, exc: CommandTimeout, label: str) -> ClusterError:
        """A command past its deadline: slow when the node still answers (said with `label`,
        never a sampler's whole source), else no answer (the node is lost)."""
        if exc.answered and await self._still_answers(spec):
            return CommandTimeout(
                node=spec.node.name, argv=[label], timeout_s=exc.timeout_s, answered=True
            )
        return _no_answer(spec, exc.timeout_s, label)

    async def start(self, spec: RankSpec) -> None:
        if "--rm" in spec.docker_run:
            raise BootFailed(
                "refusing to start a rank with --rm",
                where=f"rank {spec.rank}",
                hint="rank containers must outlive their process so their logs survive",
            )
        # Secrets travel on the channel's stdin, never on the node's command line (launch.py).
        argv, stdin = with_secret_env(spec.docker_run, spec.env)
        result = await self._run(
            spec, argv, timeout_s=DEADLINES.docker_run_s, stdin=stdin, label="docker run"
        )
        if not result.ok:
            raise BootFailed(
                f"`docker run` failed on {spec.node.name} (exit {result.exit_status}): "
                f"{(result.stderr or result.stdout).strip().splitlines()[-1:] or ['']}",
                where=f"rank {spec.rank}",
                hint="nothing was removed; see the container with `docker ps -a` on that node",
            )

    async def follow(
        self, spec: RankSpec, since: str | None
    ) -> AsyncGenerator[tuple[str, list[bytes]], None]:
        argv = _cli(spec).logs(spec.name, follow=True, since=since)
        # Docker's log lines end at \n only (a tqdm \r stays inside its line); bytes are handed
        # on as read, a chunk's whole lines at a time, never decoded or re-joined here.
        partial = dict.fromkeys(STREAMS, b"")
        try:
            # aclosing: a follower that stops ends `docker logs -f` now, not at collection.
            async with contextlib.aclosing(self._t(spec).stream_chunks(argv)) as chunks:
                async for stream, chunk in chunks:
                    *lines, partial[stream] = (partial[stream] + chunk).split(b"\n")
                    if lines:
                        yield stream.value, [line + b"\n" for line in lines]
        except CommandFailed as exc:
            if "No such container" in exc.line():
                return
            raise
        for stream_name, rest in partial.items():
            if rest:
                yield stream_name, [rest + b"\n"]

    async def full_logs(self, spec: RankSpec) -> dict[str, bytes]:
        result = await self._run(
            spec, _cli(spec).logs(spec.name), timeout_s=DEADLINES.docker_full_logs_s
        )
        result.check()  # never hand back an error message as the rank's log
        return {"stdout": result.stdout.encode(), "stderr": result.stderr.encode()}

    async def tail(
        self, spec: RankSpec, lines: int, *, timeout_s: float | None = None
    ) -> list[tuple[str, bytes]]:
        argv = _cli(spec).logs(spec.name, tail=lines)
        try:
            result = await self._run(spec, argv, timeout_s=timeout_s or DEADLINES.docker_call_s)
        except CommandTimeout as exc:
            raise await self._late(spec, exc, f"docker logs {spec.name}") from None
        result.check()
        return [
            (stream, line.encode() + b"\n")
            for stream, text in (("stdout", result.stdout), ("stderr", result.stderr))
            for line in text.split("\n")
            if line
        ]

    async def state(self, spec: RankSpec, *, timeout_s: float | None = None) -> ExitState:
        argv = _cli(spec).inspect(spec.name, "{{json .State}}")
        try:
            result = await self._run(spec, argv, timeout_s=timeout_s or DEADLINES.docker_call_s)
        except CommandTimeout as exc:
            raise await self._late(spec, exc, f"docker inspect {spec.name}") from None
        if not result.ok:
            if "No such" in result.stderr:
                return ExitState(status="missing")
            result.check()
        data = json.loads(result.stdout)
        if data.get("Pid"):
            self._pids[spec.name] = int(data["Pid"])
        status = str(data.get("Status", "unknown"))
        exited = status in ("exited", "dead")
        return ExitState(
            status=status,
            exit_code=int(data["ExitCode"]) if exited else None,
            oom_killed=bool(data.get("OOMKilled")),
            finished_at=data.get("FinishedAt") if exited else None,
        )

    async def inspect(self, spec: RankSpec) -> dict[str, Any]:
        result = await self._run(
            spec, _cli(spec).inspect(spec.name), timeout_s=DEADLINES.docker_call_s
        )
        result.check()
        data = json.loads(result.stdout)
        return dict(data[0]) if data else {}

    async def sample(self, spec: RankSpec) -> NodeSample:
        pid = self._pids.get(spec.name)
        if pid is None:
            await self.state(spec, timeout_s=SAMPLE_TIMEOUT_S)
            pid = self._pids.get(spec.name, 0)
        label = "python3 -c <node_sampler.py>"  # the argv holds the whole sampler source
        try:
            result = await self._run(
                spec,
                ["python3", "-c", self._sampler, str(pid)],
                timeout_s=SAMPLE_TIMEOUT_S,
                label=label,
            )
        except CommandTimeout as exc:
            raise await self._late(spec, exc, label) from None
        if not result.ok:
            last = (result.stderr or result.stdout).strip().splitlines()[-1:] or [""]
            raise NodeError(
                f"the node sampler (python3) exited {result.exit_status}: {last[0]}",
                node=spec.node.name,
            )
        data = json.loads(result.stdout)
        return NodeSample(
            memory=MemoryReading.model_validate(data),  # the sampler prints the same names
            # read() or mmap, whichever the rank loads by (node_sampler.py: weight_bytes)
            rchar=data.get("weight_bytes", data.get("rchar")),
            read_bytes=data.get("read_bytes"),
            loadavg=data.get("loadavg"),
        )

    async def stop(self, spec: RankSpec, *, remove: bool = False) -> None:
        await self._run(spec, _cli(spec).stop(spec.name), timeout_s=DEADLINES.docker_stop_s)
        if remove:
            await self._run(
                spec, _cli(spec).rm(spec.name), timeout_s=DEADLINES.docker_call_s, check=True
            )
