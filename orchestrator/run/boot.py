"""`cluster boot`: the only place the steps of a boot are sequenced.

    create the run → (simulated twin) → preflight: facts, plans, refuse on errors → image: push
    if missing, verify, exec-readiness → start ranks (per engine order) → supervise → READY or a
    verdict, with evidence from every node and the postmortem's diagnosis.

The run directory is written at every step, so a crash anywhere leaves a readable record.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from orchestrator import __version__
from orchestrator.deadlines import DEADLINES
from orchestrator.errors import (
    BootFailed,
    ClusterError,
    CommandTimeout,
    ConfigError,
    ImageError,
    NodeUnreachable,
    PreflightRefused,
    RunStoreError,
)
from orchestrator.kernel.hooks import collect_for_run, note_at_boot_start
from orchestrator.logging import get_logger
from orchestrator.models.events import Resumed, Step
from orchestrator.models.inventory import Connection, Inventory
from orchestrator.models.recipe import Docker, Engine, Recipe
from orchestrator.models.run import Finding, NodeLost, Outcome, RankStarted
from orchestrator.paths import state_dir
from orchestrator.plan.launch import LaunchPlan
from orchestrator.postmortem import postmortem_run
from orchestrator.postmortem.model import Diagnosis
from orchestrator.preflight import run_preflight
from orchestrator.probes.node_facts import NodeFacts
from orchestrator.probes.tcp import connect_probe
from orchestrator.recipes import resolve_recipe
from orchestrator.run.context import RunContext, watch_config
from orchestrator.run.stop import stopped_finding
from orchestrator.run_files import (
    InventorySnapshot,
    Plans,
    RankImage,
    RunManifest,
    Verdict,
    Versions,
)
from orchestrator.runstore import Run, RunLock, RunStore
from orchestrator.runtime.base import RankSpec, Runtime
from orchestrator.runtime.docker import DockerRuntime
from orchestrator.runtime.process import ProcessRuntime
from orchestrator.runtime.specs import rank_specs
from orchestrator.supervisor.supervise import SuperviseConfig, Supervisor
from orchestrator.supervisor.view import BootView
from orchestrator.transport import ConnectOptions, Transport
from orchestrator.transport.pool import close_transports, open_transports
from orchestrator.wording import waves_text

if TYPE_CHECKING:  # the image push is imported where a boot pushes
    from orchestrator.images.model import PushReport

log = get_logger(__name__)
SIM_SCALE_DEFAULT = "default"


class BootUI(Protocol):
    """What the boot tells a person (rich in the CLI, nothing in tests)."""

    def step(self, name: str, detail: str = "") -> None: ...

    def view(self, view: BootView) -> None: ...

    def progress(self, text: str) -> None:
        """A passing word before the table (who answered preflight); not kept."""


class QuietUI:
    def step(self, name: str, detail: str = "") -> None:
        log.info("step", name=name, detail=detail)

    def progress(self, text: str) -> None:
        return None

    def view(self, view: BootView) -> None:
        return None


@dataclass(frozen=True)
class BootOptions:
    connect: ConnectOptions = field(default_factory=ConnectOptions)
    sim_scale: str | float = SIM_SCALE_DEFAULT  # the simulated twin's time scale (local only)
    sim_weights_root: Path | None = None  # where twin weights are made; default under state
    sim_env: dict[str, str] = field(default_factory=dict)  # e.g. CLUSTER_SIM_FAULT for drills
    push_image: bool = True
    process_root: Path | None = None  # the process runtime's node-side folders (tests)
    # Rehearse on real nodes (the testbed): run the twin in containers of `sim_image`, with
    # this machine's Python bind-mounted read-only (the weights folder must be at the same path
    # on every node: a shared filesystem, as on the testbed).
    simulate: bool = False
    sim_image: str | None = None
    # With `simulate`: extra `docker run` flags for every rank's container (drills, e.g. a
    # memory limit `--memory=256m` under which a `hog` fault is OOM-killed).
    sim_docker_extra: tuple[str, ...] = ()
    # After READY, one fixed chat request (serving_bench/smoke.py); its failure is SMOKE_FAILED.
    smoke: bool = True


@dataclass
class BootResult:
    run: Run
    verdict: Finding
    endpoint: str | None = None
    repaired_bytes: int = 0
    diagnosis: Diagnosis | None = None
    last_view: BootView | None = None

    @property
    def ok(self) -> bool:
        return self.verdict.outcome is Outcome.READY


def _step(run: Run, ui: BootUI, name: str, detail: str = "") -> None:
    run.append_event(Step(step=name, detail=detail))
    ui.step(name, detail)


def write_verdict(run: Run, verdict: Finding, **extra: Any) -> Verdict:
    """The run's verdict.json (once: runstore refuses a second final verdict)."""
    return run.write_verdict(Verdict.of(verdict, **extra))


