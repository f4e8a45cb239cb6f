"""Watchers: pure functions of (state, now, config) that return findings. No I/O, no clock.

A warning says what is coming while there is still time to act; a verdict ends the boot with an
`Outcome`. The supervisor calls `watch()` once a second and acts on the first verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.models.run import Finding, Outcome, RankPhase
from orchestrator.supervisor.state import BootState, RankState

GiB = 2**30
MB = 10**6


@dataclass(frozen=True)
class WatchConfig:
    """The numbers the watchers judge by; from the recipe (scaled for a simulated twin)."""

    engine: str = "sglang"  # which engine's waits apply (the barrier is SGLang's alone)
    barrier_window_s: float = 480.0  # SGLang's UNBALANCED_MODEL_LOADING_TIMEOUT_S
    barrier_env: str = "SGLANG_UNBALANCED_LOAD_TIMEOUT_S"
    # vLLM's frontend waits this long for its engine core to report ready, weight loading
    # included (vllm/v1/engine/core_client.py: "Timed out waiting for engine core processes to
    # start"), then raises TimeoutError. The same name and 600 s default in 0.17.1, 0.19.0, 0.33.0.
    rendezvous_s: float = 600.0  # the recipe's timeouts.rendezvous
    vllm_ready_timeout_s: float = 600.0
    vllm_ready_env: str = "VLLM_ENGINE_READY_TIMEOUT_S"
    expected_bytes_per_rank: int | None = None
    mem_free_floor: int = 8 * GiB  # a community guard uses MemFree >= 8 GiB on GB10
    lost_grace_s: float = 6.0  # a node silent this long is lost (the test allows 10 s)
    stall_s: float = 300.0  # no progress signal for this long while others progress
    min_rate_samples: int = 2  # never predict from a single reading of the load itself
    miss_margin: float = 0.05  # predicted lateness below 5% of the window is noise


VLLM_READY_ENV = "VLLM_ENGINE_READY_TIMEOUT_S"
VLLM_READY_DEFAULT_S = 600.0


def watch_config_for(
    engine: str,
    *,
    barrier_window_s: float,
    env: Mapping[str, str],
    expected_bytes_per_rank: int | None,
    scale: float = 1.0,
    rendezvous_s: float = 600.0,
) -> WatchConfig:
    """The waits of `engine`, from the recipe (a twin: its scaled barrier, and `scale` for the
    env values the simulator scales itself). SGLang: the post-load barrier, whose window the
    recipe's timeouts.barrier states (it equals the env the image reads). vLLM: no barrier; the
    frontend's ready deadline, VLLM_ENGINE_READY_TIMEOUT_S or its 600 s default. A twin's
    MemFree floor is scaled like every other byte count of it (simulator/timescale.py): its nodes
    are this machine, whose own page cache (another test, a build) is not the twin's weights."""
    raw = env.get(VLLM_READY_ENV, "")
    ready = float(raw) if raw.isdigit() else VLLM_READY_DEFAULT_S
    return WatchConfig(
        engine=engine,
        barrier_window_s=barrier_window_s,
        expected_bytes_per_rank=expected_bytes_per_rank,
        vllm_ready_timeout_s=ready * scale,
        rendezvous_s=rendezvous_s,
        mem_free_floor=int(WatchConfig.mem_free_floor * scale),
    )


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GiB:.1f} GiB"


def _names(ranks: list[RankState]) -> str:
    return ", ".join(f"rank {r.rank} ({r.node})" for r in ranks)


def _warning(watcher: str, rank: int, *, message: str, advice: str) -> Finding:
    """A warning: the boot goes on; the supervisor records it once."""
    return Finding(watcher=watcher, severity="warning", rank=rank, message=message, advice=advice)


def _late_warning(
    watcher: str, r: RankState, late: float, misses: str, detail: str, *, advice: str
) -> Finding:
    """Rank `r` is predicted to finish loading `late` s after a deadline (inf: it reads nothing,
    so no wider window helps and `advice` does not apply)."""
    late_s = "never at its current rate" if math.isinf(late) else f"by ~{late:.0f} s"
    return _warning(
        watcher,
        r.rank,
        message=f"rank {r.rank} ({r.node}) will {misses} {late_s}{detail}",
        advice=advice
        if math.isfinite(late)
        else "the rank reads nothing: check its node's disk or NFS mount, or stop now",
    )


