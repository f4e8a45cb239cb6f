"""The supervisor carrying on past READY: the serving watch.

The same `Supervisor` (its state, reducer, followers, samplers, view and metrics) keeps running
after READY; this module adds what serving needs: the head asked every `canary_every_s` (/health,
a canary request, the engine's /metrics), each node's memory trend, each rank's log kept under a
size bound, and the incidents judged by `serving.judge_serving`. An incident is recorded as its
own verdict (events.jsonl `incident`, incidents.json); with the recipe's `restart:` the whole TP
group is brought back within `restart.decide_restart`'s budget, each attempt kept in
`attempt-N/`. It ends on a final incident, on `cluster stop` (its `stopped` record), or when
`halt` is set (SIGTERM: the watcher's unit stopped).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from orchestrator.deadlines import DEADLINES
from orchestrator.errors import ClusterError
from orchestrator.logging import get_logger
from orchestrator.models.events import Incident, Restarted, Stopped, WatcherWarning
from orchestrator.models.recipe import Restart
from orchestrator.models.run import Finding, RunPhase
from orchestrator.runstore import Run, RunLock
from orchestrator.supervisor.canary import ask_head
from orchestrator.supervisor.follower import Follower
from orchestrator.supervisor.metrics import write_metrics
from orchestrator.supervisor.restart import decide_restart
from orchestrator.supervisor.serving import (
    ServeWatchConfig,
    ServingState,
    judge_serving,
    lowest_available,
)
from orchestrator.supervisor.state import initial_state
from orchestrator.supervisor.supervise import SuperviseConfig, Supervisor
from orchestrator.supervisor.view import serving_health

log = get_logger(__name__)
INCIDENTS_FILE = "incidents.json"

# Starts the ranks again (the same launch plan), calling `supervisor.mark_started` for each.
Relaunch = Callable[[Supervisor], Awaitable[None]]


def incidents_of(run: Run) -> list[Incident]:
    """Every incident of the run, oldest first (from events.jsonl)."""
    return [e for e in run.events() if isinstance(e, Incident)]


@dataclass(eq=False)
class ServingWatch:
    sup: Supervisor
    cfg: ServeWatchConfig
    model: str  # the served model name the canary asks for
    restart: Restart | None = None
    relaunch: Relaunch | None = None
    halt: asyncio.Event = field(default_factory=asyncio.Event)
    serving: ServingState = field(init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, init=False)
    _warned: set[tuple[str, int | None]] = field(default_factory=set, init=False)
    lock: RunLock = field(init=False)
    _final_reason: str = field(default="", init=False)
    stop_asked: bool = field(default=False, init=False)
    _boot_cfg: SuperviseConfig | None = field(default=None, init=False)
    _published_at: float = field(default=float("-inf"), init=False)

    def __post_init__(self) -> None:
        prior = incidents_of(self.sup.run_dir)
        restarts = [e.ts for e in self.sup.run_dir.events() if isinstance(e, Restarted)]
        self.serving = ServingState(
            ready_at=self.sup.clock(), attempt=len(restarts), restarts=restarts
        )
        self.serving.incidents = [Finding(**_finding_fields(i)) for i in prior]

    @property
    def run(self) -> Run:
        return self.sup.run_dir

    # -- tasks ------------------------------------------------------------------------------

    def _start_tasks(self) -> None:
        """Follow every rank again from where its copy ends (bounded), sample every node, ask
        the head. The boot's followers were reconciled and closed at READY."""
        sup = self.sup
        for old in sup.followers:
            old.close()
        self._boot_cfg = self._boot_cfg or sup.cfg
        sup.cfg = replace(self._boot_cfg, sample_every_s=self.cfg.sample_every_s)
        sup.stop = asyncio.Event()
        sup.followers = [
            Follower(
                sup.runtime,
                s,
                self.run.rank_dir(s.rank),
                sup._on_lines,
                sup._on_trouble,
                bound=self.cfg.log_bound,
            )
            for s in sup.specs
        ]
        self._tasks = [asyncio.create_task(f.run(sup.stop)) for f in sup.followers]
        self._tasks += [asyncio.create_task(sup._sample_loop(s)) for s in sup.specs]
        self._tasks.append(asyncio.create_task(self._head_loop()))

    async def _stop_tasks(self) -> None:
        sup = self.sup
        sup.stop.set()
        _done, pending = (
            await asyncio.wait(self._tasks, timeout=DEADLINES.task_drain_s)
            if self._tasks
            else ((), ())
        )
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.gather(*(sup._reconcile(f) for f in sup.followers))
        self._tasks = []

    async def _head_loop(self) -> None:
        sup, cfg = self.sup, self.cfg
        base = sup.cfg.endpoint
        ready_url = sup.cfg.ready_url
        if base is None or ready_url is None:
            return
        while not sup.stop.is_set():
            began = sup.clock()
            canary, reading = await asyncio.to_thread(
                ask_head,
                base,
                ready_url,
                self.model,
                sup.cfg.watch.engine,
                max_tokens=cfg.canary_max_tokens,
                timeout_s=cfg.canary_timeout_s,
                now=began,
            )
            if canary is not None:
                self.serving.note_canary(canary)
            if reading is not None:
                self.serving.note_engine(reading)
            elapsed = sup.clock() - began
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(sup.stop.wait(), max(cfg.canary_every_s - elapsed, 0.1))

    # -- the loop ---------------------------------------------------------------------------

    def _note_memory(self) -> None:
        for r in self.sup.state.ranks:
            if r.last_signal_at is not None:
                self.serving.note_memory(
                    r.node, r.last_signal_at, r.memory.mem_available, self.cfg.leak_window_s
                )

    def _stopped_by_operator(self) -> bool:
        return any(isinstance(r, Stopped) for r in self.sup.phase_records.read())

    def _judge(self) -> Finding | None:
        now = self.sup.clock()
        for f in judge_serving(self.sup.state, self.serving, now, self.sup.cfg.watch, self.cfg):
            if f.severity == "verdict":
                return f
            key = (f.watcher, f.rank)
            if key not in self._warned:
                self._warned.add(key)
                self.sup.warnings.append(f)
                self.run.append_event(WatcherWarning(**dict(f)))
                log.info("serving warning", message=f.message)
        return None

    def publish(self, phase: RunPhase = RunPhase.ready, verdict: Finding | None = None) -> None:
        """status.json and metrics.prom: the supervisor's view with serving health in it."""
        sup = self.sup
        v = sup.view(phase, verdict)
        v = v.model_copy(update={"serving": serving_health(self.serving, sup.clock())})
        sup.run_dir.write_status(v)
        write_metrics(sup.run_dir, v, sup.phase_records)
        if sup.on_view:
            sup.on_view(v)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.halt.wait(), seconds)

    def on_stop(self) -> None:
        """`cluster stop` asked (stop-request.json, through the lock's heartbeat): the watch
        ends, and so does a restarted group's boot loop if one is under way."""
        self.stop_asked = True
        self.sup.request_stop()
        self.halt.set()

    async def run_watch(self, held: RunLock | None = None) -> Finding | None:
        """Watch until a final incident (returned), `cluster stop` or `halt` (None). The run's
        lock is held throughout (a second watcher is refused): `held`, when the caller took it
        first (and beats it with `on_stop`), else taken here."""
        if held is not None:
            self.lock = held
            return await self._watch()
        self.lock = self.run.acquire_lock("serving-watch")
        async with self.lock.held(on_stop=self.on_stop):
            return await self._watch()

    async def _watch(self) -> Finding | None:
        self.sup.lock = self.lock  # a restart's boot loop holds on to it
        self._start_tasks()
        ended: Finding | None = None
        try:
            while True:
                await self._sleep(self.sup.cfg.tick_s)
                if self.halt.is_set() or self._stopped_by_operator():
                    return None
                self._note_memory()
                warned = len(self._warned)
                incident = self._judge()
                now = self.sup.clock()
                # status.json and metrics.prom every publish_every_s while nothing happens (a
                # scrape or `cluster status` every few seconds sees it fresh); at once on news.
                if (
                    incident is not None
                    or len(self._warned) != warned
                    or now - self._published_at >= self.cfg.publish_every_s
                ):
                    self.publish()
                    self._published_at = now
                if incident is None:
                    continue
                named_at = now  # the record's time: when it was named, before drain and wait
                await self._sleep(self.cfg.drain_s)  # the other ranks' exits and last lines
                await self.sup.settle_exits()  # every exit that happened, by when it happened
                incident = self._judge() or incident
                if self.halt.is_set() or self._stopped_by_operator():
                    return None
                final = await self._decide(incident)
                self._record(incident, final=final, named_at=named_at)
                if final:
                    ended = incident
                    return incident
                try:
                    await self._restart_group(incident)
                except _GroupGone as gone:
                    ended = gone.verdict
                    return gone.verdict
        finally:
            await self._stop_tasks()
            self.publish(RunPhase.failed if ended else RunPhase.ready, ended)

    async def _decide(self, incident: Finding) -> bool:
        """True when the incident is final: no restart asked, the budget spent, or memory
        never came back. Waits (beating the lock, publishing) through backoff and memory."""
        died_at = self.sup.clock()
        while True:
            now = self.sup.clock()
            d = decide_restart(
                self.restart,
                self.serving.restarts,
                died_at,
                now,
                lowest_available(self.sup.state),
            )
            if d.action == "final" or self.relaunch is None:
                self._final_reason = d.reason
                return True
            if d.action == "restart":
                self._final_reason = d.reason
                return False
            log.info("restart waits", reason=d.reason)
            self.serving.waiting = d.reason
            self.publish()
            await self._sleep(min(max(d.not_before - now, 0.2), 2.0))
            if self.halt.is_set():
                return True

    def _record(self, f: Finding, *, final: bool, named_at: float | None = None) -> None:
        r = self.sup.state.rank(f.rank) if f.rank is not None else None
        why = self._final_reason
        incident = Incident(
            **{
                **dict(f),
                "advice": f"{f.advice} ({why})" if why else f.advice,
            },
            signal=f.watcher.partition(":")[2],
            attempt=self.serving.attempt,
            exit_code=r.exit_code if r is not None else None,
            oom_killed=r.oom_killed if r is not None else False,
            last_lines=r.last_lines[-10:] if r is not None else (),
            final=final,
            **({"ts": named_at} if named_at is not None else {}),
        )
        self.run.append_event(incident)
        self.serving.incidents.append(f)
        self.run.write_json(
            INCIDENTS_FILE, [i.model_dump(mode="json") for i in incidents_of(self.run)]
        )

    async def _restart_group(self, incident: Finding) -> None:
        """Stop every rank, keep this attempt's logs and inspect output in attempt-N/, start
        the same launch plan again and supervise it to READY."""
        assert self.relaunch is not None
        sup = self.sup
        await self._stop_tasks()
        attempt = self.serving.attempt + 1
        kept = self.run.attempt_dir(attempt - 1)
        kept.mkdir(mode=0o700, exist_ok=True)
        for spec in sup.specs:
            with contextlib.suppress(ClusterError):
                inspect = await sup.runtime.inspect(spec)
                self.run.write_json(f"rank-{spec.rank}/inspect.json", inspect)
            with contextlib.suppress(ClusterError):
                await sup.runtime.stop(spec, remove=False)
            with contextlib.suppress(ClusterError):
                full = await sup.runtime.full_logs(spec)
                for stream, data in full.items():
                    (self.run.rank_dir(spec.rank) / f"full-{stream}.log").write_bytes(data)
            with contextlib.suppress(ClusterError):
                await sup.runtime.stop(spec, remove=True)
            src = self.run.dir / f"rank-{spec.rank}"
            if src.exists():
                shutil.move(str(src), str(kept / src.name))
        self.serving.restarts.append(sup.clock())
        self.serving.attempt = attempt
        self.serving.waiting = ""
        self.run.append_event(
            Restarted(attempt=attempt, reason=incident.message[:300], kept=kept.name)
        )
        # The group starts afresh: a new state, new followers, the boot's watchers to READY.
        sup.state = initial_state([s.node.name for s in sup.specs])
        sup.warned.clear()
        sup.predicted_since.clear()
        sup.container_states.clear()
        sup.started = sup.clock()
        sup.cfg = self._boot_cfg or sup.cfg  # the boot's periods until READY again
        sup.stop = asyncio.Event()
        for old in sup.followers:
            old.close()
        sup.followers = [
            Follower(sup.runtime, s, self.run.rank_dir(s.rank), sup._on_lines, sup._on_trouble)
            for s in sup.specs
        ]
        await self.relaunch(sup)
        verdict = await sup.supervise()
        if verdict.outcome is None or verdict.outcome.value != "READY":
            self._final_reason = f"the restarted group did not come back: {verdict.message}"
            self._record(verdict, final=True)
            raise _GroupGone(verdict)
        self.serving.begin_attempt(sup.clock())
        self._start_tasks()


class _GroupGone(Exception):
    def __init__(self, verdict: Finding) -> None:
        super().__init__(verdict.message)
        self.verdict = verdict


def _finding_fields(i: Incident) -> dict[str, object]:
    return {k: getattr(i, k) for k in Finding.model_fields}
