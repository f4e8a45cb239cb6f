"""`cluster nccl-check`: prove the ranks can meet and all-reduce, before an 80-minute weight load.

One short-lived container per rank, from the recipe's image, with exactly the boot's `docker run`
options (network, ipc, GPUs, ulimits, volumes, extra), env (the recipe's plus the rendezvous
plan's per-host variables) and rendezvous (the head's fabric address and `ports.rendezvous`).
Instead of the engine it runs `orchestrator/scripts/nccl_allreduce.py`: a torch.distributed
TCPStore on the head, `init_process_group` (NCCL with GPUs, Gloo without, as on the testbed), an
all-reduce whose sum is checked, and a small bandwidth sweep.

The plan (`plan_nccl_check`) and the reading of each rank's log (`parse_rank_log`) are pure;
`run_nccl_check` starts the containers, waits, collects `docker logs --timestamps`, removes the
containers (their logs are kept in the report and the run directory) and names the rank that
could not join, with its last lines.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from orchestrator.aio import resolved
from orchestrator.deadlines import DEADLINES
from orchestrator.dockercli import DockerCli
from orchestrator.errors import ClusterError, CommandTimeout, PreflightRefused
from orchestrator.facts import FactsRequest, gather_facts
from orchestrator.logtail import readable_tail
from orchestrator.models.base import StrictModel
from orchestrator.models.events import NcclCheck
from orchestrator.models.inventory import Inventory
from orchestrator.models.recipe import Recipe
from orchestrator.plan.launch import (
    LaunchVariant,
    PlanError,
    RankLaunch,
    plan_launch,
    with_secret_env,
)
from orchestrator.plan.rendezvous import RendezvousPlan, plan_rendezvous
from orchestrator.runstore import Run, new_run_id
from orchestrator.scripts import script_text
from orchestrator.transport import ConnectOptions, Transport, TransportFactory
from orchestrator.transport.pool import node_transports

PURPOSE = "nccl"
SCRIPT = "nccl_allreduce.py"
PREFIX = "NCCLCHECK "
Backend = Literal["auto", "nccl", "gloo"]

# Stages a rank reaches, in order (the script's events).
STAGES = ("start", "torch", "store", "joined", "allreduce", "done")


@dataclass(frozen=True)
class NcclCheckOptions:
    """How the check runs. Timeouts are named after what they bound."""

    timeout_s: float = 120.0
    """torch.distributed's timeout inside each rank: the store connect and the group init."""
    startup_s: float = 120.0
    """On top of `timeout_s`, for `docker run` and `import torch` (8 ranks on a small host)."""
    backend: Backend = "auto"
    sizes: tuple[int, ...] = ()
    """Bytes per all-reduce of the sweep; empty: the script's default for the backend."""
    iters: int = 5
    image: str | None = None
    """Run this image instead of the recipe's (the testbed runs the host's Python in busybox)."""
    python: str = "python3"
    """The interpreter inside the container."""
    volumes: tuple[str, ...] = ()
    """Extra bind mounts for the check's containers only (e.g. a Python installation)."""
    nccl_debug: bool = True
    """NCCL_DEBUG=INFO, so the log says which transport NCCL chose (NET/IB or NET/Socket)."""
    keep: bool = False
    """Keep the containers after the check (they are removed by default: the logs are kept)."""


class BandwidthSample(StrictModel):
    bytes: int
    seconds: float
    algbw_gbps: float
    busbw_gbps: float


class RankLog(StrictModel):
    """What one rank's log says (pure reading of `NCCLCHECK` lines and NCCL's INFO lines)."""

    stage: str | None = Field(default=None, description="the last stage reached")
    backend: str | None = None
    torch: str | None = None
    sum: float | None = None
    expected: float | None = None
    sum_ok: bool | None = None
    transport: str | None = Field(default=None, description="NET/IB, NET/Socket or gloo/tcp")
    bandwidth: tuple[BandwidthSample, ...] = ()
    elapsed_s: float | None = None
    error: str | None = None
    error_stage: str | None = None
    missing_ranks: tuple[int, ...] | None = None

    @property
    def joined(self) -> bool:
        return self.stage in ("joined", "allreduce", "done") or (
            self.stage == "error" and self.error_stage in ("allreduce", "sweep")
        )

    @property
    def reached_store(self) -> bool:
        return self.joined or self.stage == "store" or self.error_stage == "init"