class StopLatch:
    """What a `cluster stop` request does to this boot. Before supervision the boot's task is
    cancelled (preflight, pushes and starts are safe to cut: the stop that asked removes what
    was started); during supervision the supervisor ends with STOPPED, by its own loop."""

    def __init__(self) -> None:
        self.task = asyncio.current_task()
        self.asked = False
        self.supervisor: Supervisor | None = None

    def __call__(self) -> None:
        self.asked = True
        if self.supervisor is not None:
            self.supervisor.request_stop()
        elif self.task is not None:
            self.task.cancel()


# -- the simulated twin ---------------------------------------------------------------------


def simulated_recipe(
    real: Recipe, options: BootOptions, ui: BootUI | None = None
) -> tuple[Recipe, dict[str, Any]]:
    """The built-in simulated cluster runs the recipe's twin (one rule: simulator/twin.py)."""
    from orchestrator.simulator.twin import DEFAULT_TEST_IMAGE, make_twin, twin_record
    from orchestrator.simulator.weights import make_weights

    probe = make_twin(real, options.sim_scale, python=sys.executable)
    per_rank = probe.model.expected_bytes_per_rank or 64 * 2**20
    root = options.sim_weights_root or state_dir() / "sim-weights"
    weights = root / f"{real.name}-{per_rank}"
    if not (weights / "model.safetensors.index.json").exists():
        if ui is not None:  # the first boot of a recipe writes them: seconds of a still screen
            size = per_rank * real.nodes / 1e9
            ui.progress(f"twin: writing {size:.1f} GB of simulated weights once, into {weights}")
        make_weights(weights, per_rank * real.nodes, shards=max(real.nodes * 2, 8))
    extra: dict[str, Any] = {}
    if options.simulate:
        extra = {"image": options.sim_image or DEFAULT_TEST_IMAGE, "extra_volumes": host_python()}
    twin = make_twin(
        real, options.sim_scale, python=sys.executable, weights_dir=str(weights), **extra
    )
    if options.simulate:
        # The ranks import this package from the read-only mount `host_python` adds, whatever
        # makes it importable here (an editable install may point at another checkout).
        twin = twin.model_copy(update={"env": {**twin.env, "PYTHONPATH": str(_package_root())}})
    if options.sim_env:
        twin = twin.model_copy(update={"env": {**twin.env, **options.sim_env}})
    if options.simulate and options.sim_docker_extra:
        extra_flags = [*twin.docker.extra, *options.sim_docker_extra]
        try:  # checked like a recipe's docker.extra (`--rm`, `--restart`... are refused)
            docker = Docker.model_validate({**twin.docker.model_dump(), "extra": extra_flags})
        except ValidationError as exc:
            raise ConfigError(
                f"--sim-docker-opt: {exc.errors()[0]['msg']}", where="the simulated twin"
            ) from exc
        twin = twin.model_copy(update={"docker": docker})
    return twin, twin_record(real, twin)


def _package_root() -> Path:
    """The folder that holds this `orchestrator` package."""
    return Path(__file__).resolve().parents[2]


def host_python() -> list[str]:
    """Read-only mounts that let a small image run this machine's Python and this package
    (TESTBED.md: a busybox image with the host's /usr, /lib and the Python install mounted)."""
    mounts = {"/usr", "/lib", "/lib64", "/etc/ssl", sys.base_prefix, sys.prefix}
    mounts.add(str(_package_root()))
    return [f"{m}:{m}:ro" for m in sorted(mounts) if Path(m).exists()]


# -- plans to rank specs --------------------------------------------------------------------


