"""The one task juggler: followers, samplers and the readiness prober feed events; a tick
folds them, asks the watchers, writes status.json, and ends on READY or a verdict.

Everything observed lands in the run directory first (rank logs, samples, events), so the
postmortem and `cluster status` work from the folder alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, InitVar, dataclass, field

from orchestrator.deadlines import DEADLINES
from orchestrator.errors import ClusterError, answered_late
from orchestrator.logging import get_logger
from orchestrator.models.events import FollowInterrupted, VerdictRecord, WatcherWarning
from orchestrator.models.run import (
    Event,
    Finding,
    HeadReady,
    LogLine,
    NodeBack,
    NodeLost,
    NodeSlow,
    Outcome,
    RankPhase,
    RankStarted,
    RunPhase,
    Sample,
)
from orchestrator.runstore import Run, RunLock
from orchestrator.runtime.base import SAMPLE_TIMEOUT_S, ExitState, RankSpec, Runtime
from orchestrator.runtime.specs import exit_event, probe_ready, sample_fields
from orchestrator.supervisor.follower import Follower
from orchestrator.supervisor.metrics import PhaseRecords, write_metrics
from orchestrator.supervisor.state import BootState, initial_state, reduce, reduce_lines
from orchestrator.supervisor.view import BootView, build_view
from orchestrator.supervisor.watchers import WatchConfig, is_ready, watch

log = get_logger(__name__)


@dataclass(frozen=True)
class SuperviseConfig:
    watch: WatchConfig
    ready_url: str | None  # the head's readiness URL, probed from the controller
    endpoint: str | None = None  # what to tell people once READY
    ready_timeout_s: float = 1800.0  # from the recipe's timeouts.ready, counted from the start
    sample_every_s: float = 2.0
    tick_s: float = 1.0
    drain_s: float = 3.0  # after a verdict, keep following this long so last lines land


# The watchers whose warnings are predictions from read rates (a miss that has not happened).
PREDICTIONS = frozenset({"barrier", "vllm-ready"})


@dataclass(eq=False)
class Supervisor:
    run_dir: Run
    specs: list[RankSpec]
    runtime: Runtime
    cfg: SuperviseConfig
    _: KW_ONLY
    recipe: str
    on_view: Callable[[BootView], None] | None = None
    clock: Callable[[], float] = time.time
    # A resumed supervisor starts from what the preserved logs already say.
    resume_state: InitVar[BootState | None] = None
    # The run's lock when the caller holds it already (a boot holds it from its first second);
    # None: the supervisor takes it for the time it supervises.
    lock: RunLock | None = None
    stop_asked: bool = field(default=False, init=False)  # `cluster stop` asked: end STOPPED
    state: BootState = field(init=False)
    warned: set[tuple[str, int | None]] = field(default_factory=set, init=False)
    # A predicted miss first seen at (watcher, rank) -> when; warned once it still holds a
    # sampling round later (see _judge).
    predicted_since: dict[tuple[str, int | None], float] = field(default_factory=dict, init=False)
    warnings: list[Finding] = field(default_factory=list, init=False)
    container_states: dict[int, str] = field(default_factory=dict, init=False)
    stop: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    followers: list[Follower] = field(init=False)
    started: float = field(init=False)
    phase_records: PhaseRecords = field(init=False)  # events.jsonl, read as it grows

    def __post_init__(self, resume_state: BootState | None) -> None:
        self.state = resume_state or initial_state([s.node.name for s in self.specs])
        self.followers = [
            Follower(
                self.runtime, s, self.run_dir.rank_dir(s.rank), self._on_lines, self._on_trouble
            )
            for s in self.specs
        ]
        self.started = self.clock()
        self.phase_records = PhaseRecords(self.run_dir.events_path)

    # -- event intake -----------------------------------------------------------------------

    def fold(self, event: Event) -> None:
        self.state = reduce(self.state, event)
        if not isinstance(event, (LogLine, Sample)):
            self.run_dir.append_event(event)

    def _on_lines(self, rank: int, stream: str, texts: list[str]) -> None:
        # Log lines are not events.jsonl records (the rank logs are); one fold for the batch.
        self.state = reduce_lines(self.state, rank, self.clock(), texts)

    def _on_trouble(self, rank: int, reason: str) -> None:
        self.run_dir.append_event(FollowInterrupted(rank=rank, reason=reason))

    def mark_started(self, spec: RankSpec) -> None:
        self.fold(RankStarted(ts=self.clock(), rank=spec.rank, container=spec.name))

    # -- tasks ------------------------------------------------------------------------------

    async def _sample_loop(self, spec: RankSpec) -> None:
        samples = self.run_dir.rank_dir(spec.rank) / "samples.jsonl"
        while not self.stop.is_set():
            started = self.clock()
            try:
                s = await self.runtime.sample(spec)
                # As short a deadline as the sample's: a link cut while the node is asked
                # for its container's state must not wait out a 30 s docker inspect.
                state = await self.runtime.state(spec, timeout_s=SAMPLE_TIMEOUT_S)
            except ClusterError as exc:
                r = self.state.rank(spec.rank)
                if answered_late(exc):
                    # Its sshd opened the session; the command was slow (a busy dockerd, a
                    # loaded host: seen on a busy CI host as a false NODE_LOST). Not a loss;
                    # recorded once per episode, and warned about if it lasts.
                    if r.slow_since is None or r.lost_since is not None:
                        log.warning("node slow to answer", node=spec.node.name, error=exc.line())
                        self.fold(NodeSlow(ts=started, rank=spec.rank, reason=exc.line()))
                else:
                    if r.lost_since is None:
                        log.warning("node not answering", node=spec.node.name, error=exc.line())
                    # Silent since this attempt began (it failed only after its timeout).
                    self.fold(NodeLost(ts=started, rank=spec.rank, reason=exc.line()))
            else:
                now = self.clock()
                if self.state.rank(spec.rank).lost_since is not None:
                    self.fold(NodeBack(ts=now, rank=spec.rank))
                self.fold(Sample(ts=now, rank=spec.rank, **sample_fields(s)))
                with samples.open("a") as fh:
                    fh.write(json.dumps({"ts": now, **s.as_json()}) + "\n")
                self.container_states[spec.rank] = state.status
                self._note_exit(spec, state)
            elapsed = self.clock() - started
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self.stop.wait(), max(self.cfg.sample_every_s - elapsed, 0.1)
                )

    async def settle_exits(self) -> None:
        """Ask every rank not yet seen exiting for its state now. Exits are noticed by each
        rank's sampler in turn, and on a busy host one sampler can lag the others by seconds:
        a judgement after the drain must see every exit that has happened, ordered by when
        each process ended, not by which sampler noticed it first."""
        todo = [s for s in self.specs if self.state.rank(s.rank).phase is not RankPhase.exited]

        async def one(spec: RankSpec) -> None:
            try:
                state = await self.runtime.state(spec, timeout_s=SAMPLE_TIMEOUT_S)
            except ClusterError:
                return  # its node does not answer: the loss watcher's news, not an exit
            self._note_exit(spec, state)

        await asyncio.gather(*(one(s) for s in todo))

    def _note_exit(self, spec: RankSpec, state: ExitState) -> None:
        event = exit_event(spec.rank, state, self.clock())
        if event is None or self.state.rank(spec.rank).phase is RankPhase.exited:
            return
        self.run_dir.write_json(f"rank-{spec.rank}/exit.json", state.as_json())
        self.fold(event)

    async def _ready_loop(self) -> None:
        url = self.cfg.ready_url
        if url is None:
            return
        while not self.stop.is_set():
            head = self.state.rank(0)
            if head.phase.order >= RankPhase.loaded.order and head.phase is not RankPhase.exited:
                latency = await asyncio.to_thread(probe_ready, url)
                if latency is not None:
                    self.fold(HeadReady(ts=self.clock(), latency_s=latency))
                    return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), self.cfg.sample_every_s)

    # -- the loop ---------------------------------------------------------------------------

    def view(self, phase: RunPhase, verdict: Finding | None = None) -> BootView:
        return build_view(
            self.state,
            self.clock(),
            self.cfg.watch,
            run_id=self.run_dir.id,
            recipe=self.recipe,
            phase=phase,
            warnings=tuple(self.warnings),
            verdict=verdict,
            endpoint=self.cfg.endpoint,
            container_states=self.container_states,
        )

    def _publish(self, phase: RunPhase, verdict: Finding | None = None) -> None:
        v = self.view(phase, verdict)
        self.run_dir.write_status(v)
        write_metrics(
            self.run_dir, v, self.phase_records
        )  # metrics.prom, for node_exporter's textfile collector
        if self.on_view:
            self.on_view(v)

    def request_stop(self) -> None:
        """`cluster stop` asked (through the run's lock): the loop ends with STOPPED."""
        self.stop_asked = True

    def _stopped(self) -> Finding | None:
        if not self.stop_asked:
            return None
        return Finding.verdict(
            "stop",
            Outcome.STOPPED,
            "`cluster stop` ended the run while it was supervised",
            advice="nothing failed; `cluster boot` starts it again",
        )

    def _judge(self) -> Finding | None:
        now = self.clock()
        predicted: set[tuple[str, int | None]] = set()
        for f in watch(self.state, now, self.cfg.watch):
            if f.severity == "verdict":
                return f
            key = (f.watcher, f.rank)
            if key in self.warned:
                continue
            if f.watcher in PREDICTIONS:
                # A miss predicted from read rates is warned only once a later sample still
                # predicts it: one late sample on a busy host (four ranks' rates dipping in the
                # same round) had warned ranks that then finished in time.
                predicted.add(key)
                since = self.predicted_since.setdefault(key, now)
                if now - since < self.cfg.sample_every_s:
                    continue
            self.warned.add(key)
            self.warnings.append(f)
            self.run_dir.append_event(WatcherWarning(**dict(f)))
            # People see it from the view (the boot's UI prints each warning once, with its
            # advice); programs read events.jsonl. At warning level it printed twice.
            log.info("watcher warning", message=f.message, advice=f.advice)
        for key in set(self.predicted_since) - predicted:
            del self.predicted_since[key]  # no longer predicted: it starts over if it returns
        if is_ready(self.state):
            return Finding.verdict(
                "ready",
                Outcome.READY,
                f"all {len(self.state.ranks)} ranks loaded; the head answers "
                f"in {self.state.head_latency_s or 0:.3f} s",
            )
        if now - self.started > self.cfg.ready_timeout_s:
            behind = [r for r in self.state.ranks if not r.phase.finished_loading]
            return Finding.verdict(
                "ready",
                Outcome.READY_TIMEOUT,
                f"not ready after {self.cfg.ready_timeout_s:.0f} s (timeouts.ready)",
                rank=behind[0].rank if behind else 0,
                advice="see each rank's phase above; raise timeouts.ready if the load is slow "
                "but moving",
            )
        return None

    async def supervise(self) -> Finding:
        tasks = [asyncio.create_task(f.run(self.stop)) for f in self.followers]
        tasks += [asyncio.create_task(self._sample_loop(s)) for s in self.specs]
        tasks.append(asyncio.create_task(self._ready_loop()))
        verdict: Finding | None = None
        own_lock = self.lock is None
        lock = self.lock or self.run_dir.acquire_lock()
        try:
            while verdict is None:
                await asyncio.sleep(self.cfg.tick_s)
                lock.beat()
                verdict = self._stopped() or self._judge()
                self._publish(RunPhase.booting)
            decided_at = self.clock()
            if verdict.outcome not in (Outcome.READY, Outcome.STOPPED):
                await asyncio.sleep(self.cfg.drain_s)  # let the last lines and exits land
                await self.settle_exits()
                # Exits are noticed in sampling order, not in the order they happened: judge
                # again once every rank's exit is in, by when each process really ended (and
                # a barrier miss explains the exits that followed it).
                later = self._judge()
                if later and later.outcome in (Outcome.BARRIER_TIMEOUT, Outcome.RANK_EXITED):
                    verdict = later
        finally:
            self.stop.set()
            # Followers of ranks that keep serving never end on their own: give every task a
            # moment to notice `stop`, then cancel what is left (all at once, not one by one).
            _done, pending = await asyncio.wait(tasks, timeout=DEADLINES.task_drain_s)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await asyncio.gather(*(self._reconcile(f) for f in self.followers))
            if own_lock:
                lock.release()
        phase = RunPhase.ready if verdict.outcome is Outcome.READY else RunPhase.failed
        self._publish(phase, verdict)
        self.run_dir.append_event(VerdictRecord(decided_at=decided_at, **dict(verdict)))
        return verdict

    async def _reconcile(self, f: Follower) -> None:
        """Reconcile one rank's copy with its node (all ranks at once). A node that is lost
        now is not waited for: its log up to the loss is what was kept, and follow.json says
        it was not reconciled."""
        lost = self.state.rank(f.spec.rank)
        try:
            if lost.lost_since is not None:
                f.write_bookkeeping(unreconciled=f"node unreachable: {lost.lost_reason}")
            else:
                try:
                    await f.reconcile()
                except ClusterError as exc:
                    f.write_bookkeeping(unreconciled=exc.line())
        finally:
            f.close()

    def lost_ranks(self) -> dict[int, str]:
        """Ranks whose node is unreachable now, with the reason."""
        return {r.rank: r.lost_reason for r in self.state.ranks if r.lost_since is not None}

    @property
    def repaired_bytes(self) -> int:
        return sum(f.repaired_bytes for f in self.followers)