def _verdict(
    watcher: str, rank: int | None, outcome: Outcome, *, message: str, advice: str
) -> list[Finding]:
    """A verdict: the boot ends with `outcome`; `rank` is the one it names first."""
    return [Finding.verdict(watcher, outcome, message, rank=rank, advice=advice)]


def _predicted_finish(
    r: RankState, now: float, cfg: WatchConfig, *, steady: bool = False
) -> float | None:
    """When this rank's weights will be in, from its measured read rate; None if unknown.
    `steady`: from the whole load's average alone (the smoothed rate ignored)."""
    if r.phase.finished_loading:
        return r.load_ended_at
    if r.phase is not RankPhase.loading:  # not reading weights yet (or gone): no basis
        return None
    # Samples of the load itself: before its begin line the rank reads code and config, not
    # weights, and a rate from then (1.2 MB/s on a busy CI host, 1.3 s into the load) predicted
    # a 59 s miss for a rank that loaded in 10 s.
    if not cfg.expected_bytes_per_rank or r.load_samples < cfg.min_rate_samples:
        return None
    remaining = max(cfg.expected_bytes_per_rank - r.bytes_read, 0)
    # The better of the smoothed rate and the whole load's average: a momentary dip (one late
    # sample on a busy host, a pause between shards) must not predict a miss the load as a whole
    # does not; a rank slow throughout is slow by both, and one that collapses mid-load is the
    # stall and page-cache watchers' news until its average falls too.
    rate = (r.load_rate or r.read_rate or 0.0) if steady else _projection_rate(r)
    if rate <= 0:
        return math.inf
    return now + remaining / rate


def _projection_rate(r: RankState) -> float:
    return max(r.read_rate or 0.0, r.load_rate or 0.0)


def watch_barrier(s: BootState, now: float, cfg: WatchConfig) -> list[Finding]:
    """SGLang's post-load barrier: the window opens when the first rank finishes loading.

    Only SGLang has it: vLLM's ranks may finish loading minutes apart (watch_vllm_ready)."""
    if cfg.engine != "sglang":
        return []
    live = [r for r in s.ranks if r.phase is not RankPhase.exited or r.barrier_failed]
    unfinished = [r for r in s.ranks if not r.phase.finished_loading and not r.barrier_failed]
    failed = [r for r in s.ranks if r.barrier_failed]
    if failed or (
        s.first_load_end_at is not None and now > s.first_load_end_at + cfg.barrier_window_s
    ):
        # When the barrier broke: the first rank's report of it, else the window's end.
        reported = [r.barrier_failed_at for r in failed if r.barrier_failed_at is not None]
        broke_at = min(reported, default=(s.first_load_end_at or now) + cfg.barrier_window_s)
        # A rank that had already died (OOM, a crash) broke the barrier; it did not miss it.
        # Its exit is the news (watch_exits names it), and a wider window would not help.
        died_first = [
            r
            for r in unfinished
            if r.phase is RankPhase.exited and r.exited_at is not None and r.exited_at < broke_at
        ]
        stragglers = [
            r for r in unfinished if r.phase is not RankPhase.pending and r not in died_first
        ]
        if died_first and not stragglers:
            return []
        if not stragglers and not failed:
            return []
        if not failed and any(r.lost_since is not None for r in stragglers):
            # An unreachable rank may well have finished: its node's log just cannot say so.
            # No rank reports a failed barrier, so the loss is the news (watch_loss names it).
            return []
        if failed and not stragglers:
            return _barrier_broken_by_network(s, failed)
        names = _names(stragglers) or "unknown"
        first = stragglers[0].rank if stragglers else None
        return _verdict(
            "barrier",
            first,
            Outcome.BARRIER_TIMEOUT,
            message=(
                f"post-load barrier missed: {names} had not finished loading when the "
                f"{cfg.barrier_window_s:.0f} s window closed; the other ranks' ValueError is "
                "the consequence"
            ),
            advice=(
                f"find why {names} loads slowly (disk, NFS, page cache), or raise the window "
                f"({cfg.barrier_env} in the recipe's env and timeouts.barrier)"
            ),
        )
    if not unfinished or not live:
        return []
    finishes = {r.rank: _predicted_finish(r, now, cfg) for r in s.ranks}
    if s.first_load_end_at is not None:
        opens = s.first_load_end_at
    else:
        # The window will open at the first rank's finish, predicted from each rank's steady
        # rate (its whole load's average): a smoothed rate that one early or late sample on a
        # busy host pushed up would open it seconds early and put every other rank "late".
        # The rank accused still gets the better of its two rates (_predicted_finish).
        steady = [_predicted_finish(r, now, cfg, steady=True) for r in s.ranks]
        known = [t for t in steady if t is not None and math.isfinite(t)]
        if len(known) < 1:
            return []
        opens = min(known)
    deadline = opens + cfg.barrier_window_s
    findings = []
    for r in unfinished:
        t = finishes[r.rank]
        if t is None or r.phase is RankPhase.exited or r.lost_since is not None:
            continue  # no basis, or gone, or a rate last measured before its node went silent
        late = t - deadline
        if late <= cfg.miss_margin * cfg.barrier_window_s:
            continue
        rate = f"{_projection_rate(r) / MB:.1f} MB/s"
        left = max((cfg.expected_bytes_per_rank or 0) - r.bytes_read, 0)
        findings.append(
            _late_warning(
                "barrier",
                r,
                late,
                "miss the post-load barrier",
                f": {_gib(left)} left at {rate}; the window closes "
                f"{max(deadline - now, 0):.0f} s from now",
                advice=(
                    f"raise {cfg.barrier_env} (and timeouts.barrier) above "
                    f"~{(t - opens) * 1.2:.0f} s if this rate is expected, or stop now "
                    "(`cluster stop`) and fix the node's reads rather than burn the window"
                ),
            )
        )
    return findings