def endpoint_of(recipe: Recipe, inventory: Inventory) -> tuple[str, str]:
    """(URL people use, readiness URL the supervisor probes) on the head's management address."""
    head = inventory.head
    base = f"http://{head.address}:{recipe.ports.serve}"
    return base, base + recipe.readiness_path


async def _wait_port(transport: Transport, address: str, port: int, deadline_s: float) -> bool:
    """vLLM native multi-node: the workers need the head's port open before they start."""
    probe = connect_probe(None, address, port, 2.0)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        result = await transport.run(probe.argv, timeout_s=DEADLINES.port_probe_s)
        if result.ok and probe.read(result).ok:
            return True
        await asyncio.sleep(1.0)
    return False


# At most this many `docker run`s at once: eight ranks start side by side, and a bigger
# cluster does not open a hundred sessions' worth of container creations on a busy controller.
START_PARALLEL = 16


def start_deadline(connect_s: float) -> float:
    """How long one rank's start may take: the node's connect deadline twice over (one to be
    reached, one for `docker run -d` to return). A node cut during the start is named then,
    not after the 120 s a `docker run` may otherwise wait."""
    return 2 * connect_s


class StartFailed(ClusterError):
    """One or more ranks of a wave did not start: the verdict names them (a hung or lost node
    is NODE_LOST naming it; a refused start is RANK_EXITED)."""

    def __init__(self, verdict: Finding, lost: dict[int, str]) -> None:
        super().__init__(verdict.message, where="start")
        self.verdict = verdict
        self.lost = lost


async def start_ranks(
    run: Run,
    ui: BootUI,
    plan: LaunchPlan,
    specs: list[RankSpec],
    runtime: Runtime,
    transports: dict[str, Transport],
    supervisor: Supervisor,
    port_wait_s: float,
    start_deadline_s: float = 30.0,
) -> None:
    """Wave by wave (vLLM: the head first and its port open); the ranks of a wave side by side,
    each within `start_deadline_s`, so one node that hangs holds back no other rank. A rank
    that fails to start stops the launch after its wave; nothing is removed."""
    by_rank = {s.rank: s for s in specs}
    gate = asyncio.Semaphore(START_PARALLEL)

    async def start_one(spec: RankSpec) -> tuple[RankSpec, float, BaseException | None]:
        async with gate:
            began = time.time()
            try:
                await asyncio.wait_for(runtime.start(spec), start_deadline_s)
            except (ClusterError, TimeoutError) as exc:
                return spec, began, exc
            supervisor.mark_started(spec)
            return spec, began, None

    for i, wave in enumerate(plan.waves):
        if i > 0 and plan.engine is Engine.vllm:
            head = by_rank[0]
            _step(run, ui, "wait-head-port", f"{plan.head_addr}:{plan.head_port}")
            if not await _wait_port(
                transports[head.node.name], plan.head_addr, plan.head_port, port_wait_s
            ):
                raise BootFailed(
                    f"the head's port {plan.head_addr}:{plan.head_port} did not open within "
                    f"{port_wait_s:.0f} s",
                    where=f"rank 0 ({head.node.name})",
                    hint="see rank-0/ in the run directory; the workers were not started",
                )
        results = await asyncio.gather(*(start_one(by_rank[k]) for k in wave))
        failed = [(spec, began, exc) for spec, began, exc in results if exc is not None]
        started = [spec.rank for spec, _b, exc in results if exc is None]
        if started:
            _step(run, ui, "started", f"ranks {', '.join(map(str, started))}")
        if failed:
            raise _start_failed(supervisor, failed, start_deadline_s)