_NCCL_VIA = re.compile(r"via (NET/[A-Za-z]+)")
_NCCL_USING = re.compile(r"Using network (\w+)")


def _is_error_line(line: str) -> bool:
    """The script's `NCCLCHECK {"event": "error", ...}` line: what failed, at which stage."""
    return PREFIX in line and '"event": "error"' in line


def parse_rank_log(lines: Sequence[str]) -> RankLog:
    """A rank's log lines (timestamps already stripped) -> `RankLog`. Pure."""
    fields: dict[str, Any] = {}
    bw: list[BandwidthSample] = []
    transport: str | None = None
    for line in lines:
        if transport is None:
            via = _NCCL_VIA.search(line)
            using = _NCCL_USING.search(line)
            if via:  # `via NET/IBext_v10/0` (a plugin build) is IB too
                transport = "NET/IB" if via.group(1).startswith("NET/IB") else via.group(1)
            elif using:
                transport = {"IB": "NET/IB", "Socket": "NET/Socket"}.get(
                    using.group(1), f"NET/{using.group(1)}"
                )
        at = line.find(PREFIX)
        if at < 0:
            continue
        try:
            event = json.loads(line[at + len(PREFIX) :])
        except json.JSONDecodeError:
            continue
        if not isinstance(event, dict):
            continue
        kind = event.get("event")
        if kind in STAGES:
            fields["stage"] = kind
        if kind == "torch":
            fields["backend"] = event.get("backend")
            fields["torch"] = event.get("version")
        elif kind == "allreduce":
            fields.update(sum=event.get("sum"), expected=event.get("expected"))
            fields["sum_ok"] = bool(event.get("ok"))
        elif kind == "bw":
            bw.append(
                BandwidthSample(
                    bytes=int(event["bytes"]),
                    seconds=float(event["seconds"]),
                    algbw_gbps=float(event["algbw_gbps"]),
                    busbw_gbps=float(event["busbw_gbps"]),
                )
            )
        elif kind == "done":
            fields["elapsed_s"] = event.get("t")
        elif kind == "error":
            fields["stage"] = "error"
            fields["error_stage"] = event.get("stage")
            fields["elapsed_s"] = event.get("t")
            fields["error"] = f"{event.get('type')}: {event.get('message')}"
            missing = event.get("missing_ranks")
            if isinstance(missing, list):
                fields["missing_ranks"] = tuple(int(r) for r in missing)
    if transport is None and fields.get("backend") == "gloo" and "stage" in fields:
        transport = "gloo/tcp"
    return RankLog(**fields, transport=transport, bandwidth=tuple(bw))


class RankCheck(StrictModel):
    """One rank's outcome: did it start, join, sum right; how fast; its last lines."""

    rank: int
    node: str
    container: str
    address: str | None = Field(default=None, description="the rank's fabric address")
    iface: str
    started: bool
    start_error: str | None = None
    finished: bool = Field(default=False, description="the container exited within the deadline")
    exit_code: int | None = None
    log: RankLog = Field(default_factory=RankLog)
    last_lines: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.started and self.exit_code == 0 and self.log.joined and bool(self.log.sum_ok)


class NcclCheckReport(StrictModel):
    recipe: str
    inventory: str
    run_id: str
    image: str
    head: str
    head_addr: str
    head_port: int
    backend: str
    ranks: tuple[RankCheck, ...]
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.ranks)

    def culprits(self) -> list[RankCheck]:
        """The ranks to blame: those that never reached the rendezvous store while others did,
        else those the others report missing, else every failed rank."""
        failed = [r for r in self.ranks if not r.ok]
        if not failed:
            return []
        reached = [r for r in self.ranks if r.log.reached_store]
        if reached:
            never = [r for r in failed if not r.log.reached_store]
            if never:
                return never
        missing = {m for r in self.ranks for m in (r.log.missing_ranks or ())}
        named = [r for r in failed if r.rank in missing]
        return named or failed

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "culprits": [r.rank for r in self.culprits()],
            **self.model_dump(mode="json"),
        }


