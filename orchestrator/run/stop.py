"""`cluster stop` and `cluster prune`: save every rank's whole log and inspect output into the
run directory first, then stop and remove that run's containers, matched by the run's labels
(never by image or name pattern)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from orchestrator.deadlines import DEADLINES
from orchestrator.dockercli import DockerCli
from orchestrator.errors import ClusterError
from orchestrator.kernel.hooks import collect_for_run
from orchestrator.models.events import Stopped
from orchestrator.models.inventory import Connection, Inventory
from orchestrator.models.run import Finding, Outcome
from orchestrator.plan.launch import LABEL_RUN
from orchestrator.run.context import RunContext
from orchestrator.run.status import runtime_for
from orchestrator.run_files import Verdict
from orchestrator.runstore import RUN_ID_RE, Run, RunStore, VerdictExists
from orchestrator.runtime.base import STREAMS, RankSpec, Runtime
from orchestrator.runtime.docker import DockerRuntime
from orchestrator.runtime.process import ProcessRuntime
from orchestrator.terminal import harmless
from orchestrator.transport import ConnectOptions, Transport
from orchestrator.transport.pool import close_transports, node_transports

# How long `cluster stop` waits for the run's controller to write STOPPED and let go: its
# heartbeat notices the request within HEARTBEAT_S, its supervisor's tick within a second, and
# reconciling the rank logs it followed takes a few seconds more on a slow node.
CONTROLLER_EXIT_S = 45.0


def stopped_finding(where: str) -> Finding:
    """`cluster stop` ended the run before it had a verdict of its own."""
    return Finding.verdict(
        "stop",
        Outcome.STOPPED,
        f"`cluster stop` ended the run {where}",
        advice="nothing failed; `cluster boot` starts it again",
    )


async def end_controller(run: Run, wait_s: float = CONTROLLER_EXIT_S) -> str | None:
    """Ask the run's live controller (a boot, a detached boot, a `cluster supervise`) to end,
    through the run's lock, and wait for it to let go. It writes the STOPPED verdict itself.
    Returns a line for people when it did not let go in time (the stop goes on regardless)."""
    if not run.supervisor_alive():
        return None
    holder = run.lock_holder() or {}
    run.request_stop(by="cluster stop")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        if not run.supervisor_alive():
            return None
    return (
        f"the run's {holder.get('owner', 'controller')} (pid {holder.get('pid')} on "
        f"{holder.get('host')}) did not end within {wait_s:.0f} s; its ranks are stopped anyway"
    )


def record_stopped(run: Run, where: str) -> None:
    """The STOPPED verdict, unless the run already has one (its controller wrote it, or it
    had ended before the stop): a verdict is written once."""
    if run.verdict() is None:
        with contextlib.suppress(VerdictExists):
            run.write_verdict(Verdict.of(stopped_finding(where)))


@dataclass
class StopReport:
    run_id: str
    saved: list[int] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    gone: list[int] = field(default_factory=list)  # ranks whose container no longer exists


async def save_rank(run: Run, spec: RankSpec, runtime: Runtime) -> None:
    """The node's complete log (as `full-<stream>.log`) and inspect output, kept with the run."""
    full = await runtime.full_logs(spec)
    for stream in STREAMS:
        run.write_text(f"rank-{spec.rank}/full-{stream}.log", full[stream].decode(errors="replace"))
    run.write_json(f"rank-{spec.rank}/inspect.json", await runtime.inspect(spec))
    state = await runtime.state(spec)
    run.write_json(f"rank-{spec.rank}/exit.json", state.as_json())


async def stop_and_remove(run: Run, spec: RankSpec, runtime: Runtime) -> None:
    """Stop a rank whose log is saved, save again (its last words and its exit state), remove."""
    await runtime.stop(spec)
    await save_rank(run, spec, runtime)
    await runtime.stop(spec, remove=True)