def _start_failed(
    supervisor: Supervisor,
    failed: Sequence[tuple[RankSpec, float, BaseException | None]],
    deadline_s: float,
) -> StartFailed:
    """The verdict for a wave that did not start whole: a node that did not answer within the
    deadline is lost (NODE_LOST names the first); otherwise the first refusal."""
    hung = [(s, began) for s, began, exc in failed if _node_silent(exc)]
    lost: dict[int, str] = {}
    for spec, began in hung:
        reason = f"`docker run` did not return within {deadline_s:.0f} s"
        lost[spec.rank] = reason
        supervisor.fold(NodeLost(ts=began, rank=spec.rank, reason=reason))
    if hung:
        spec = hung[0][0]
        names = ", ".join(f"rank {s.rank} ({s.node.name})" for s, _b in hung)
        verdict = Finding.verdict(
            "start",
            Outcome.NODE_LOST,
            f"{names}: the node stopped answering while its rank was being started "
            f"(no answer within {deadline_s:.0f} s)",
            rank=spec.rank,
            advice=f"check {spec.node.name}'s management link and sshd; the other ranks were "
            "started and keep their logs: `cluster stop` saves and removes them",
        )
        return StartFailed(verdict, lost)
    spec, _began, exc = failed[0]
    why = exc.line() if isinstance(exc, ClusterError) else str(exc)
    verdict = Finding.verdict(
        "start",
        Outcome.RANK_EXITED,
        f"launch stopped: rank {spec.rank} ({spec.node.name}) did not start: {why}",
        rank=spec.rank,
        advice="nothing was removed; see the run directory",
    )
    return StartFailed(verdict, lost)


def _node_silent(exc: BaseException | None) -> bool:
    return isinstance(exc, (TimeoutError, CommandTimeout, NodeUnreachable))


# -- evidence -------------------------------------------------------------------------------


async def collect_evidence(
    run: Run,
    specs: list[RankSpec],
    runtime: Runtime,
    lost: dict[int, str] | None = None,
    transports: Mapping[str, Transport] | None = None,
) -> None:
    """Each rank's exit state and inspect output, kept in its folder (best effort per rank).
    Nodes the supervisor has just found unreachable (`lost`: rank -> reason) are not asked
    again; `cluster stop` saves their evidence once they answer."""

    async def one(spec: RankSpec) -> None:
        if lost and spec.rank in lost:
            run.write_json(
                f"rank-{spec.rank}/evidence-error.json",
                {"error": f"not asked: node unreachable: {lost[spec.rank]}"},
            )
            return
        try:
            state = await runtime.state(spec)
            run.write_json(f"rank-{spec.rank}/exit.json", state.as_json())
            run.write_json(f"rank-{spec.rank}/inspect.json", await runtime.inspect(spec))
        except ClusterError as exc:
            run.write_json(f"rank-{spec.rank}/evidence-error.json", {"error": exc.line()})

    await asyncio.gather(*(one(s) for s in specs))
    if transports:  # each node's kernel lines since the boot began (bounded; never raises)
        await collect_for_run(run, transports, specs, lost)


def diagnose(run: Run) -> Diagnosis | None:
    """The postmortem of this run directory (None if it could not be made)."""
    try:
        return postmortem_run(run)
    except Exception as exc:  # the diagnosis must never hide the boot's own verdict
        log.warning("postmortem failed", error=f"{type(exc).__name__}: {exc}")
        return None


# -- the boot -------------------------------------------------------------------------------


def write_manifest(
    run: Run,
    real: Recipe,
    recipe: Recipe,
    twin: dict[str, Any] | None,
    inventory: Inventory,
    plans: Plans | None = None,
    images: Sequence[RankImage] = (),
) -> None:
    run.write_manifest(
        RunManifest(
            run_id=run.id,
            created=datetime.now(UTC),
            versions=Versions(cluster=__version__, python=sys.version.split()[0]),
            recipe=recipe,
            real_recipe=real.name,
            twin=twin,
            inventory=InventorySnapshot.of(inventory),
            plans=plans or Plans(),
            images=tuple(images),
        )
    )


def preflight_progress(inventory: Inventory, ui: BootUI) -> Callable[[NodeFacts], None]:
    """Facts take seconds a node: say who answered and who is still awaited, so the screen is
    not blank while preflight runs."""
    answered: set[str] = set()

    def on_node(facts: NodeFacts) -> None:
        answered.add(facts.node)
        waiting = [n.name for n in inventory.nodes if n.name not in answered]
        text = f"preflight: {len(answered)}/{len(inventory.nodes)} nodes answered"
        text += f"; waiting for {', '.join(waiting)}" if waiting else "; checking the rest"
        ui.progress(text)

    return on_node