def watch_vllm_ready(s: BootState, now: float, cfg: WatchConfig) -> list[Finding]:
    """vLLM: warn when the slowest rank's predicted load end passes the frontend's deadline,
    counted from rank 0's start (the frontend starts waiting then). The deadline's end itself
    is the engine's to report: it raises TimeoutError and exits, which watch_exits names."""
    if cfg.engine != "vllm":
        return []
    head = next((r for r in s.ranks if r.rank == 0), None)
    if head is None or head.started_at is None:
        return []
    deadline = head.started_at + cfg.vllm_ready_timeout_s
    findings = []
    for r in s.ranks:
        if r.phase.finished_loading or r.phase is RankPhase.exited or r.lost_since is not None:
            continue
        t = _predicted_finish(r, now, cfg)
        if t is None or t - deadline <= cfg.miss_margin * cfg.vllm_ready_timeout_s:
            continue
        findings.append(
            _late_warning(
                "vllm-ready",
                r,
                t - deadline,
                "finish loading after vLLM's engine-ready deadline",
                f" ({cfg.vllm_ready_env}={cfg.vllm_ready_timeout_s:.0f} s from rank 0's start)",
                advice=(
                    f"raise {cfg.vllm_ready_env} in the recipe's env above "
                    f"~{(t - head.started_at) * 1.2:.0f} s if this rate is expected"
                ),
            )
        )
    return findings


_NOT_JOINED = (RankPhase.pending, RankPhase.starting, RankPhase.exited, RankPhase.unreachable)


def watch_rendezvous(s: BootState, now: float, cfg: WatchConfig) -> list[Finding]:
    """Ranks that have not joined the group `rendezvous_s` after the first rank started.

    torch's init_process_group returns on no rank until every rank has joined, so while no rank
    has begun loading the group has not formed. The ranks that never reached `initializing` (no
    engine line: their container or process did not get that far, or died) are the missing ones;
    when every rank got there, all of them are stuck in the init. Without this bound the boot
    would wait for torch's own store timeout (~30 min) or the recipe's hours-long total."""
    started = [r.started_at for r in s.ranks if r.started_at is not None]
    if not started or now < min(started) + cfg.rendezvous_s:
        return []
    if any(
        r.phase.order > RankPhase.initializing.order and r.phase not in _NOT_JOINED for r in s.ranks
    ):
        return []  # the group formed: a rank is loading (or past it)
    if not any(r.phase is RankPhase.initializing for r in s.ranks):
        return []  # nobody waits at the rendezvous: the exits and loss watchers speak
    missing = [r for r in s.ranks if r.phase in _NOT_JOINED] or list(s.ranks)
    names = _names(missing)
    last = "; ".join(
        f"rank {r.rank} last printed: {r.last_lines[-1]!r}"
        if r.last_lines
        else f"rank {r.rank} printed nothing"
        for r in missing[:4]
    )
    return _verdict(
        "rendezvous",
        missing[0].rank,
        Outcome.RENDEZVOUS_STALLED,
        message=(
            f"{names} had not joined the group {cfg.rendezvous_s:.0f} s after the first rank "
            f"started (torch's store would wait ~30 min); {last}"
        ),
        advice=(
            "check that the missing ranks' containers started and reach the head's "
            "rendezvous port over the fabric (`cluster preflight`: rendezvous-tcp), and their "
            "NCCL/Gloo interface; raise timeouts.rendezvous only if starts are known to be slow"
        ),
    )