async def stop_run(ctx: RunContext, options: ConnectOptions | None = None) -> StopReport:
    runtime, transports = runtime_for(
        ctx, options or ConnectOptions(connect_timeout_s=DEADLINES.operator_connect_s)
    )
    report = StopReport(ctx.run.id)
    # Recorded with the event: what ranks print from now on (peers vanishing as they are
    # stopped one after another) is the stop's doing, and the postmortem sets it aside.
    began = time.time()

    async def one(spec: RankSpec) -> None:
        try:
            # Already removed (an earlier stop, prune): nothing to save or remove, and what
            # was saved then must not be overwritten.
            if (await runtime.state(spec)).status == "missing":
                report.gone.append(spec.rank)
                return
            await save_rank(ctx.run, spec, runtime)  # first: a stop that fails loses nothing
            report.saved.append(spec.rank)
        except ClusterError as exc:
            report.problems.append(
                f"rank {spec.rank} ({spec.node.name}): logs not saved: {exc.line()}"
            )
            return  # never remove what we could not save
        try:
            await stop_and_remove(ctx.run, spec, runtime)
            report.removed.append(spec.name)
        except ClusterError as exc:
            report.problems.append(f"rank {spec.rank} ({spec.node.name}): {exc.line()}")

    try:
        await asyncio.gather(*(one(s) for s in ctx.specs))
        await collect_for_run(ctx.run, transports, ctx.specs)  # each node's kernel window
    finally:
        await close_transports(transports)
    ctx.run.append_event(
        Stopped(
            began=began,
            saved=tuple(sorted(report.saved)),
            removed=tuple(sorted(report.removed)),
            gone=tuple(sorted(report.gone)),
        )
    )
    record_stopped(ctx.run, "while its ranks ran")
    return report


# -- prune ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leftover:
    node: str
    container: str
    run_id: str
    rank: str
    state: str


async def _list_leftovers(
    inventory: Inventory,
    transports: Mapping[str, Transport],
    problems: list[str] | None = None,
) -> list[Leftover]:
    """Every node's leftovers; a node that could not be asked is a line in `problems`."""
    problems = [] if problems is None else problems

    async def one(node_name: str) -> list[Leftover]:
        result = await transports[node_name].run(
            DockerCli.of(inventory.node(node_name)).ps_labelled(LABEL_RUN),
            timeout_s=DEADLINES.docker_call_s,
            check=True,
        )
        found = []
        for line in result.stdout.splitlines():
            row = json.loads(line)
            labels = dict(
                kv.split("=", 1) for kv in str(row.get("Labels", "")).split(",") if "=" in kv
            )
            found.append(
                Leftover(
                    node=node_name,
                    container=str(row["Names"]),
                    run_id=labels.get(LABEL_RUN, "?"),
                    rank=labels.get("cluster.rank", "?"),
                    state=str(row.get("State", "?")),
                )
            )
        return found

    results = await asyncio.gather(*(one(n.name) for n in inventory.nodes), return_exceptions=True)
    out: list[Leftover] = []
    for node, r in zip(inventory.nodes, results, strict=True):
        if isinstance(r, list):
            out += r
        elif isinstance(r, ClusterError):
            problems.append(f"{node.name}: not asked: {r.line()}")
        elif isinstance(r, ValueError | KeyError):  # not docker's JSON: say so, keep going
            problems.append(f"{node.name}: `docker ps` output did not parse: {r}")
        elif isinstance(r, BaseException):
            raise r
    return out