async def boot(
    recipe_ref: str,
    inventory: Inventory,
    *,
    options: BootOptions | None = None,
    ui: BootUI | None = None,
    store: RunStore | None = None,
    on_run: Callable[[Run], None] | None = None,
) -> BootResult:
    """One boot, owned by this process from its first second: the run's lock is taken when its
    folder is made and held (with its heartbeat) through preflight, push, start and
    supervision, so a `cluster supervise` of it is refused and a `cluster stop` reaches it."""
    options = options or BootOptions()
    ui = ui or QuietUI()
    store = store or RunStore(inventory.runs_dir)
    real = resolve_recipe(recipe_ref)
    run = store.create()
    lock = run.acquire_lock("boot")
    if on_run:
        on_run(run)
    latch = StopLatch()
    body = _boot(run, lock, latch, real, inventory, options, ui)
    return await owned(run, lock, latch, body, "before its ranks were supervised")


async def owned(
    run: Run, lock: RunLock, latch: StopLatch, body: Awaitable[BootResult], where: str
) -> BootResult:
    """Run `body` holding the run's lock (heartbeat, stop requests). A `cluster stop` that
    cancelled it (before supervision) ends the run STOPPED, once."""
    try:
        async with lock.held(on_stop=latch):
            return await body
    except asyncio.CancelledError:
        if not latch.asked:
            raise
        if (task := asyncio.current_task()) is not None:
            task.uncancel()
        verdict = stopped_finding(where)
        if run.verdict() is None:
            write_verdict(run, verdict)
        return BootResult(run, verdict)


async def _boot(
    run: Run,
    lock: RunLock,
    latch: StopLatch,
    real: Recipe,
    inventory: Inventory,
    options: BootOptions,
    ui: BootUI,
) -> BootResult:
    _step(run, ui, "run", str(run.dir))
    recipe, twin = real, None
    simulated = inventory.connection is Connection.local
    if simulated or options.simulate:
        _step(run, ui, "twin", f"simulated twin at scale {options.sim_scale}")
        recipe, twin = simulated_recipe(real, options, ui)
    write_manifest(run, real, recipe, twin, inventory)

    _step(run, ui, "preflight", f"{len(inventory.nodes)} nodes")
    pre = await run_preflight(
        recipe,
        inventory,
        options.connect,
        run=run,
        image_will_be_pushed=options.push_image and not simulated,
        on_node=preflight_progress(inventory, ui),
    )
    if pre.report.errors or pre.launch is None:
        verdict = Finding.verdict(
            "preflight",
            Outcome.PREFLIGHT_REFUSED,
            f"preflight refused the boot: {len(pre.report.errors)} problem(s); first: "
            + (pre.report.errors[0].what if pre.report.errors else str(pre.launch_error)),
            rank=pre.report.errors[0].rank if pre.report.errors else None,
            advice=pre.report.errors[0].fix if pre.report.errors else "",
        )
        write_verdict(run, verdict)
        raise PreflightRefused(
            verdict.message, where=f"run {run.id}", hint=verdict.advice, run_dir=str(run.dir)
        )
    plan = pre.launch
    plans = Plans(rendezvous=pre.rendezvous, launch=plan)
    write_manifest(run, real, recipe, twin, inventory, plans)

    transports: dict[str, Transport] = {}
    runtime: Runtime
    if simulated:
        runtime = ProcessRuntime(options.process_root)
    else:
        if options.push_image:
            pushed = await ensure_image(run, ui, recipe, inventory, options)
            images = rank_images(pushed, inventory)
            write_manifest(run, real, recipe, twin, inventory, plans, images)
        runtime = DockerRuntime(transports)
    # Also the simulated cluster's (local) transports: vLLM's launch waits on the head's port.
    transports.update(open_transports(inventory, options.connect))
    if not simulated:  # where each node's kernel log stands: the window the verdict keeps
        await note_at_boot_start(run, transports)
    specs = rank_specs(plan, inventory)
    url, ready_url = endpoint_of(recipe, inventory)
    supervisor = Supervisor(
        run,
        specs,
        runtime,
        SuperviseConfig(
            watch=watch_config(
                recipe.timeouts,
                recipe.model.expected_bytes_per_rank,
                engine=recipe.engine.value,
                env=recipe.env,
            ),
            ready_url=ready_url,
            endpoint=url,
            ready_timeout_s=recipe.timeouts.ready_deadline_s,
        ),
        recipe=real.name,
        on_view=ui.view,
        lock=lock,
    )
    try:
        _step(run, ui, "start", f"{len(specs)} ranks, {waves_text(plan.waves)}")
        try:
            await start_ranks(
                run,
                ui,
                plan,
                specs,
                runtime,
                transports,
                supervisor,
                port_wait_s=recipe.timeouts.connect * 4,
                start_deadline_s=start_deadline(recipe.timeouts.connect),
            )
        except StartFailed as exc:
            await collect_evidence(run, specs, runtime, exc.lost, transports)
            write_verdict(run, exc.verdict)
            return BootResult(run, exc.verdict, diagnosis=diagnose(run))
        except ClusterError as exc:
            verdict = Finding.verdict(
                "start",
                Outcome.RANK_EXITED,
                f"launch stopped: {exc.line()}",
                advice="nothing was removed; see the run directory",
            )
            await collect_evidence(run, specs, runtime, transports=transports)
            write_verdict(run, verdict)
            return BootResult(run, verdict, diagnosis=diagnose(run))
        _step(run, ui, "supervise")
        latch.supervisor = supervisor
        if latch.asked:  # asked while the last rank started
            supervisor.request_stop()
        lock.handover("supervisor")
        verdict = await supervisor.supervise()
        if verdict.outcome not in (Outcome.READY, Outcome.STOPPED):
            await collect_evidence(run, specs, runtime, supervisor.lost_ranks(), transports)
        elif verdict.outcome is Outcome.READY and options.smoke:
            from orchestrator.run.bench import smoke_verdict

            _step(run, ui, "smoke", f"{url}/v1/chat/completions")
            verdict = await smoke_verdict(run, url, recipe) or verdict
        if verdict.outcome in (Outcome.READY, Outcome.STOPPED):  # the kernel's window anyway
            await collect_for_run(run, transports, specs)
        write_verdict(run, verdict, repaired_bytes=supervisor.repaired_bytes)
    finally:
        await close_transports(transports)
    return BootResult(
        run,
        verdict,
        endpoint=url if verdict.outcome is Outcome.READY else None,
        repaired_bytes=supervisor.repaired_bytes,
        # A failed smoke has its own verdict: the boot itself went well (no postmortem).
        diagnosis=None
        if verdict.outcome in (Outcome.READY, Outcome.SMOKE_FAILED, Outcome.STOPPED)
        else diagnose(run),
    )