def _barrier_broken_by_network(s: BootState, failed: list[RankState]) -> list[Finding]:
    """Every rank had loaded, yet the barrier failed: a peer could not be reached. The rank
    whose node was lost, else the ranks that did not raise with the others (their link went
    down, so the barrier could not reach them), is the cause; the ValueErrors are the echo."""
    lost = sorted(
        (r for r in s.ranks if r.lost_since is not None and not r.barrier_failed),
        key=lambda r: r.lost_since or 0.0,
    )
    silent = [r for r in s.ranks if not r.barrier_failed and r.phase is not RankPhase.exited]
    blamed = lost[:1] or silent
    raised = ", ".join(str(r.rank) for r in failed)
    if not blamed:
        return []  # every rank raised: no one to name here (the exits say the rest)
    names = _names(blamed)
    how = (
        "became unreachable"
        if lost
        else "did not report the barrier failure (its link to the others went down, or it hung)"
    )
    return _verdict(
        "barrier",
        blamed[0].rank,
        Outcome.NODE_LOST,
        message=(
            f"{names} {how} after loading, while the others waited at the post-load "
            f"barrier; their ValueError (ranks {raised}) is the consequence"
        ),
        advice=(
            f"check {names}: the node, its fabric link and interface (carrier, address), "
            "and the route between the nodes; a wider barrier window would not help"
        ),
    )


def watch_page_cache(s: BootState, cfg: WatchConfig) -> list[Finding]:
    """GB10: cudaMemGetInfo reports MemFree, so page cache from weight reads starves the GPU."""
    findings = []
    for r in s.ranks:
        if r.phase not in (RankPhase.loading, RankPhase.initializing, RankPhase.loaded):
            continue
        m = r.memory
        starved = m.mem_free is not None and m.mem_free < cfg.mem_free_floor
        if starved and m.cached is not None and m.cached > cfg.mem_free_floor:
            findings.append(
                _warning(
                    "page-cache",
                    r.rank,
                    message=(
                        f"rank {r.rank} ({r.node}): MemFree {_gib(m.mem_free)} is under the "
                        f"{_gib(cfg.mem_free_floor)} floor while Cached is {_gib(m.cached)} "
                        f"(MemAvailable {_gib(m.mem_available)}); on GB10 the GPU sees MemFree"
                    ),
                    advice=(
                        "do NOT drop caches (seed 002: it wiped the warm NFS cache, 40 min → "
                        "3.5 h); let the load converge, lower --mem-fraction-static / "
                        "--gpu-memory-utilization if allocation fails, or evict finished "
                        "shards with posix_fadvise(DONTNEED)"
                    ),
                )
            )
        if (
            r.phase is RankPhase.loading
            and r.rate_samples >= 3
            and r.peak_rate > 50 * MB
            and r.read_rate is not None
            and r.read_rate < 0.2 * r.peak_rate
        ):
            findings.append(
                _warning(
                    "page-cache",
                    r.rank,
                    message=(
                        f"rank {r.rank} ({r.node}): read rate collapsed to "
                        f"{r.read_rate / MB:.1f} MB/s from a peak of {r.peak_rate / MB:.1f} MB/s"
                    ),
                    advice="check the node's disk/NFS and memory pressure (MemFree, Dirty)",
                )
            )
    return findings


