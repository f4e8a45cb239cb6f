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

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.dialects.base import PHASE_OF
from orchestrator.models.run import Outcome, RankPhase
from orchestrator.postmortem.exit_rules import earliest, exit_evidence
from orchestrator.postmortem.families import Family, Raised, classify, exception_of
from orchestrator.postmortem.measured import SAMPLE_EVERY_S, Mark, Measured
from orchestrator.postmortem.model import PHASES, Evidence, Hit, RankFacts, RunFacts
from orchestrator.postmortem.signatures import CATEGORIES, Compiled, SignatureSet
from orchestrator.wording import clock, rank_list, short


def outcome_category(outcome: object) -> str:
    """The category an outcome names: `Outcome.category` itself (a shorter copy of that table
    once named RENDEZVOUS_STALLED and SMOKE_FAILED runs "unknown" when the verdict was rebuilt
    from its event)."""
    try:
        return Outcome(str(outcome).upper()).category
    except ValueError:
        return "unknown"


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
    printed: bool = True  # it rests on what ranks printed (not the supervisor's own verdict)
    final: bool = False  # "unknown" on purpose: the exception-family fallback must not replace it

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
        if not strong and raised_before(r, first.evidence):
            # a weak cause (a bare `Killed`, exit -9) after the rank raised an exception is
            # the end of that failure, not its cause: the exception is read instead
            continue
        oom = [h for h in own if h.via == "exit" and h.category == "out-of-memory"]
        if oom and r.exit is not None and r.exit.oom_killed:
            first = oom[0]
        follower = first
        first = brought_about_by(hits[r.rank], first, sigs) or first
        c = sigs.by_id[first.signature]
        confidence = "high" if first.via == "log" or (r.exit and r.exit.oom_killed) else "medium"
        engine = engine_of(r, hits[r.rank], sigs) or boot_engine
        cand = Candidate(
            rank=r.rank,
            strength=2 if c.sig.waits or c.sig.weak else 3,
            ts=earliest(h.evidence.ts for h in (strong or own) + [first]),
            category=c.sig.engine_category.get(engine or "", c.sig.category),
            signature=c.id,
            title=c.sig.title,
            confidence=confidence,
            reason=cause_reason(r, first, c)
            + (
                ""
                if follower is first
                else f"; {sigs.by_id[follower.signature].sig.title} after it "
                f"({follower.evidence.where}) is its consequence"
            ),
            evidence=[
                first.evidence,
                *[h.evidence for h in own if h.signature == first.signature and h is not first][:2],
                *[h.evidence for h in own if h.signature != first.signature][:2],
            ],
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
    mine = next(r for r in ranks if r.rank == first_rank)
    own = _own_error_before(mine, first_hit, hits)
    if own is not None:
        # No rank fell silent, and the first to report a lost peer raised an error of its own
        # before it: the peer left because of that failure (a compiler that crashed on one
        # rank, then the barrier's gloo connection closed; the thirty-sixth set). The error
        # decides, by its family if it has one; else the cause is unknown (not the lost peer,
        # and not a later exception either).
        line, raised, where = own
        fam = classify(raised, where)
        return Candidate(
            rank=first_rank,
            strength=0,
            ts=line.ts,
            category=fam.category if fam is not None else "unknown",
            signature=None,
            title=f"{raised.name}: {short(raised.msg)}",
            confidence=fam.confidence if fam is not None else "low",
            reason=f"rank {first_rank} raised {raised.name} before it reported a lost peer "
            f"({c.sig.title}): the peer loss followed its own failure"
            + (f", an error of {fam.why} (by the exception's family)" if fam is not None else ""),
            evidence=[line, first_hit.evidence],
            final=True,
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


def _own_error_before(
    r: RankFacts, echo: Hit, hits: Mapping[int, list[Hit]]
) -> tuple[Evidence, Raised, str] | None:
    """The first error the rank stated (`Cls: message`) before its echo line, that no signature
    matched, with its traceback's frames: not a `raise` line or a traceback's head (those
    belong to the echo's own trace)."""
    matched = {h.evidence.line for h in hits.get(r.rank, [])}
    frames = r.exception_frames or ("",) * len(r.exceptions)
    for e, where in zip(r.exceptions, frames, strict=False):
        if e.line == echo.evidence.line or e.line in matched or not _earlier(e, echo.evidence):
            continue
        raised = exception_of(e.text)
        if raised is None or raised.name in ("Traceback", "what()") or "raise " in e.text:
            continue
        return e, raised, where
    return None


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


def brought_about_by(own: Sequence[Hit], first: Hit, sigs: SignatureSet) -> Hit | None:
    """The earlier line of a failure that `first`'s signature follows from (its `follows`), on
    the same rank and in the same file: a task hung after the GPU driver's Xid is the GPU's.
    `own` is the rank's hits as blame weighs them (notices already left out)."""
    follows = sigs.by_id[first.signature].sig.follows
    ev = first.evidence
    return next(
        (
            h
            for h in own
            if h.category in follows and h.evidence.file == ev.file and h.evidence.line < ev.line
        ),
        None,
    )


def raised_before(r: RankFacts, ev: Evidence) -> bool:
    """The rank printed an exception line (`Cls: message`) before `ev`, in the same file. A
    traceback's header alone is not one: when `ev` is itself the exception that ends a traceback
    ("OSError: [WinError -1073741795] Windows Error 0xc000001d"), the header is its own; when a
    bare `Killed` cuts a traceback before its last line (the thirty-eighth set: a vLLM worker's
    "Traceback (most recent call last):" then `Killed`), no failure was stated before the kill."""
    return any(
        e.file == ev.file and _earlier(e, ev) and "Traceback (most recent call last)" not in e.text
        for e in r.exceptions
    )


def _earlier(a: Evidence, b: Evidence) -> bool:
    """`a` was printed before `b` in their file: by their stamps where both carry different
    ones (a cloud logger's export lists the newest line first: the thirty-third set's
    `Killed` above the KeyError it followed), else by their place in the file."""
    if a.ts is not None and b.ts is not None and a.ts != b.ts:
        return a.ts < b.ts
    return a.line < b.line


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
        category = outcome_category(verdict.get("outcome", ""))
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
        printed=False,
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


# -- what the supervisor measured ------------------------------------------------------------------

LATE_START_S = 5.0
"""A rank that started this much after the others' median start started late (the launch waves
of a healthy boot start the head ~1-2 s before the rest)."""
_SLOW_RATE = 0.5  # a rank reading at under half the others' median rate read slowly
# A deadline that ran out while the others were still loading too singles a rank out only when
# the others had read most of theirs and it had read under half as much: it was far behind,
# not merely caught by a deadline too short for everyone.
_MOSTLY_READ = 0.5
_LOAD_WATCHERS = ("barrier", "vllm-ready", "stall", "page-cache")
_TIMEOUT_CATEGORIES = ("watchdog-timeout", "rendezvous-network", "load-barrier-timeout", "unknown")


def _mb(n: float) -> str:
    return f"{n / 1e6:.0f} MB" if n >= 1e7 else f"{n / 1e6:.1f} MB"


def _failed_at(r: RankFacts, own: Sequence[Hit]) -> float | None:
    """When a rank's failure showed: its first failure line or exit state, else its exit."""
    first = earliest(h.evidence.ts for h in own)
    if first is None and r.exit is not None and r.exit.exited:
        first = r.exit.finished_at
    return first


def _mark(m: Mark, rank: int) -> Evidence:
    return Evidence(file=m.file, line=m.line, text=m.text, ts=m.ts, rank=rank)


def _reading(measured: Measured, rank: int, ts: float) -> Evidence | None:
    m = measured.of(rank)
    reading = m.reading_at(ts) if m is not None else None
    if m is None or reading is None:
        return None
    share = f" of {_mb(measured.expected_bytes)}" if measured.expected_bytes else ""
    return Evidence(
        file=m.samples_file,
        line=reading.line,
        text=f"sample: rank {rank}'s processes had read {_mb(reading.bytes_read)}{share}",
        ts=reading.ts,
        rank=rank,
    )


def from_measured(
    measured: Measured | None,
    ranks: Sequence[RankFacts],
    hits: Mapping[int, list[Hit]],
    failed: set[int],
    verdict: Mapping[str, object] | None = None,
) -> Candidate | None:
    """The rank the supervisor's measurements put first: a node that went silent before the
    others failed, a rank that started late, or a rank still reading its weights when the others
    (having loaded) failed waiting. None when the measurements single out no rank."""
    if measured is None or len(ranks) < 2:
        return None
    fail_at = {r.rank: _failed_at(r, hits[r.rank]) for r in ranks if r.rank in failed}

    def others_failed(k: int) -> tuple[list[int], float | None]:
        who = sorted(x for x in fail_at if x != k)
        return who, earliest(fail_at[x] for x in who)

    # A node that went silent: the supervisor lost it, or its samples stopped while the others'
    # went on. Before the others failed (or with nobody else failing: the boot ended on it).
    last_seen = {m.rank: m.last_sample.ts for m in measured.ranks if m.last_sample is not None}
    newest = max(last_seen.values(), default=None)
    silent: list[tuple[float, int, Evidence]] = []
    for lm in measured.ranks:
        seen = last_seen.get(lm.rank)
        if lm.lost is not None:
            since = min(lm.lost.ts, seen + SAMPLE_EVERY_S) if seen is not None else lm.lost.ts
            silent.append((since, lm.rank, _mark(lm.lost, lm.rank)))
        elif seen is not None and newest is not None and newest - seen > 3 * SAMPLE_EVERY_S:
            gone = lm.last_sample
            assert gone is not None
            text = (
                f"sample: rank {lm.rank}'s node answered its last sample; the others' were "
                f"sampled for {newest - seen:.0f} s more"
            )
            ev = Evidence(file=lm.samples_file, line=gone.line, text=text, ts=seen, rank=lm.rank)
            silent.append((seen + SAMPLE_EVERY_S, lm.rank, ev))
    for since, k, ev in sorted(silent):
        who, began = others_failed(k)
        if began is not None and since > began + SAMPLE_EVERY_S:
            continue  # it went silent after the others had failed: part of the cascade
        seen = last_seen.get(k)
        said = f"its last sample was at {clock(seen)}" if seen is not None else "it never answered"
        waited = (
            f"; ranks {rank_list(who)} failed after it, from {clock(began)}"
            if began is not None
            else "; the boot ended on it"
        )
        return Candidate(
            rank=k,
            strength=3,
            ts=since,
            category="rendezvous-network",
            signature=None,
            title=f"its node went silent at {clock(since)} ({said}; network: the link or the "
            f"node itself){waited}",
            confidence="medium",
            reason=f"the supervisor lost rank {k}'s node ({short(ev.text, 200)}){waited}",
            evidence=[ev],
            brief=True,
            printed=False,
        )

    # Still loading when the others failed: by its log's milestones and its samples.
    def loaded_by(r: RankFacts, ts: float) -> bool:
        end = r.markers.get("load_end")
        if end is not None:
            return end.ts is None or end.ts <= ts
        return PHASES.index(r.phase) >= PHASES.index("loaded") and r.rank in fail_at

    # Nobody failed, yet the supervisor ended the boot on its deadline: the ranks still loading
    # then are judged at that moment. A late start says it first (it spent the others' time).
    # (Seen on a busy CI host: a vLLM head reading at 2 MB/s ran out timeouts.ready before its
    # peers' NCCL watchdogs fired, and the logs alone could only say "still loading".)
    deadline = None if failed else _deadline(measured, verdict)
    if deadline is not None and (spent := _late_without_failure(measured, ranks, failed, verdict)):
        return spent

    behind: list[tuple[int, float, int, RankFacts, float, list[int]]] = []
    for r in ranks:
        who, began = others_failed(r.rank)
        if began is None and deadline is not None:
            began = deadline[0]
        if began is None or (r.rank in fail_at and (fail_at[r.rank] or began) < began):
            continue  # nobody else failed, or it failed before them (its own words say why)
        if loaded_by(r, began):
            continue
        m = measured.of(r.rank)
        warned = [
            w for w in (m.warnings if m else ()) if w.watcher in _LOAD_WATCHERS and w.ts <= began
        ]
        others = [x for x in ranks if x.rank != r.rank]
        ahead = [x for x in others if loaded_by(x, began)]
        late = measured.late_start(r.rank)
        fraction = measured.fraction_at(r.rank, began)
        if late is not None and late >= LATE_START_S:
            pass  # it started late: behind from the start
        elif warned:
            pass  # the supervisor projected it would be late, before the others failed
        elif fraction is None or fraction >= 1.0:
            continue  # no measurement of its own puts it behind (the logs alone decide)
        elif 2 * len(ahead) < len(others) and not _far_behind(measured, r.rank, began, others):
            continue  # the others had not moved on either
        behind.append(
            (0 if warned else 1, fraction if fraction is not None else 2.0, r.rank, r, began, who)
        )
    if not behind:
        return _late_without_failure(measured, ranks, failed, verdict)
    _, _, k, r, began, who = min(behind, key=lambda b: b[:3])
    m = measured.of(k)
    evidence: list[Evidence] = []
    fraction = measured.fraction_at(k, began)
    where = _reading(measured, k, began)
    if fraction is not None and where is not None:
        at = f"at {fraction:.0%} of its weights"
        evidence.append(where)
    else:
        at = f"still {r.phase}"
    rate = m.rate_before(began) if m is not None else None
    rates = [
        x
        for o in measured.ranks
        if o.rank != k and (x := o.rate_before(began, window_s=600.0)) is not None and x > 0
    ]
    typical = statistics.median(rates) if rates else None
    slow = rate is not None and typical is not None and rate < _SLOW_RATE * typical
    late = measured.late_start(k)
    warned = [w for w in (m.warnings if m else ()) if w.watcher in _LOAD_WATCHERS and w.ts <= began]
    evidence.extend(_mark(w, k) for w in warned[:1])
    others = [x for x in ranks if x.rank != k]
    if 2 * sum(loaded_by(x, began) for x in others) >= len(others):
        moved_on = "with the others loaded"
    else:  # a deadline caught them all loading: say how far the others had come
        read = _others_read(measured, k, began, others)
        moved_on = f"while the others had read {read:.0%} of theirs (median)"
    waited = (
        f"when ranks {rank_list(who)} failed waiting, from {clock(began)}"
        if who
        else f"when the boot's deadline ran out ({deadline[1] if deadline else 'a deadline'}, "
        f"{clock(began)}) {moved_on}"
    )
    if late is not None and late >= LATE_START_S and m is not None and m.started is not None:
        evidence.insert(0, _mark(m.started, k))
        loading = any("load_begin" in x.markers for x in ranks if x.rank != k)
        title = (
            f"it started {late:.0f} s after the others ({clock(m.started.ts)}) and was {at} "
            f"{waited}"
        )
        category = "load-barrier-timeout" if loading else "rendezvous-network"
    else:
        if slow and rate is not None and typical is not None:
            why = (
                f"slow reads, {_mb(rate)}/s against the others' {_mb(typical)}/s: its node's "
                "disk or page cache"
            )
        elif rate is not None and rate <= 0:
            why = "its reads had stopped: its node's disk or mount"
        else:
            why = "its weights loaded too slowly: its node's disk or page cache"
        title = f"it was {at} {waited} ({why})"
        category = "load-barrier-timeout"
    projected = (
        f"; the supervisor had warned at {clock(warned[0].ts)}: {short(warned[0].text, 160)}"
        if warned
        else ""
    )
    return Candidate(
        rank=k,
        strength=2,
        ts=began,
        category=category,
        signature=None,
        title=title,
        confidence="medium",
        reason=f"rank {k} was {at} {waited}{projected}",
        evidence=evidence + ([r.last_line] if r.last_line else []),
        brief=True,
        printed=False,
    )


def _others_read(measured: Measured, k: int, ts: float, others: Sequence[RankFacts]) -> float:
    """The median share the ranks other than `k` had read by `ts`, by their samples (0 when
    none was sampled)."""
    shares = [f for x in others if (f := measured.fraction_at(x.rank, ts)) is not None]
    return statistics.median(shares) if shares else 0.0


def _far_behind(measured: Measured, k: int, ts: float, others: Sequence[RankFacts]) -> bool:
    """Rank `k` had read under half the share the others had (their median) by `ts`, and
    they had read most of theirs. (Seen in CI on a busy host: the ready deadline ran out while
    the others were at the end of their reads, before any printed its load end, and a vLLM
    rank reading at 2 MB/s was at a tenth of its weights.)"""
    mine = measured.fraction_at(k, ts)
    theirs = _others_read(measured, k, ts, others)
    return mine is not None and theirs >= _MOSTLY_READ and mine <= theirs / 2


_NOT_A_DEADLINE = ("READY", "SMOKE_FAILED", "INTERRUPTED", "STOPPED")
_DEADLINES = ("READY_TIMEOUT", "BARRIER_TIMEOUT", "RENDEZVOUS_STALLED", "STALLED")
_SERVING = frozenset(m.value for m, phase in PHASE_OF.items() if phase is RankPhase.serving)


def served_after_the_end(
    measured: Measured | None, ranks: Sequence[RankFacts], verdict: Mapping[str, object] | None
) -> str | None:
    """A boot the supervisor ended on a deadline (READY_TIMEOUT) whose ranks reached serving
    only afterwards, while their logs were being saved, was not ready: the note saying so,
    else None. (Seen on the netns testbed: a vLLM rank started 15 s late spent the ready
    deadline, and the head came up 4 s after it expired; the logs alone called it `ready`.)"""
    outcome = str((verdict or {}).get("outcome") or "").upper()
    if measured is None or measured.decided is None or not outcome or outcome in _NOT_A_DEADLINE:
        return None
    serving = [ev for r in ranks for name, ev in r.markers.items() if name in _SERVING]
    if not serving or any(ev.ts is None for ev in serving):
        return None  # no line to time: the logs' answer stands
    first = min(serving, key=lambda ev: ev.ts or 0.0)
    ended = measured.decided.ts
    if first.ts is None or first.ts <= ended:
        return None
    return (
        f"rank {first.rank} reached serving at {clock(first.ts)} ({first.file}:{first.line}), "
        f"{first.ts - ended:.0f} s after the supervisor ended the boot with {outcome} at "
        f"{clock(ended)} ({measured.decided.file}:{measured.decided.line}): too late for the "
        "boot, which is not counted as ready"
    )


def _deadline(measured: Measured, verdict: Mapping[str, object] | None) -> tuple[float, str] | None:
    """When and with which outcome the supervisor ended the boot on a deadline (a ready or
    rendezvous timeout), else None (no verdict, or one that is not a deadline)."""
    outcome = str((verdict or {}).get("outcome") or "").upper()
    if measured.decided is None or measured.decided.ts is None or outcome not in _DEADLINES:
        return None
    return measured.decided.ts, outcome


def _late_without_failure(
    measured: Measured,
    ranks: Sequence[RankFacts],
    failed: set[int],
    verdict: Mapping[str, object] | None,
) -> Candidate | None:
    """No rank failed, yet the boot ended on a deadline (the supervisor's ready or rendezvous
    timeout) after some rank started late: the others waited for it (torch's init holds every
    rank until the last joins), so the late start spent the boot's time."""
    outcome = str((verdict or {}).get("outcome") or "").upper()
    if failed or not outcome or outcome in ("READY", "SMOKE_FAILED", "INTERRUPTED", "STOPPED"):
        return None
    late = sorted(
        (m.started.ts, m.rank, d)
        for m in measured.ranks
        if m.started is not None and (d := measured.late_start(m.rank)) is not None
        if d >= LATE_START_S
    )
    if not late:
        return None
    ts, k, delay = late[0]
    m = measured.of(k)
    assert m is not None and m.started is not None
    group = [x for _, x, _ in late]
    also = f" (ranks {rank_list(group)} all started late; rank {k} first)" if len(group) > 1 else ""
    r = next((x for x in ranks if x.rank == k), None)
    return Candidate(
        rank=k,
        strength=2,
        ts=ts,
        category="watchdog-timeout" if outcome == "READY_TIMEOUT" else "rendezvous-network",
        signature=None,
        title=f"it started {delay:.0f} s after the others ({clock(ts)}){also}; they waited for "
        f"it to join, and the boot's deadline ran out ({outcome})",
        confidence="medium",
        reason=f"no rank failed; rank {k} started {delay:.0f} s after the others' median start "
        f"and the supervisor ended the boot with {outcome}",
        evidence=[_mark(m.started, k)] + ([r.last_line] if r is not None and r.last_line else []),
        brief=True,
        printed=False,
    )


def weigh_measured(
    root: Candidate | None, measured: Candidate | None, ranks: Sequence[RankFacts]
) -> Candidate | None:
    """The logs' answer weighed against the measurements'. Agreement makes it high confidence;
    a cause the rank printed itself (not a timeout) keeps the blame when they disagree; else the
    measurements win, and the reason says what the logs alone would have blamed."""
    if measured is None:
        return root
    if root is None:
        return measured
    if root.rank == measured.rank and not root.printed:
        # the supervisor's verdict and its measurements are one witness, not two
        measured.reason += f"; the supervisor's verdict names it too ({short(root.title, 160)})"
        return measured
    if root.rank == measured.rank:
        root.confidence = "high"
        if root.strength < 3 or root.category in _TIMEOUT_CATEGORIES:
            root.category = measured.category if root.strength < 2 else root.category
            root.title = measured.title
            root.brief = True
        root.reason = f"{root.reason}; measured: {measured.reason}"
        root.evidence.extend(e for e in measured.evidence if e not in root.evidence)
        return root
    if root.strength == 3 and root.category not in _TIMEOUT_CATEGORIES:
        # A cause the rank printed itself. A rank still loading when it struck is a bystander;
        # a node that went silent before it is a rival cause: both are said, trusted less.
        rival = measured.strength == 3 and (measured.ts or 0.0) < (root.ts or float("inf"))
        if rival:
            root.confidence = "medium" if root.confidence == "high" else "low"
            root.reason = (
                f"{root.reason}; the supervisor's measurements point at rank {measured.rank} "
                f"instead ({measured.reason})"
            )
        else:
            root.reason = f"{root.reason}; the supervisor also measured: {measured.reason}"
        return root
    # The logs agree in substance when they show the rank behind too (no `Load weight end`
    # while the others printed theirs), or silent.
    facts = next((r for r in ranks if r.rank == measured.rank), None)
    others = [r for r in ranks if r.rank != measured.rank]
    behind_in_logs = (
        facts is not None
        and "load_end" not in facts.markers
        and sum("load_end" in r.markers for r in others) * 2 >= len(others)
    )
    measured.confidence = "high" if behind_in_logs else "medium"
    printed = f"rank {root.rank} ({root.title})"
    measured.reason = (
        f"{measured.reason}; by the logs alone {printed} would be blamed: it printed first, "
        "as a consequence"
    )
    return measured