def rank_images(report: PushReport, inventory: Inventory) -> tuple[RankImage, ...]:
    """Each rank's image as its node's Docker reported it after the push."""
    by_node = {n.node: n for n in report.nodes}
    return tuple(
        RankImage(
            rank=node.rank,
            node=node.name,
            image_id=by_node[node.name].image_id if node.name in by_node else None,
            config_digest=by_node[node.name].config_digest if node.name in by_node else None,
        )
        for node in inventory.nodes
    )


async def ensure_image(
    run: Run, ui: BootUI, recipe: Recipe, inventory: Inventory, options: BootOptions
) -> PushReport:
    """Push the recipe's image where it is missing, verify it, probe exec-readiness."""
    from orchestrator.images import PushOptions, push_image

    _step(run, ui, "image", recipe.image.reference)
    report = await push_image(
        inventory,
        recipe.image.reference,
        options=PushOptions(
            expected_digest=recipe.image.digest,
            platform=recipe.image.platform,
            ready_window_s=float(recipe.timeouts.exec_ready),
            connect=options.connect,
            probe_all=True,  # nodes that already held it are proven runnable too
        ),
    )
    run.write_json("image.json", report.model_dump(mode="json"))
    if not report.ok:
        bad = ", ".join(f"{n.node}" for n in report.failed) or "?"
        raise ImageError(
            f"image {recipe.image.reference} is not ready on: {bad}",
            where=f"run {run.id}",
            hint=f"see {run.dir / 'image.json'}; `cluster image push` retries only what failed",
        )
    return report


