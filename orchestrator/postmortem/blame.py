"""Who is to blame: the candidates for the first failing rank, strongest evidence first.

Blame runs on evidence strength before time, because clocks and print order lie in a cascade:

3  a cause on the rank itself: a signature with role `cause` in its lines, or an exit state a
   signature names (OOMKilled; exit 137 before anyone else failed; exit 127 a second after
   start with nothing printed). Earliest wins among these.
2  the straggler of SGLang's post-load barrier: the barrier ValueError is printed by the ranks
   that FINISHED loading, so the blamed rank is the one that never printed `Load weight end`.
1  a rank that failed with only symptoms (a traceback's first line, "see root cause above") or
   only a bad exit code.
0  nothing but consequences (NCCL watchdogs, lost peers): the rank that fell silent first, or
   else the first to complain; with no failure at all, the rank left behind; last of all, the
   supervisor's own verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.postmortem.exit_rules import earliest, exit_evidence
from orchestrator.postmortem.families import Family, Raised, classify, exception_of
from orchestrator.postmortem.model import PHASES, Evidence, Hit, RankFacts, RunFacts
from orchestrator.postmortem.signatures import CATEGORIES, Compiled, SignatureSet
from orchestrator.wording import clock, rank_list, short

OUTCOME_CATEGORY = {
    "BARRIER_TIMEOUT": "load-barrier-timeout",
    "IMAGE_FAILED": "image-unpack-race",
    "NODE_LOST": "rendezvous-network",
    "READY": "ready",
}


@dataclass
class Candidate:
    rank: int
    strength: int
    ts: float | None
    category: str
    signature: str | None
    title: str
    confidence: str
    reason: str
    evidence: list[Evidence] = field(default_factory=list)
    brief: bool = False  # the title already says when and where: no time/phase suffix

    def key(self) -> tuple[int, float, int]:
        return (-self.strength, self.ts if self.ts is not None else float("inf"), self.rank)


def candidates(
    ranks: Sequence[RankFacts],
    hits: Mapping[int, list[Hit]],
    sigs: SignatureSet,
    failed: set[int],
) -> list[Candidate]:
    out: list[Candidate] = []
    causes: dict[int, Candidate] = {}
    # the boot's engine when a rank's own lines do not say (one pasted file: one engine)
    boot_engine = next((e for r in ranks if (e := engine_of(r, hits[r.rank], sigs))), None)
    for r in ranks:
        own = [h for h in hits[r.rank] if h.role == "cause"]
        if not own:
            continue
        # the first cause (a weak one only when nothing stronger is there); an OOM kill outranks
        # whatever the dying process printed after it
        strong = [h for h in own if not sigs.by_id[h.signature].sig.weak]
        first = (strong or own)[0]
        oom = [h for h in own if h.via == "exit" and h.category == "out-of-memory"]
        if oom and r.exit is not None and r.exit.oom_killed:
            first = oom[0]
        c = sigs.by_id[first.signature]
        confidence = "high" if first.via == "log" or (r.exit and r.exit.oom_killed) else "medium"
        engine = engine_of(r, hits[r.rank], sigs) or boot_engine
        cand = Candidate(
            rank=r.rank,
            strength=2 if c.sig.waits or c.sig.weak else 3,
            ts=earliest(h.evidence.ts for h in (strong or own)),
            category=c.sig.engine_category.get(engine or "", c.sig.category),
            signature=c.id,
            title=c.sig.title,
            confidence=confidence,
            reason=cause_reason(r, first, c),
            evidence=[h.evidence for h in own if h.signature == first.signature][:3]
            + [h.evidence for h in own if h.signature != first.signature][:2],
        )
        causes[r.rank] = cand
        out.append(cand)

    # A node the supervisor lost while the others waited on it (at the barrier, in a
    # collective): its rank is the cause, whatever its peers printed about the lost peer.
    for r in ranks:
        if r.lost is None or r.rank in causes:
            continue
        others = [k for k in failed if k != r.rank]
        if not others:
            continue
        cand = Candidate(
            rank=r.rank,
            strength=3,
            ts=r.lost.ts,
            category="rendezvous-network",
            signature=None,
            title="its node became unreachable (the network to it was cut, or the node went down)",
            confidence="medium",
            reason=f"rank {r.rank}'s node became unreachable while ranks {rank_list(others)} "
            "waited on it; their errors about a lost peer are the consequence",
            evidence=[r.lost] + ([r.last_line] if r.last_line else []),
        )
        causes[r.rank] = cand
        out.append(cand)

    # The post-load barrier: it blames the ranks that did not finish loading.
    barrier = [(r.rank, h) for r in ranks for h in hits[r.rank] if h.role == "barrier"]
    if barrier:
        printers = {k for k, _ in barrier}
        c = sigs.by_id[barrier[0][1].signature]
        fired = earliest(h.evidence.ts for _, h in barrier)
        stragglers = [
            r
            for r in ranks
            if r.rank not in printers and "load_end" not in r.markers and r.phase != "serving"
        ]
        if not stragglers:
            stragglers = [r for r in ranks if r.rank not in printers]
        for s in stragglers:
            if s.rank in causes:
                causes[s.rank].reason += (
                    f"; it had not finished loading when the post-load barrier expired "
                    f"(ranks {rank_list(printers)} had)"
                )
                continue
            out.append(
                Candidate(
                    rank=s.rank,
                    strength=2,
                    ts=fired,
                    category=c.sig.category,
                    signature=c.id,
                    title="it was still loading when SGLang's post-load barrier expired",
                    confidence="medium",
                    reason=straggler_reason(s, printers, fired),
                    evidence=[barrier[0][1].evidence] + ([s.last_line] if s.last_line else []),
                )
            )

    # Failed with symptoms only, or only a bad exit.
    blamed = {c.rank for c in out}
    for r in ranks:
        if r.rank in blamed or r.rank not in failed:
            continue
        own = hits[r.rank]
        if any(h.role in ("cascade", "barrier") for h in own):
            continue
        symptoms = [h for h in own if h.role == "symptom"]
        if symptoms:
            c = sigs.by_id[symptoms[0].signature]
            out.append(
                Candidate(
                    rank=r.rank,
                    strength=1,
                    ts=symptoms[0].evidence.ts,
                    category="unknown",
                    signature=c.id,
                    title=c.sig.title,
                    confidence="low",
                    reason=f"{c.sig.title}; no signature names the cause "
                    f"(read {symptoms[0].evidence.where} and the lines before it)",
                    evidence=[h.evidence for h in symptoms][:3]
                    + ([r.last_line] if r.last_line else []),
                )
            )
        elif r.exit is not None:
            out.append(
                Candidate(
                    rank=r.rank,
                    strength=1,
                    ts=r.exit.finished_at,
                    category="unknown",
                    signature=None,
                    title=f"exited with code {r.exit.exit_code}",
                    confidence="low",
                    reason=f"exited with code {r.exit.exit_code} without a recognised error "
                    f"(last line: {short(r.last_line.text) if r.last_line else 'none'})",
                    evidence=[exit_evidence(r)] + ([r.last_line] if r.last_line else []),
                )
            )
    return out


def engine_of(r: RankFacts, hits: Sequence[Hit], sigs: SignatureSet) -> str | None:
    """The engine a rank ran: its dialect's milestones say, else a signature only that engine
    prints (SGLang's sigquit, its scheduler's exception)."""
    if r.engine:
        return r.engine
    for h in hits:
        engines = sigs.by_id[h.signature].sig.engines
        if len(engines) == 1 and engines[0] in ("sglang", "vllm"):
            return engines[0]
    return None


def from_consequences(
    ranks: Sequence[RankFacts],
    hits: Mapping[int, list[Hit]],
    sigs: SignatureSet,
    failed: set[int],
) -> Candidate | None:
    """Only echoes of a failure: blame the rank that fell silent first, else the first echo."""
    echoes = [(r.rank, h) for r in ranks for h in hits[r.rank] if h.role in ("cascade", "barrier")]
    if not echoes:
        return None
    echoes.sort(key=lambda kh: (kh[1].evidence.ts is None, kh[1].evidence.ts or 0.0))
    first_rank, first_hit = echoes[0]
    c = sigs.by_id[first_hit.signature]
    began = first_hit.evidence.ts
    complainers = {k for k, _ in echoes}
    silent = []
    for r in ranks:
        if r.rank in complainers:
            continue
        last = r.last_line.ts if r.last_line else None
        if r.lines == 0 or last is None or began is None or last <= began:
            silent.append((last if last is not None else float("-inf"), r))
    if silent:
        silent.sort(key=lambda lr: (lr[0], lr[1].rank))
        r = silent[0][1]
        said = (
            f"its last line was at {clock(r.last_line.ts)}" if r.last_line else "it printed nothing"
        )
        return Candidate(
            rank=r.rank,
            strength=0,
            ts=r.last_line.ts if r.last_line else None,
            category=c.sig.category,
            signature=None,
            title=f"went silent while the others reported a lost peer ({c.sig.title})",
            confidence="low",
            reason=f"rank {r.rank} fell silent and printed no error of its own ({said}); the "
            f"other ranks report it ({c.sig.title}): a peer stopped",
            evidence=([r.last_line] if r.last_line else []) + [first_hit.evidence],
        )
    return Candidate(
        rank=first_rank,
        strength=0,
        ts=began,
        category=c.sig.category,
        signature=c.id,
        title=c.sig.title,
        confidence="low",
        reason=f"only consequences were found; rank {first_rank} reported first: {c.sig.title}",
        evidence=[first_hit.evidence],
    )


def from_exceptions(ranks: Sequence[RankFacts], prefer: int | None = None) -> Candidate | None:
    """No signature names the failure: the exception a rank raised, mapped by family.

    Medium-confidence families first, then the earliest line; `prefer` (the rank the evidence
    already points at) wins among equals."""
    found: list[tuple[int, float, int, int, RankFacts, Evidence, Raised, Family]] = []
    for r in ranks:
        frames = r.exception_frames or ("",) * len(r.exceptions)
        for ev, where in zip(r.exceptions, frames, strict=False):
            raised = exception_of(ev.text)
            fam = classify(raised, where) if raised is not None else None
            if raised is None or fam is None:
                continue
            ts = ev.ts if ev.ts is not None else float("inf")
            found.append(
                (fam.confidence != "medium", ts, r.rank != prefer, ev.line, r, ev, raised, fam)
            )
    if not found:
        return None
    *_, r, ev, raised, fam = min(found, key=lambda f: f[:4])
    return Candidate(
        rank=r.rank,
        strength=1,
        ts=ev.ts,
        category=fam.category,
        signature=None,
        title=f"{raised.name}: {short(raised.msg)}",
        confidence=fam.confidence,
        reason=f"no signature names this failure; rank {r.rank} raised {raised.name}, "
        f"an error of {fam.why} ({fam.category}, by the exception's family)",
        evidence=[ev],
    )


_LATER_THAN_DIST = ("dist_init", "load_begin", "shards", "load_end", "warmup", "ready", "traffic")


def from_hang(ranks: Sequence[RankFacts]) -> Candidate | None:
    """No failure printed, and a rank began distributed init but never finished it: it hung
    waiting for its peers (a rendezvous that never completed), with low confidence."""
    stuck = [
        r
        for r in ranks
        if "dist_begin" in r.markers and not any(m in r.markers for m in _LATER_THAN_DIST)
    ]
    if not stuck:
        return None
    r = min(stuck, key=lambda x: (x.markers["dist_begin"].ts or float("inf"), x.rank))
    began = r.markers["dist_begin"]
    return Candidate(
        rank=r.rank,
        strength=0,
        ts=began.ts,
        category="rendezvous-network",
        signature=None,
        title="it began distributed init and never finished it",
        confidence="low",
        reason=f"no error was printed, but rank {r.rank} began distributed init "
        f"({short(began.text)}) and its log ends before init completed: a rendezvous that "
        "never completed (a peer missing, or unreachable on the chosen interface)",
        evidence=[began] + ([r.last_line] if r.last_line else []),
        brief=True,
    )


def nccl_only_up(ranks: Sequence[RankFacts]) -> bool:
    """An NCCL log (nccl-tests, a bare all-reduce): NCCL said its communicator is up, and no
    engine milestone came after to wait for. Success evidence when nothing failed."""
    ups = [r.markers.get("dist_init") for r in ranks]
    if not any(u is not None and "NCCL INFO" in u.text for u in ups):
        return False
    return not any(m in r.markers for r in ranks for m in _LATER_THAN_DIST[1:])


def from_laggard(run: RunFacts, ranks: Sequence[RankFacts]) -> Candidate | None:
    """No failure anywhere, yet no rank serves: the rank left behind while the others moved on.

    The boot was stopped (a ready timeout, an operator) while one rank was still loading and the
    rest had loaded: the straggler a barrier would have blamed.
    """
    if len(ranks) < 2:
        return None
    order = {r.rank: PHASES.index(r.phase) for r in ranks}
    ahead = max(order.values())
    if ahead < PHASES.index("loaded"):
        return None
    behind = [r for r in ranks if order[r.rank] < PHASES.index("loaded")]
    if not behind or len(behind) == len(ranks):
        return None
    verdict_rank = (run.supervisor_verdict or {}).get("rank")
    behind.sort(key=lambda r: (order[r.rank], r.rank != verdict_rank, r.rank))
    r = behind[0]
    others = [x.rank for x in ranks if order[x.rank] >= PHASES.index("loaded")]
    engine = run.engine or r.engine
    category = "load-barrier-timeout" if engine != "vllm" else "watchdog-timeout"
    where = f"last line: {short(r.last_line.text)}" if r.last_line else "it printed nothing"
    return Candidate(
        rank=r.rank,
        strength=0,
        ts=r.last_line.ts if r.last_line else None,
        category=category,
        signature=None,
        title=f"it was still {r.phase} when the boot stopped; ranks {rank_list(others)} had loaded",
        confidence="low",
        reason=f"no error was printed, but rank {r.rank} fell behind (reached {r.phase}; {where})",
        evidence=[r.last_line] if r.last_line else [],
        brief=True,
    )


def from_supervisor(
    verdict: Mapping[str, object], by_rank: Mapping[int, RankFacts]
) -> Candidate | None:
    """No evidence in the logs: fall back on the supervisor's own verdict, marked as such."""
    if not verdict:
        return None
    category = verdict.get("category")
    if not isinstance(category, str) or category not in CATEGORIES:
        category = OUTCOME_CATEGORY.get(str(verdict.get("outcome", "")).upper(), "unknown")
    if category in ("ready", "unknown"):
        return None
    rank = verdict.get("rank")
    if not isinstance(rank, int):
        return None
    summary = str(verdict.get("summary") or verdict.get("message") or verdict.get("outcome"))
    facts = by_rank.get(rank)
    return Candidate(
        rank=rank,
        strength=0,
        ts=None,
        category=category,
        signature=None,
        title=f"the supervisor's verdict: {summary}",
        confidence="low",
        reason=f"no log line explains it; the supervisor concluded: {short(summary, 200)}",
        evidence=[facts.last_line] if facts and facts.last_line else [],
    )