def run_age(run_id: str, now: datetime) -> timedelta:
    started = datetime.strptime(run_id.split("-")[0], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    return now - started


def _process_leftovers(inventory: Inventory) -> list[Leftover]:
    """The built-in simulated cluster's ranks: launcher folders whose process still runs."""
    runtime = ProcessRuntime()
    found = []
    for node in inventory.nodes:
        node_dir = runtime.root / node.name
        if not node_dir.is_dir():
            continue
        for rank_dir in sorted(node_dir.iterdir()):
            spec_file = rank_dir / "spec.json"
            if not spec_file.exists():
                continue
            labels = json.loads(spec_file.read_text()).get("labels", {})
            running = not (rank_dir / "exit.json").exists()
            found.append(
                Leftover(
                    node=node.name,
                    container=rank_dir.name,
                    run_id=str(labels.get(LABEL_RUN, "?")),
                    rank=str(labels.get("cluster.rank", "?")),
                    state="running" if running else "exited",
                )
            )
    return found


async def find_leftovers(
    inventory: Inventory,
    older_than: timedelta,
    options: ConnectOptions | None = None,
    problems: list[str] | None = None,
) -> list[Leftover]:
    """Containers (or simulated ranks) of earlier runs, at least `older_than` old. A node that
    could not be asked, or a container whose labels are not ours, is a line in `problems`."""
    problems = [] if problems is None else problems
    if inventory.connection is Connection.local:
        found = _process_leftovers(inventory)
    else:
        async with node_transports(
            inventory, options or ConnectOptions(connect_timeout_s=DEADLINES.operator_connect_s)
        ) as transports:
            found = await _list_leftovers(inventory, transports, problems)
    now = datetime.now(UTC)
    valid = []
    for f in found:
        if why := _invalid(f):
            problems.append(f"{f.node}: ignored {harmless(f.container)}: {why}")
        elif run_age(f.run_id, now) >= older_than:
            valid.append(f)
    return valid


_CONTAINER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$")


def _invalid(item: Leftover) -> str | None:
    """Why a value read back from a node may not name a path or a container, else None.

    Labels are whatever the node says: `cluster.run=…/../../x` must never become a folder
    under the run store, nor a rank a file name."""
    if not RUN_ID_RE.match(item.run_id):
        return f"label {LABEL_RUN}={item.run_id!r} is not a run id"
    if not item.rank.isdigit() or len(item.rank) > 6:
        return f"label cluster.rank={item.rank!r} is not a rank"
    if not _CONTAINER_NAME.match(item.container):
        return "not a container name"
    return None


async def prune(
    inventory: Inventory,
    leftovers: list[Leftover],
    store: RunStore,
    options: ConnectOptions | None = None,
) -> list[str]:
    """Save each leftover's logs and inspect output into its run (made if missing), then remove
    it. Returns one line per container: what was done."""
    if inventory.connection is Connection.local:
        return await _prune_processes(inventory, leftovers, store)
    async with node_transports(
        inventory, options or ConnectOptions(connect_timeout_s=DEADLINES.operator_connect_s)
    ) as transports:
        return await _prune_with(DockerRuntime(transports), inventory, leftovers, store)


async def _prune_processes(
    inventory: Inventory, leftovers: list[Leftover], store: RunStore
) -> list[str]:
    return await _prune_with(ProcessRuntime(), inventory, leftovers, store)


async def _prune_with(
    runtime: Runtime, inventory: Inventory, leftovers: list[Leftover], store: RunStore
) -> list[str]:
    """Every leftover at once, through the runtime that runs ranks, as `stop` does: saved,
    stopped, saved again, removed. One that could not be saved is kept. One line per leftover,
    in the order given."""

    async def one(item: Leftover) -> str:
        spec = RankSpec(
            rank=int(item.rank) if item.rank.isdigit() else 0,
            node=inventory.node(item.node),
            name=item.container,
            argv=(),
        )
        run_dir = store.root / item.run_id
        run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        run = Run(item.run_id, run_dir)
        try:
            await save_rank(run, spec, runtime)
            await stop_and_remove(run, spec, runtime)
        except ClusterError as exc:
            return f"{item.node}: kept {item.container}: {exc.line()}"
        return f"{item.node}: removed {item.container} (run {item.run_id})"

    return list(await asyncio.gather(*(one(item) for item in leftovers)))