# ------------------------------------------------------------------------------------------
# The plan (pure)


def check_argv(
    options: NcclCheckOptions, script: str, rank: int, world: int, addr: str, port: int
) -> list[str]:
    argv = [
        options.python,
        "-c",
        script,
        "--rank",
        str(rank),
        "--world",
        str(world),
        "--addr",
        addr,
        "--port",
        str(port),
        "--timeout",
        f"{options.timeout_s:g}",
        "--backend",
        options.backend,
        "--iters",
        str(options.iters),
    ]
    if options.sizes:
        argv += ["--sizes", ",".join(str(s) for s in options.sizes)]
    return argv


def plan_nccl_check(
    recipe: Recipe,
    inventory: Inventory,
    rendezvous: RendezvousPlan,
    run_id: str,
    options: NcclCheckOptions,
    script: str,
) -> tuple[RankLaunch, ...]:
    """Per rank, the check container's `docker run`: the boot's launch plan (`plan_launch`),
    the script instead of the engine. `PlanError` when the rendezvous is incomplete."""
    nnodes = len(inventory.nodes)
    head, port = rendezvous.head_addr or "", rendezvous.head_port
    debug = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"} if options.nccl_debug else {}
    variant = LaunchVariant(
        purpose=PURPOSE,
        label="nccl-check",
        argv=lambda rank: check_argv(options, script, rank, nnodes, head, port),
        image=options.image,
        volumes=options.volumes,
        env=debug,
    )
    return plan_launch(recipe, inventory, rendezvous, run_id, variant).ranks


_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) ?(.*)$")


def merge_timestamped(stdout: str, stderr: str) -> list[str]:
    """`docker logs --timestamps` stdout and stderr, merged by timestamp, timestamps removed."""
    entries: list[tuple[str, int, str]] = []
    for order, line in enumerate([*stdout.splitlines(), *stderr.splitlines()]):
        match = _TS.match(line)
        stamp, text = (match.group(1), match.group(2)) if match else ("", line)
        # RFC 3339 with nanoseconds, but docker trims trailing zeros: pad to compare as text.
        head, _, frac = stamp.rstrip("Z").partition(".")
        entries.append((f"{head}.{frac:0<9}" if stamp else "", order, text))
    entries.sort(key=lambda e: (e[0], e[1]))
    return [text for _, _, text in entries]


# ------------------------------------------------------------------------------------------
# Running it (thin)


async def _start(transport: Transport, launch: RankLaunch) -> str | None:
    """None when started, else why not."""
    try:
        argv, stdin = with_secret_env(launch.docker_argv, launch.env)
        result = await transport.run(argv, timeout_s=DEADLINES.nccl_start_s, stdin=stdin)
    except ClusterError as exc:
        return exc.line()
    if result.ok:
        return None
    return (result.stderr.strip() or result.stdout.strip() or f"exit {result.exit_status}")[-2000:]


async def _wait(transport: Transport, name: str, timeout_s: float) -> tuple[bool, int | None]:
    docker = DockerCli.of(transport.node)
    try:
        result = await transport.run(docker("wait", name), timeout_s=timeout_s)
    except CommandTimeout:
        await transport.run(docker("kill", name), timeout_s=DEADLINES.docker_call_s)
        return False, None
    text = result.stdout.strip()
    return True, int(text) if result.ok and text.lstrip("-").isdigit() else None


async def _logs(transport: Transport, name: str) -> list[str]:
    result = await transport.run(
        DockerCli.of(transport.node).logs(name), timeout_s=DEADLINES.nccl_logs_s
    )
    return merge_timestamped(result.stdout, result.stderr)