def cause_reason(r: RankFacts, hit: Hit, c: Compiled) -> str:
    if hit.via == "exit" and r.exit is not None:
        ex = r.exit
        state = "OOMKilled" if ex.oom_killed else f"exit code {ex.exit_code}"
        if ex.oom_killed and ex.exit_code is not None:
            state += f", exit code {ex.exit_code}"
        said = f"; last line: {short(r.last_line.text)}" if r.last_line else "; it printed nothing"
        return f"{c.sig.title} ({state}, in phase {r.phase}){said}"
    return f"{c.sig.title}: {short(hit.evidence.text)} ({hit.evidence.where})"


def straggler_reason(s: RankFacts, printers: set[int], fired: float | None) -> str:
    where = f"last line: {short(s.last_line.text)}" if s.last_line else "it printed nothing"
    return (
        f"it never finished loading (reached {s.phase}; {where}); ranks {rank_list(printers)} "
        f"finished and the post-load barrier expired at {clock(fired)}"
    )


def cascade_reason(
    r: RankFacts, own: Sequence[Hit], sigs: SignatureSet, root: Candidate | None
) -> str:
    after = f" after rank {root.rank} failed" if root is not None else ""
    barrier = [h for h in own if h.role == "barrier"]
    if barrier:
        waited = f" waiting for rank {root.rank}" if root is not None else ""
        return f"finished loading; the post-load barrier expired{waited}"
    echo = [h for h in own if h.role == "cascade"]
    if echo:
        return f"{sigs.by_id[echo[0].signature].sig.title}{after}"
    symptoms = [h for h in own if h.role == "symptom"]
    if symptoms:
        return f"{sigs.by_id[symptoms[0].signature].sig.title}{after}"
    if own:
        return f"{sigs.by_id[own[0].signature].sig.title}{after}"
    code = r.exit.exit_code if r.exit else None
    return f"exited with code {code}{after}"