def watch_exits(s: BootState) -> list[Finding]:
    """The first rank to exit before READY ends the boot, named with its evidence."""
    exited = sorted(
        (r for r in s.ranks if r.phase is RankPhase.exited and not r.barrier_failed),
        key=lambda r: r.exited_at or 0,
    )
    if not exited:
        return []
    r = exited[0]
    why = "OOMKilled" if r.oom_killed else f"exit code {r.exit_code}"
    return _verdict(
        "exits",
        r.rank,
        Outcome.RANK_EXITED,
        message=(
            f"rank {r.rank} ({r.node}) exited ({why}) while "
            f"{(r.phase_at_exit or r.phase).value}: {r.last_line[:200]}"
        ),
        advice="see the postmortem below and the rank's log in the run directory",
    )


def _silent_since(r: RankState) -> float | None:
    """Since when a rank's node has said nothing: a failed sample starts it, and any later
    signal (its log stream delivering lines) moves it on. A controller too busy to finish
    a sample in time, while the node's log still flows, has not lost that node."""
    if r.lost_since is None:
        return None
    return max(r.lost_since, r.last_signal_at or 0.0)


def watch_loss(s: BootState, now: float, cfg: WatchConfig) -> list[Finding]:
    lost = [
        r
        for r in s.ranks
        if (since := _silent_since(r)) is not None and now - since >= cfg.lost_grace_s
    ]
    if not lost:
        return []
    r = min(lost, key=lambda x: _silent_since(x) or 0)
    return _verdict(
        "loss",
        r.rank,
        Outcome.NODE_LOST,
        message=(
            f"node {r.node} (rank {r.rank}) unreachable for "
            f"{now - (_silent_since(r) or now):.0f} s: {r.lost_reason}"
        ),
        advice="check the node's management link and sshd; its log up to the loss is kept",
    )


def watch_slow_nodes(s: BootState, now: float, cfg: WatchConfig) -> list[Finding]:
    """A node that answers but whose sampling commands have run past their deadline for the
    loss grace: not lost (its sshd opened each session), yet its readings are stale. A warning,
    never a verdict: a busy docker daemon on a loading node must not end an 80-minute boot."""
    return [
        _warning(
            "slow-node",
            r.rank,
            message=(
                f"node {r.node} (rank {r.rank}) answers, but its sampling commands have run "
                f"past their deadline for {now - since:.0f} s ({r.slow_reason}); its "
                "readings are stale, and it is not counted lost (its sshd answers)"
            ),
            advice=(
                f"check {r.node}'s load and its docker daemon (`docker info` there); its "
                "memory and read progress show again once it answers in time"
            ),
        )
        for r in s.ranks
        if (since := r.slow_for) is not None and now - since >= cfg.lost_grace_s
    ]


def watch_stalls(s: BootState, now: float, cfg: WatchConfig) -> list[Finding]:
    moving = [r for r in s.ranks if r.progress_at is not None and now - r.progress_at < cfg.stall_s]
    if not moving:
        return []
    findings = []
    for r in s.ranks:
        if r.phase in (RankPhase.exited, RankPhase.serving) or r.phase.finished_loading:
            continue
        if r.progress_at is not None and now - r.progress_at >= cfg.stall_s:
            findings.append(
                _warning(
                    "stall",
                    r.rank,
                    message=(
                        f"rank {r.rank} ({r.node}) has shown no progress for "
                        f"{now - r.progress_at:.0f} s while {len(moving)} other ranks progress"
                    ),
                    advice="look at its last lines (`cluster logs --rank K`) and its node",
                )
            )
    return findings


def is_ready(s: BootState) -> bool:
    """Every rank past loading (none exited) and the head answering its readiness path."""
    return s.head_ready_at is not None and all(
        r.phase.finished_loading and r.phase is not RankPhase.exited for r in s.ranks
    )


def watch(s: BootState, now: float, cfg: WatchConfig) -> list[Finding]:
    """All watchers, verdicts first in priority order: barrier, loss, exits; then warnings."""
    findings = [
        *watch_barrier(s, now, cfg),
        *watch_rendezvous(s, now, cfg),
        *watch_vllm_ready(s, now, cfg),
        *watch_loss(s, now, cfg),
        *watch_exits(s),
        *watch_page_cache(s, cfg),
        *watch_stalls(s, now, cfg),
        *watch_slow_nodes(s, now, cfg),
    ]
    return sorted(findings, key=lambda f: f.severity != "verdict")
