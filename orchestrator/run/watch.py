"""`cluster supervise RUN` on a serving run: the serving watch, re-attached.

A run whose boot ended READY (or SMOKE_FAILED: its ranks serve on) is watched by one process at a
time, held by the run's lock: the detached watcher `cluster boot` hands over to, or this command
after a controller reboot or kill. It rebuilds the run from its directory (context.py),
resumes every rank's log from where the preserved copy ends (the followers' `--since`: no gap, no
duplicate), and carries on with the same supervisor past READY (supervisor/serving_watch.py). A
final incident replaces the READY verdict (runstore allows a serving outcome to be followed once).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.errors import ExitCode, RunStoreError
from orchestrator.kernel.hooks import collect_for_run
from orchestrator.logging import get_logger
from orchestrator.models.events import Resumed, Stopped
from orchestrator.models.recipe import Recipe
from orchestrator.models.run import Finding, HeadReady
from orchestrator.run.boot import resumed_supervisor, runtime_of
from orchestrator.run.context import RunContext, load_context
from orchestrator.runstore import Run, RunLock
from orchestrator.runtime.base import Runtime
from orchestrator.runtime.specs import probe_ready
from orchestrator.supervisor.serving import ServeWatchConfig
from orchestrator.supervisor.serving_watch import Relaunch, ServingWatch
from orchestrator.supervisor.state import reduce
from orchestrator.supervisor.supervise import Supervisor
from orchestrator.transport import ConnectOptions, Transport
from orchestrator.transport.pool import close_transports, open_transports

log = get_logger(__name__)
WATCH_LOG = "watch.log"


def serve_config(recipe: Recipe) -> ServeWatchConfig:
    """The serving watch's numbers for this recipe (timeouts.wedge; the rest are defaults).

    The canary's own timeout is never longer than timeouts.wedge: a head that stops answering
    is known to fail only when its canary times out, so a 20 s timeout under a 10 s wedge named
    the wedge up to one canary period + 20 s after it began, past the promised wedge + 30 s."""
    wedge = float(recipe.timeouts.wedge)
    return ServeWatchConfig(
        wedge_s=wedge, canary_timeout_s=min(ServeWatchConfig.canary_timeout_s, wedge)
    )


def _served_model(recipe: Recipe) -> str:
    from orchestrator.serving_bench.runs import served_model_name

    return served_model_name(recipe)


def serving_verdict_or_refuse(run: Run) -> None:
    verdict = run.verdict()
    if verdict is None or not verdict.outcome.serving:
        what = verdict.outcome.value if verdict else "no verdict yet"
        raise RunStoreError(
            f"run {run.id} is not serving ({what}): the serving watch starts after READY",
            where=str(run.dir),
            hint=f"`cluster status --run {run.id}` shows where it is",
        )


async def watch_run(
    run: Run,
    *,
    serve: ServeWatchConfig | None = None,
    connect: ConnectOptions | None = None,
    process_root: Path | None = None,
    halt: asyncio.Event | None = None,
) -> Finding | None:
    """Watch a serving run until a final incident (returned, and written as its verdict),
    `cluster stop`, or `halt` (None)."""
    serving_verdict_or_refuse(run)
    if already_stopped(run):
        log.info("the run was stopped: nothing to watch", run=run.id)
        return None
    # The run is taken first, before the context, the transports and the replay (seconds on a
    # real cluster): `cluster boot` waits for this lock, and `cluster stop` finds it.
    lock = run.acquire_lock("serving-watch")
    asked = halt or asyncio.Event()
    watching: list[ServingWatch] = []

    def on_stop() -> None:
        asked.set()
        for w in watching:
            w.on_stop()

    async with lock.held(on_stop=on_stop):
        ended = await _watch_held(run, lock, asked, watching, serve, connect, process_root)
    if ended is not None:
        _write_final(run, ended)
    return ended


async def _watch_held(
    run: Run,
    lock: RunLock,
    halt: asyncio.Event,
    watching: list[ServingWatch],
    serve: ServeWatchConfig | None,
    connect: ConnectOptions | None,
    process_root: Path | None,
) -> Finding | None:
    ctx = load_context(run)
    runtime, transports = runtime_of(ctx, connect or ConnectOptions(), process_root)
    try:
        sup = resumed_supervisor(run, ctx, runtime)
        latency = await asyncio.to_thread(probe_ready, ctx.ready_url)
        # The head served at READY: every rank that loaded serves in its group (the reducer's
        # rule). Whether it still answers is the canary's question, asked within seconds.
        sup.state = reduce(sup.state, HeadReady(ts=time.time(), latency_s=latency or 0.0))
        kept = sum(p.stat().st_size for p in run.dir.glob("rank-*/std*.log") if p.name[:3] == "std")
        run.append_event(Resumed(bytes_preserved=kept))
        watch = ServingWatch(
            sup,
            serve or serve_config(ctx.recipe),
            model=_served_model(ctx.recipe),
            restart=ctx.recipe.restart,
            relaunch=_relauncher(ctx, runtime, transports),
        )
        watch.halt = halt
        watching.append(watch)
        if halt.is_set():  # a stop asked while the run was being read
            return None
        ended = await watch.run_watch(held=lock)
        if ended is not None:  # an incident: each node's kernel lines beside it (bounded)
            await collect_for_run(run, transports, ctx.specs, sup.lost_ranks())
        return ended
    finally:
        await close_transports(transports)


def _write_final(run: Run, incident: Finding) -> None:
    from orchestrator.run_files import Verdict

    try:
        current = run.verdict()
        if current is None or current.outcome.serving:
            run.write_verdict(Verdict.of(incident))
    except RunStoreError as exc:  # VerdictExists: another writer decided first
        log.warning("incident verdict not written", error=str(exc))


def _relauncher(ctx: RunContext, runtime: Runtime, transports: dict[str, Transport]) -> Relaunch:
    """The same launch plan started again, wave by wave, as the boot starts it."""

    async def relaunch(sup: Supervisor) -> None:
        from orchestrator.run.boot import QuietUI, start_deadline, start_ranks

        local = transports or dict(open_transports(ctx.inventory, ConnectOptions()))
        await start_ranks(
            ctx.run,
            QuietUI(),
            ctx.plan,
            ctx.specs,
            runtime,
            local,
            sup,
            port_wait_s=ctx.timeouts.connect * 4,
            start_deadline_s=start_deadline(ctx.timeouts.connect),
        )

    return relaunch


# -- the detached watcher -------------------------------------------------------------------


def watcher_argv(run: Run, inventory: str | None = None) -> list[str]:
    argv = [sys.executable, "-m", "orchestrator.cli", "supervise", str(run.dir)]
    if inventory:
        argv += ["-i", inventory]
    return argv


HANDOVER_S = 30.0  # how long `cluster boot` waits for its watcher to hold the run


def start_watcher(run: Run, inventory: str | None = None, wait_s: float = HANDOVER_S) -> int:
    """Start the serving watch in its own session (it outlives this terminal); its output goes
    to the run's watch.log. The pid.

    Returns once the watcher holds the run's lock (or has ended, or `wait_s` passed): a
    `cluster stop` given after `cluster boot` returned then finds it and ends it first, instead
    of stopping the ranks under a watcher that is still starting (which would judge the
    stopped ranks RANK_DIED)."""
    fd = os.open(run.dir / WATCH_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(
            watcher_argv(run, inventory),
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
            env={**os.environ, "COLUMNS": "160"},
        )
    finally:
        os.close(fd)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and proc.poll() is None:
        holder = run.lock_holder() or {}
        if holder.get("pid") == proc.pid:
            break
        time.sleep(0.1)
    return proc.pid


def already_stopped(run: Run) -> bool:
    """`cluster stop` has been asked for this run (its request, or its record): nothing to
    watch. A watcher that starts late must not judge ranks a stop has ended."""
    return run.stop_requested() or any(isinstance(e, Stopped) for e in run.events())


# The watcher's exit codes after which starting it again cannot help: a final incident (the run
# has its verdict: BOOT_FAILED), bad input (CONFIG), the run unreadable or held by another
# watcher (RUN_STORE). A crash (INTERNAL), an unreachable node (UNHEALTHY) or a signal: restart.
_FINAL_EXIT_CODES = (ExitCode.CONFIG, ExitCode.BOOT_FAILED, ExitCode.RUN_STORE)


def systemd_unit(run: Run, inventory: str | None = None) -> str:
    """A systemd user unit that keeps the serving watch of `run` alive across controller
    reboots (docs/operating.md: `cluster supervise RUN --systemd-unit`)."""
    # Absolute: systemd starts the unit in the user's home, not where this command ran.
    absolute = str(Path(inventory).resolve()) if inventory else None
    argv = shlex.join(watcher_argv(run, absolute))
    no_restart = " ".join(str(int(c)) for c in _FINAL_EXIT_CODES)
    final = ", ".join(f"{int(c)} {c.name}" for c in _FINAL_EXIT_CODES)
    return f"""[Unit]
Description=cluster serving watch of run {run.id}
After=network-online.target
# Never a restart storm: at most 5 starts in 10 minutes, then systemd gives up and says so.
StartLimitIntervalSec=600
StartLimitBurst=5

[Service]
Type=simple
ExecStart={argv}
# A killed or crashed watcher comes back and resumes every log where it ended. One that ended
# on its own does not: 0 (`cluster stop`), {final} (docs/exit-codes.md).
Restart=on-failure
RestartPreventExitStatus={no_restart}
RestartSec=10
KillSignal=SIGTERM
TimeoutStopSec=30

[Install]
WantedBy=default.target
"""


def install_halt(halt: asyncio.Event) -> None:
    """SIGTERM/SIGINT (the unit stopped, Ctrl-C) end the watch cleanly: logs reconciled."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, halt.set)