async def run_nccl_check(
    recipe: Recipe,
    inventory: Inventory,
    connect: ConnectOptions | None = None,
    options: NcclCheckOptions | None = None,
    *,
    run: Run | None = None,
    factory: TransportFactory | None = None,
) -> NcclCheckReport:
    """Start one check container per rank, wait, read every log, remove the containers.

    `PreflightRefused` when the plan cannot be made (node count, no fabric address); otherwise
    the report says what happened, and the caller refuses when it is not ok."""
    options = options or NcclCheckOptions()
    started = time.monotonic()
    run_id = run.id if run is not None else new_run_id()
    async with node_transports(inventory, connect or ConnectOptions(), factory) as transports:
        facts = await gather_facts(
            inventory, transports, FactsRequest(docker=False, clock=False, peers=False)
        )
        unreachable = [f for f in facts if not f.reachable]
        if unreachable:
            raise PreflightRefused(
                "cannot reach " + ", ".join(f.node for f in unreachable),
                hint="; ".join(v for f in unreachable for v in f.errors.values())[:500],
            )
        plan = plan_rendezvous(recipe, inventory, facts)
        try:
            launches = plan_nccl_check(
                recipe, inventory, plan, run_id, options, script_text(SCRIPT)
            )
        except PlanError as exc:
            raise PreflightRefused(
                f"nccl-check cannot plan the ranks: {exc}",
                hint="`cluster preflight` names every problem with its fix",
            ) from exc
        starts = await asyncio.gather(*(_start(transports[x.node], x) for x in launches))
        deadline = options.timeout_s + options.startup_s
        waits: list[tuple[bool, int | None]] = await asyncio.gather(
            *(
                _wait(transports[x.node], x.container, deadline)
                if err is None
                else resolved((False, None))
                for x, err in zip(launches, starts, strict=True)
            )
        )
        logs = await asyncio.gather(
            *(
                _logs(transports[x.node], x.container) if err is None else resolved([])
                for x, err in zip(launches, starts, strict=True)
            ),
            return_exceptions=True,
        )
        if not options.keep:
            await asyncio.gather(
                *(
                    transports[x.node].run(
                        DockerCli.of(transports[x.node].node).rm(x.container, force=True),
                        timeout_s=DEADLINES.docker_call_s,
                    )
                    for x in launches
                ),
                return_exceptions=True,
            )
    checks = []
    for launch, err, (finished, code), lines in zip(launches, starts, waits, logs, strict=True):
        text = lines if isinstance(lines, list) else [f"(could not read the log: {lines})"]
        checks.append(
            RankCheck(
                # Who and where: the rank's launch and its place in the rendezvous, as planned.
                **launch.model_dump(include={"rank", "node", "container"}),
                **plan.rank(launch.rank).model_dump(include={"address", "iface"}),
                started=err is None,
                start_error=err,
                finished=finished,
                exit_code=code,
                log=parse_rank_log(text),
                last_lines=readable_tail(text, 15, keep=_is_error_line),
            )
        )
    backends = {c.log.backend for c in checks if c.log.backend}
    report = NcclCheckReport(
        recipe=recipe.name,
        inventory=str(inventory.path),
        run_id=run_id,
        image=options.image or recipe.image.reference,
        head=plan.head,
        head_addr=plan.head_addr or "",
        head_port=plan.head_port,
        backend=",".join(sorted(backends)) or options.backend,
        ranks=tuple(checks),
        elapsed_s=round(time.monotonic() - started, 3),
    )
    if run is not None:
        write_nccl_check(run, report, {x.rank: got for x, got in zip(launches, logs, strict=True)})
    return report


def write_nccl_check(
    run: Run, report: NcclCheckReport, logs: Mapping[int, list[str] | BaseException]
) -> None:
    run.write_json("nccl-check.json", report.to_json())
    for rank, lines in logs.items():
        if isinstance(lines, list):
            run.write_text(f"rank-{rank}/nccl-check.log", "\n".join(lines) + "\n")
    run.append_event(
        NcclCheck(
            ok=report.ok,
            culprits=tuple(r.rank for r in report.culprits()),
            elapsed_s=report.elapsed_s,
        )
    )