def runtime_of(
    ctx: RunContext, connect: ConnectOptions, process_root: Path | None = None
) -> tuple[Runtime, dict[str, Transport]]:
    """The runtime a run's ranks live in, and the transports it opened (to close)."""
    if ctx.simulated:
        return ProcessRuntime(process_root), {}
    transports = dict(open_transports(ctx.inventory, connect))
    return DockerRuntime(transports), transports


def resumed_supervisor(
    run: Run,
    ctx: RunContext,
    runtime: Runtime,
    *,
    lock: RunLock | None = None,
    on_view: Callable[[BootView], None] | None = None,
) -> Supervisor:
    """The run's supervisor again, from its manifest and the state its kept logs imply (every
    rank's log resumes where the kept copy ends)."""
    from orchestrator.run.context import replay_logs

    return Supervisor(
        run,
        ctx.specs,
        runtime,
        SuperviseConfig(
            watch=ctx.watch,
            ready_url=ctx.ready_url,
            endpoint=ctx.endpoint,
            ready_timeout_s=ctx.timeouts.ready_deadline_s,
        ),
        recipe=ctx.recipe_name,
        on_view=on_view,
        resume_state=replay_logs(ctx),
        lock=lock,
    )


async def resume(
    run: Run,
    *,
    options: BootOptions | None = None,
    ui: BootUI | None = None,
) -> BootResult:
    """`cluster supervise RUN`: supervise a run whose controller died, to READY or a verdict.

    Every rank's log resumes from where the preserved copy ends (no gap, no duplicate); what
    arrived while no supervisor ran is fetched now and reported as such, not as repaired."""
    from orchestrator.run.context import load_context

    options = options or BootOptions()
    ui = ui or QuietUI()
    lock = run.acquire_lock("supervisor")  # first: refused while the run's owner lives
    try:
        ctx = load_context(run)
        ended = run.verdict()
        if ended is not None and not ended.outcome.serving:
            raise RunStoreError(
                f"run {run.id} has ended ({ended.outcome.value}): there is nothing to supervise",
                where=str(run.dir),
                hint=f"`cluster postmortem {run.id}` explains it",
            )
    except BaseException:
        lock.release()
        raise
    latch = StopLatch()
    body = _resume(run, ctx, lock, latch, options, ui)
    return await owned(run, lock, latch, body, "while it was being resumed")


async def _resume(
    run: Run,
    ctx: RunContext,
    lock: RunLock,
    latch: StopLatch,
    options: BootOptions,
    ui: BootUI,
) -> BootResult:
    from orchestrator.runstore import run_started_at

    runtime, transports = runtime_of(ctx, options.connect, options.process_root)
    supervisor = resumed_supervisor(run, ctx, runtime, lock=lock, on_view=ui.view)
    latch.supervisor = supervisor
    # Deadlines count from when the ranks were started, as in the first supervisor.
    starts = [e.ts for e in run.events() if isinstance(e, RankStarted)]
    supervisor.started = min(starts) if starts else run_started_at(run)
    kept_before = sum(c.bytes_kept for f in supervisor.followers for c in f.cursors.values())
    _step(run, ui, "resume", f"run {run.id}: {kept_before} bytes already preserved")
    run.append_event(Resumed(bytes_preserved=kept_before))
    try:
        await collect_for_run(run, transports, ctx.specs)  # what the kernels said meanwhile
        verdict = await supervisor.supervise()
        if verdict.outcome not in (Outcome.READY, Outcome.STOPPED):
            await collect_evidence(run, ctx.specs, runtime, supervisor.lost_ranks(), transports)
    finally:
        await close_transports(transports)
    kept_after = sum(c.bytes_kept for f in supervisor.followers for c in f.cursors.values())
    fetched = kept_after - kept_before - supervisor.repaired_bytes
    write_verdict(
        run,
        verdict,
        repaired_bytes=supervisor.repaired_bytes,
        fetched_on_resume_bytes=fetched,
    )
    return BootResult(
        run,
        verdict,
        endpoint=ctx.endpoint if verdict.outcome is Outcome.READY else None,
        repaired_bytes=supervisor.repaired_bytes,
        diagnosis=None if verdict.outcome in (Outcome.READY, Outcome.STOPPED) else diagnose(run),
    )
