"""One simulated rank from start to serving (or to its failure), in the engine's own words.

The boot, as both engines do it (SGLang has all phases; vLLM has no barrier, autotune or warmup):

    startup -> init (TCP rendezvous, interface checks, group creation) -> load (the child reads
    this rank's share of the weights) -> barrier (SGLang's post-load monitored_barrier) -> kv ->
    autotune -> graph -> http (rank 0) -> warmup -> ready (rank 0 serves; every rank stays in the
    group until a peer's socket closes)

Engine time is scaled (timescale.py); reads, sockets and processes are real. How a lost peer is
felt depends on the phase, as with torch.distributed:

- init: Gloo's full mesh never forms (`Gloo connectFullMesh failed`);
- load: nothing stops the read; the TCPStore heartbeat warns when rank 0 is gone, and the loss
  is felt at the next collective (seed 002 boot 4: rank 0 loaded for 3.5 h after ranks 2/5/6/7
  had died at the barrier);
- barrier: any failure of the monitored_barrier becomes SGLang's ValueError;
- later: the next Gloo/NCCL operation fails (`Connection closed by peer`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.simulator import dialects as d
from orchestrator.simulator.cli_args import EngineArgs
from orchestrator.simulator.faults import (
    Fault,
    Memory,
    SignatureContext,
    signature_for,
)
from orchestrator.simulator.nodeview import node_view_dir, write_node_view
from orchestrator.simulator.rendezvous import (
    Group,
    PeerLost,
    RendezvousError,
    SyncTimeout,
    gloo_interface_problem,
    nccl_interface_problem,
)
from orchestrator.simulator.serve import ServeState, serve_rates, start_server
from orchestrator.simulator.timescale import (
    DIST_TIMEOUT_S,
    REAL_PHASE_S,
    SGLANG_BARRIER_S,
    SGLANG_WATCHDOG_S,
    Scale,
)
from orchestrator.simulator.voices import (
    GIB,
    Failure,
    Out,
    SGLangVoice,
    TqdmState,
    VLLMVoice,
    Voice,
    now,
)
from orchestrator.simulator.weights import Event, ReaderChild, WeightsInfo, loader_of, meminfo

ENV_READ_RATE = "CLUSTER_SIM_READ_RATE"
SGLANG_BARRIER_ENV = "SGLANG_UNBALANCED_LOAD_TIMEOUT_S"  # seed 002's patched image reads it
# Seed 002: 76.25 GB per rank in ~80 minutes over NFS = 15.9 MB/s. A rate is not scaled.
DEFAULT_READ_RATE = 16e6
DEFAULT_CONTEXT = 262144  # Mistral Small 4's native 256K (seed 000) when no flag says otherwise
CAPTURE_BATCHES = 23  # seed 000: `Capturing batches (bs=48): 23/23`


class Exit(Exception):
    """End with `code` after the voice already said why (uvicorn's bind error exits 1)."""

    def __init__(self, code: int) -> None:
        self.code = code
        super().__init__(f"exit {code}")


class ChildDied(Exception):
    def __init__(self, code: int) -> None:
        self.code = code
        super().__init__(f"worker exited with {code}")


# ---------------------------------------------------------------------------------------------
# The rank


@dataclass
class Timeouts:
    rendezvous: float
    rendezvous_shown: float
    collective: float
    collective_shown: float
    barrier: float
    barrier_shown: float
    watchdog: float
    watchdog_shown: float
    floored: set[str] = field(default_factory=set)


def timeouts_for(args: EngineArgs, scale: Scale, env: Mapping[str, str]) -> Timeouts:
    explicit = args.dist_timeout_s is not None
    dist = args.dist_timeout_s if args.dist_timeout_s is not None else DIST_TIMEOUT_S
    raw_barrier = env.get(SGLANG_BARRIER_ENV, "")
    barrier = float(raw_barrier) if raw_barrier.isdigit() else SGLANG_BARRIER_S
    watchdog = args.watchdog_timeout_s if args.watchdog_timeout_s is not None else SGLANG_WATCHDOG_S
    t = Timeouts(
        rendezvous=scale.timeout(dist, explicit=explicit, floor="rendezvous"),
        rendezvous_shown=dist,
        collective=scale.timeout(dist, explicit=explicit, floor="collective"),
        collective_shown=dist,
        barrier=scale.seconds(barrier),
        barrier_shown=barrier,
        watchdog=scale.seconds(watchdog),
        watchdog_shown=watchdog,
    )
    if t.rendezvous > scale.seconds(dist) + 1e-9:
        t.floored.add("rendezvous")
    if t.collective > scale.seconds(dist) + 1e-9:
        t.floored.add("collective")
    return t


@dataclass(eq=False)
class Rank:
    args: EngineArgs
    scale: Scale
    faults: list[Fault]
    weights: WeightsInfo
    read_rate: float
    env: Mapping[str, str]
    out: Out = field(default_factory=Out)
    # What the boot derives and changes as it goes:
    timeouts: Timeouts = field(init=False)
    voice: Voice = field(init=False)
    group: Group = field(init=False)
    child: ReaderChild | None = field(default=None, init=False)
    child_pid: int | None = field(default=None, init=False)
    serving: bool = field(default=False, init=False)
    _leaked_bytes: int = field(default=0, init=False)  # a modelled leak (simulator/nodeview.py)
    kv_started: float = field(default_factory=time.monotonic, init=False)
    _warned_store: bool = field(default=False, init=False)
    _state: ServeState | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        args = self.args
        self.timeouts = timeouts_for(args, self.scale, self.env)
        self.voice = SGLangVoice(self) if args.engine == "sglang" else VLLMVoice(self)
        self.group = Group(args.node_rank, args.world, args.dist_addr, args.dist_port)

    # -- helpers -------------------------------------------------------------------------------

    def memory(self) -> Memory:
        m = meminfo()
        return Memory(total=m.get("MemTotal", 0), free=m.get("MemFree", 0))

    def avail_gb(self) -> float:
        """What `get_available_gpu_memory` says on a GB10: MemFree (DOMAIN.md), in GiB."""
        return self.memory().free / GIB

    def max_len(self) -> int:
        return self.args.max_len or DEFAULT_CONTEXT

    def sig_ctx(self) -> SignatureContext:
        return SignatureContext(
            self.args.engine, self.max_len(), self.memory(), self.args.mem_fraction
        )

    def faults_at(self, phase: str) -> list[Fault]:
        return [f for f in self.faults if f.phase == phase and f.action != "slow-read"]

    def _loss_in_load(self) -> None:
        """A closed socket during the load: the read goes on; rank 0's loss is only warned about."""
        if self.group.lost.is_set() and self.args.node_rank != 0 and not self._warned_store:
            self._warned_store = True
            t = now()
            self.out.line(
                "err",
                d.torch_glog(
                    self.args.node_rank,
                    "W",
                    t,
                    t.microsecond * 1000,
                    "ProcessGroupNCCL.cpp:1771",
                    d.tcpstore_should_dump_warning(self.args.node_rank),
                ),
            )

    def _lost(self, peer_addr: str, peer_port: int) -> Failure:
        return Failure([d.gloo_closed_by_peer(peer_addr, peer_port)])

    def wait(self, real_s: float, *, phase: str) -> None:
        """Spend `real_s` of engine time; a closed socket fails the rank (outside the load)."""
        deadline = time.monotonic() + self.scale.seconds(real_s)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self.group.lost.is_set():
                self._on_loss(phase)
                time.sleep(min(left, 0.5))  # a loss this phase tolerates: do not spin on it
            else:
                self.group.lost.wait(min(left, 0.5))
            self._poll_child()

    def _on_loss(self, phase: str) -> None:
        peer = self.group.lost_peer
        if peer is None:
            return
        if phase == "load":
            self._loss_in_load()
        elif phase == "init":
            raise Failure([d.gloo_full_mesh_failed()])
        else:
            raise self._lost(peer.addr, peer.port)

    def _poll_child(self) -> None:
        if self.child is not None and self.child.proc.poll() is not None:
            raise ChildDied(self.child.proc.returncode)

    def sync(self, phase: str, timeout_s: float, *, kind: str = "collective") -> None:
        try:
            self.group.sync(phase, timeout_s)
        except PeerLost as lost:
            if kind == "barrier":
                raise Failure([d.sglang_barrier_error(self.args.tp_rank)]) from None
            if kind == "init":
                raise Failure([d.gloo_full_mesh_failed()]) from None
            raise self._lost(lost.peer.addr, lost.peer.port) from None
        except SyncTimeout:
            if kind == "barrier":
                raise Failure([d.sglang_barrier_error(self.args.tp_rank)]) from None
            t = now()
            shown_ms = int(self.timeouts.collective_shown * 1000)
            line = d.torch_glog(
                self.args.node_rank,
                "E",
                t,
                t.microsecond * 1000,
                "ProcessGroupNCCL.cpp:616",
                d.nccl_watchdog_timeout(
                    self.args.node_rank, 2, "ALLREDUCE", 1, 1, shown_ms, shown_ms + 49
                ),
            )
            raise Failure([], lines=[line]) from None

    def hang(self) -> None:
        """Stuck for good: no output, sockets open, the reader paused. Only a signal ends it."""
        while True:
            time.sleep(3600)

    def apply_faults(self, phase: str) -> None:
        self.apply_faults_of(self.faults_at(phase))

    def apply_faults_of(self, faults: list[Fault]) -> None:
        for fault in faults:
            if fault.action == "hang-at":
                self.hang()
            elif fault.action == "exit-at":
                sig = signature_for(fault)
                where = sig.where.get(self.args.engine, "worker")
                raise Failure(
                    sig.text(self.sig_ctx()).split("\n"),
                    code=fault.code,
                    sig=fault.signal,
                    where=where,
                )
            elif fault.action == "hog" and fault.size is not None:
                self._hog(fault.size)
            elif fault.action == "drop-peer":
                self.group.drop()
                self.hang()

    def _hog(self, nbytes: int) -> None:
        assert self.child is not None
        self.child.send(f"hog {nbytes}")
        self._expect("hogged")

    # -- the boot ------------------------------------------------------------------------------

    def run(self) -> int:
        try:
            self._boot()
            return 0
        except Failure as failure:
            self.voice.failure(failure, self.serving)
            self._end_child()
            if failure.sig:
                sys.stdout.flush()
                sys.stderr.flush()
                signum = getattr(signal, "SIG" + failure.sig)
                with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
                    signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
            return failure.code
        except Exit as done:
            self._end_child()
            return done.code
        except ChildDied as died:
            self.voice.child_died(died.code, self.serving)
            if self.args.engine == "sglang" and not self.serving:
                self.out.line("err", "Traceback (most recent call last):")
                self.out.line(
                    "err",
                    '  File "/cluster-sim/sglang/srt/entrypoints/engine.py", '
                    "line 1, in _launch_subprocesses",
                )
                self.out.line("err", "EOFError")
            self._end_child()
            return 1

    def _end_child(self) -> None:
        if self.child is not None:
            self.child.stop()

    def _boot(self) -> None:
        a = self.args
        self.voice.startup()
        self.wait(REAL_PHASE_S["startup"], phase="startup")

        # init: the worker process, the rendezvous, the interfaces, the groups
        pause_at = None
        if self.faults_at("load"):
            pause_at = self.weights.share_bytes(a.tp_rank, a.tp) // 2
        spec: dict[str, object] = {
            "dir": str(self.weights.directory),
            "rank": a.tp_rank,
            "world": a.tp,
            "rate": self.read_rate,
            "pause_at": pause_at,
            "loader": loader_of(self.env),
        }
        self.child = ReaderChild(spec)
        self.child_pid = self.child.pid
        self._expect("ready")
        self.apply_faults("init")
        started = time.monotonic()
        mem_before = self.memory().free
        self.voice.init_begin()
        try:
            self.group.join(self.timeouts.rendezvous, self.timeouts.rendezvous_shown)
        except RendezvousError as exc:
            raise Failure(exc.lines) from None
        gloo = gloo_interface_problem(self.env)
        if gloo is not None:
            raise Failure([gloo])
        if nccl_interface_problem(self.env):
            if self.env.get("NCCL_DEBUG", "").upper() in ("WARN", "INFO", "TRACE"):
                self.out.line(
                    "err",
                    d.nccl_debug(
                        socket.gethostname(),
                        os.getpid(),
                        os.getpid(),
                        0,
                        "WARN",
                        "Bootstrap : no socket interface found",
                        src="bootstrap.cc:45",
                    ),
                )
            raise Failure(d.nccl_no_interface_error())
        self.sync("init", self.timeouts.collective, kind="init")
        self.wait(REAL_PHASE_S["init"], phase="init")
        self.voice.init_end(
            time.monotonic() - started, max(mem_before - self.memory().free, 0) / GIB
        )

        # load
        self._load()

        # SGLang's post-load barrier
        if a.engine == "sglang":
            self.apply_faults("barrier")
            self.sync("barrier", self.timeouts.barrier, kind="barrier")

        # kv, autotune, graphs
        self.kv_started = time.monotonic()
        self.apply_faults("kv")
        self.sync("kv", self.timeouts.collective)
        self.wait(REAL_PHASE_S["kv"], phase="kv")
        self.voice.kv(self.avail_gb(), self.max_len())
        if a.engine == "sglang":
            self.apply_faults("autotune")
            self.voice.autotune()
            self.wait(REAL_PHASE_S["autotune"], phase="autotune")
        self.apply_faults("graph")
        self.sync("graph", self.timeouts.collective)
        self._graph()

        # every rank ready; rank 0 serves
        self.sync("serve", self.timeouts.collective)
        if a.node_rank == 0:
            self._serve_http()
        else:
            self.serving = True
            self.apply_faults("http")
            self.apply_faults("warmup")
            self.apply_faults("ready")
        self._stay()

    def _expect(self, kind: str) -> Event:
        assert self.child is not None
        while True:
            event = self.child.next_event(0.5)
            if event is None:
                continue
            if event.kind == "exited":
                raise ChildDied(int(event.values[0]))
            if event.kind == kind:
                return event

    def _load(self) -> None:
        a = self.args
        assert self.child is not None
        self.voice.load_begin(self.avail_gb())
        total = len(self.weights.shards)
        show = a.tp_rank == 0
        started = time.monotonic()
        bar = TqdmState()
        if show:
            self.voice.shard_bar(0, total, 0.0, last=False)
            bar.last_print = started
        self.child.send("load")
        n = 0
        while True:
            if self.group.lost.is_set():
                self._on_loss("load")
            event = self.child.next_event(0.25)
            if event is None:
                continue
            if event.kind == "exited":
                raise ChildDied(int(event.values[0]))
            if event.kind == "shard":
                n = int(event.values[0])
                t = time.monotonic()
                # tqdm's mininterval is 0.1 s: quicker updates are folded into the next one.
                if show and (t - bar.last_print >= 0.1 or n == total):
                    self.voice.shard_bar(n, total, t - started, last=False)
                    bar.last_print = t
            elif event.kind == "paused":
                self.apply_faults("load")
                self.child.send("continue")
            elif event.kind == "done":
                nbytes = int(event.values[0])
                elapsed = time.monotonic() - started
                if show:
                    self.voice.shard_bar(total, total, elapsed, last=True)  # tqdm.close()
                self.voice.load_end(elapsed, nbytes, self.avail_gb(), self.weights)
                return

    def _graph(self) -> None:
        started = time.monotonic()
        before = self.memory().free
        self.voice.graph_begin(self.avail_gb())
        step = REAL_PHASE_S["graph"] / CAPTURE_BATCHES
        for i in range(CAPTURE_BATCHES + 1):
            if i:
                self.wait(step, phase="graph")
            self.voice.graph_step(i, CAPTURE_BATCHES, time.monotonic() - started)
        usage = max(before - self.memory().free, 0) / GIB
        self.voice.graph_end(time.monotonic() - started, usage, self.avail_gb(), self.max_len())

    def _serve_http(self) -> None:
        a = self.args
        self.apply_faults("http")
        self.voice.http_begin()
        state = ServeState(
            engine=a.engine,
            served_model_name=a.served_model_name,
            model_path=a.model_path,
            max_len=self.max_len(),
            access_log=self.voice.access,
            rates=serve_rates(self.env),  # CLUSTER_SIM_PREFILL_RATE / _DECODE_RATE
        )
        self._state = state
        if not self.faults_at("ready"):
            state.released.set()
        try:
            start_server(a.host, a.port, state)
        except OSError as exc:
            self.voice.bind_failed(a.host, a.port, exc)
            raise Exit(1) from None
        self.voice.http_end()
        if a.engine == "sglang":
            self.wait(REAL_PHASE_S["warmup"], phase="warmup")
            self.apply_faults("warmup")
        self.serving = True
        state.ready.set()
        self.voice.ready()
        ready_faults = self.faults_at("ready")
        if ready_faults:
            # Faults at `ready` fire on the first generation request: a crash or hang in serving.
            while not state.first_request.wait(0.5):
                if self.group.lost.is_set():
                    self._on_loss("ready")
                self._poll_child()
            if any(f.action == "hang-at" for f in ready_faults):
                state.hung.set()
                state.released.set()
                if a.engine == "sglang":
                    # SGLang's scheduler watchdog ends a forward pass that makes no progress.
                    time.sleep(self.timeouts.watchdog)
                    self.voice.watchdog(self.timeouts.watchdog_shown)
                    raise Failure([], lines=[])
                self.hang()
            self.apply_faults("ready")
            state.released.set()

    def _stay(self) -> None:
        """Serve (rank 0) or wait for broadcasts (others) until a peer's socket closes; the
        `serving` phase's faults fire `after=` real seconds into it."""
        began = time.monotonic()
        pending = [f for f in self.faults if f.phase == "serving"]
        leaked: list[bytearray] = []
        while True:
            if self.group.lost.is_set():
                self._on_loss("ready")
            now_s = time.monotonic() - began
            for fault in [f for f in pending if f.after <= now_s]:
                if fault.action != "leak":
                    pending.remove(fault)
                self._serving_fault(fault, leaked, now_s - fault.after)
            self.group.lost.wait(0.25 if pending else 1.0)
            self._poll_child()

    def _serving_fault(self, fault: Fault, leaked: list[bytearray], running_s: float) -> None:
        """One serving-phase fault, `running_s` seconds after it began."""
        if fault.action == "exit-at":
            self.apply_faults_of([fault])
        elif fault.action == "hang-at":
            if self._state is not None:  # rank 0: the server stays up, no request finishes
                self._state.hung.set()
            else:
                self.hang()
        elif fault.action == "slow-serve" and self._state is not None:
            self._state.extra_delay = fault.delay or 0.0
        elif fault.action == "leak" and fault.rate and fault.size:
            held = sum(len(b) for b in leaked) + self._leaked_bytes
            # Paced by the clock, not by the 0.25 s ticks: on a starved host a tick comes late
            # and the leak catches up, so `leak=100MB/s` is 100 MB/s of wall time (a CI host at
            # load average 26 made a tick-paced leak 45 MB/s).
            step = min(int(fault.rate * max(running_s, 0.25)), fault.size) - held
            if step <= 0:
                return
            view = node_view_dir()
            if view is not None:
                # The built-in cluster: eight "nodes" share one machine, so real pages would
                # lower all eight readings alike, which no real cluster does. This node's
                # reading is modelled instead (simulator/nodeview.py): the machine's at the
                # leak's start, less what this rank has leaked.
                self._leaked_bytes += step
                write_node_view(view, self._leaked_bytes)
                return
            # A container of its own (the netns testbed, a real node): real pages, touched,
            # so the node's MemAvailable really falls (bounded by max=).
            chunk = bytearray(step)
            for i in range(0, step, 4096):
                chunk[i] = 1
            leaked.append(chunk)


def describe(rank: Rank) -> str:
    """The `[cluster-sim]` start line: what is imitated and what one real second is worth here."""
    a, t, s = rank.args, rank.timeouts, rank.scale

    def scaled(name: str, shown: float, sim: float, key: str | None = None) -> str:
        floor = " (floor)" if key and key in t.floored else ""
        return f"{name} {shown:g} s -> {sim:.2f} s{floor}"

    parts = [
        f"[cluster-sim] {a.engine} rank {a.node_rank}/{a.world} (TP{a.tp_rank}), {s.describe()}",
        scaled("dist timeout", t.rendezvous_shown, t.rendezvous, "rendezvous"),
        scaled("collective timeout", t.collective_shown, t.collective, "collective"),
    ]
    if a.engine == "sglang":
        parts.append(scaled("barrier window", t.barrier_shown, t.barrier))
        parts.append(scaled("watchdog", t.watchdog_shown, t.watchdog))
    rate = f"{rank.read_rate / 1e6:.3g} MB/s" if rank.read_rate else "unlimited"
    share = rank.weights.share_bytes(a.tp_rank, a.tp)
    parts.append(f"read rate {rate}")
    parts.append(
        f"weights {rank.weights.directory} ({len(rank.weights.shards)} shards, "
        f"{share / 1e6:.3g} MB for this rank)"
    )
    parts.append("faults: " + (" ; ".join(f.raw for f in rank.faults) or "none"))
    return "; ".join(parts)


def ignore_sigpipe() -> None:
    with contextlib.suppress(AttributeError, ValueError):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
