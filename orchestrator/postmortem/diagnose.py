"""From facts to the answer: which rank failed first, why, who merely followed, what to change.

Pure: `diagnose(run, ranks, signatures)` reads nothing and returns a `Diagnosis`.

Blame runs on evidence strength before time, because clocks and print order lie in a cascade:

3  a cause on the rank itself: a signature with role `cause` in its lines, or an exit state a
   signature names (OOMKilled; exit 137 before anyone else failed; exit 127 a second after
   start with nothing printed). Earliest wins among these.
2  the straggler of SGLang's post-load barrier: the barrier ValueError is printed by the ranks
   that FINISHED loading, so the blamed rank is the one that never printed `Load weight end`.
1  a rank that failed with only symptoms (a traceback's first line, "see root cause above") or
   only a bad exit code.
0  nothing but consequences (NCCL watchdogs, lost peers): the rank that fell silent first, or
   else the first to complain.

Every other failed rank is a cascade (or failed the same way on its own: `also_on`). A boot with
no failure evidence that reached serving is `ready`; one that simply stopped is `unknown`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from orchestrator.postmortem.model import (
    PHASES,
    Diagnosis,
    Evidence,
    ExitInfo,
    Hit,
    RankFacts,
    RankReport,
    RecipeChange,
    RootCause,
    RunFacts,
    SignatureReport,
    TimelineEntry,
)
from orchestrator.postmortem.signatures import CATEGORIES, Compiled, ExitRule, SignatureSet

SKEW_S = 1.0  # clocks of different nodes disagree by this much and it means nothing
TOGETHER_S = 2.0  # exits this close together are one event (a stop), not a first death
STOP_CODES = frozenset({137, 143})  # SIGKILL / SIGTERM: what `docker stop` leaves
MAX_TIMELINE = 200
EVIDENCE_PER_SIGNATURE = 8

_OUTCOME_CATEGORY = {
    "BARRIER_TIMEOUT": "load-barrier-timeout",
    "IMAGE_FAILED": "image-unpack-race",
    "NODE_LOST": "rendezvous-network",
    "READY": "ready",
}


@dataclass
class _Candidate:
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


# -- small helpers --------------------------------------------------------------------------------


def rank_list(ranks: Iterable[int]) -> str:
    """0, 1, 2, 4 -> '0-2, 4'."""
    values = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        parts.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ", ".join(parts)


def _clock(ts: float | None) -> str:
    if ts is None:
        return "an unknown time"
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S UTC")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _failed_exit(facts: RankFacts) -> bool:
    """A non-zero exit that is not simply the stop of a rank that was serving."""
    ex = facts.exit
    if ex is None:
        return False
    if ex.oom_killed:
        return True
    if ex.exit_code in (None, 0):
        return ex.status == "dead" or (ex.status == "created" and bool(ex.error))
    return not (facts.phase == "serving" and ex.exit_code in STOP_CODES)


def _earliest(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


# -- exit rules ------------------------------------------------------------------------------------


def _exit_evidence(facts: RankFacts) -> Evidence:
    ex = facts.exit or ExitInfo()
    file, _, line = ex.source.rpartition(":")
    parts = [f"status={ex.status}" if ex.status else "", f"exit_code={ex.exit_code}"]
    if ex.oom_killed is not None:
        parts.append(f"oom_killed={'true' if ex.oom_killed else 'false'}")
    if ex.started_at is not None and ex.finished_at is not None:
        parts.append(f"ran {ex.finished_at - ex.started_at:.1f} s")
    if ex.error:
        parts.append(f"error={_short(ex.error, 200)}")
    return Evidence(
        file=file or "exit.json",
        line=int(line) if line.isdigit() else 1,
        text=" ".join(p for p in parts if p),
        ts=ex.finished_at,
        rank=facts.rank,
    )


def _rule_holds(
    rule: ExitRule,
    facts: RankFacts,
    others: Sequence[RankFacts],
    log_fail: Mapping[int, float | None],
    interrupted: bool,
) -> bool:
    ex = facts.exit
    if ex is None:
        return False
    if rule.oom_killed is not None and ex.oom_killed is not rule.oom_killed:
        return False
    # Code, timing and silence rules never blame a rank that served, or a stopped boot.
    if rule.oom_killed is None and (facts.phase == "serving" or interrupted):
        return False
    if rule.codes and ex.exit_code not in rule.codes:
        return False
    if rule.silent and facts.lines > 0:
        return False
    if rule.within_s is not None:
        started = ex.started_at if ex.started_at is not None else None
        if started is None and facts.first_line is not None:
            started = facts.first_line.ts
        if started is None or ex.finished_at is None:
            return False
        if ex.finished_at - started > rule.within_s:
            return False
    if rule.first:
        f = ex.finished_at
        if f is None:
            return False
        for o in others:
            seen = log_fail.get(o.rank)
            if seen is not None and seen < f - SKEW_S:
                return False
            ox = o.exit
            if (
                ox is not None
                and ox.finished_at is not None
                and _failed_exit(o)
                and ox.finished_at < f + TOGETHER_S
            ):
                return False
    return True


def _exit_hits(
    facts: RankFacts,
    ranks: Sequence[RankFacts],
    sigs: SignatureSet,
    log_fail: Mapping[int, float | None],
    interrupted: bool,
) -> list[Hit]:
    if facts.exit is None:
        return []
    others = [o for o in ranks if o.rank != facts.rank]
    hits: list[Hit] = []
    for c in sigs:
        if any(_rule_holds(r, facts, others, log_fail, interrupted) for r in c.sig.exit):
            hits.append(
                Hit(
                    signature=c.id,
                    category=c.sig.category,
                    role=c.sig.role,
                    evidence=_exit_evidence(facts),
                    via="exit",
                )
            )
    return hits


# -- the diagnosis ---------------------------------------------------------------------------------


def _before_stop(facts: RankFacts, stopped_at: float) -> tuple[RankFacts, int]:
    """A rank as it was when `cluster stop` began, and how many hits came after.

    Stopping ranks one after another makes the others print what a lost peer makes them
    print (NCCL and Gloo errors, SGLang's sigquit): those lines are the stop's doing, not a
    failure. They stay in the logs and are counted in the notes; they are not weighed. An exit
    the stop caused (or a state saved while the rank still ran) reads `stopped`."""
    kept = tuple(h for h in facts.hits if h.evidence.ts is None or h.evidence.ts < stopped_at)
    ex = facts.exit
    if ex is not None and not ex.oom_killed:
        by_stop = ex.status == "running" or (
            ex.finished_at is not None and ex.finished_at >= stopped_at
        )
        if by_stop:
            ex = ex.model_copy(update={"status": "stopped", "exit_code": None})
    return facts.model_copy(update={"hits": kept, "exit": ex}), len(facts.hits) - len(kept)


def diagnose(run: RunFacts, ranks: Sequence[RankFacts], sigs: SignatureSet) -> Diagnosis:
    ranks = sorted(ranks, key=lambda r: r.rank)
    set_aside = 0
    if run.stopped_at is not None:
        trimmed = [_before_stop(r, run.stopped_at) for r in ranks]
        ranks = [r for r, _ in trimmed]
        set_aside = sum(n for _, n in trimmed)
    by_rank = {r.rank: r for r in ranks}
    verdict = run.supervisor_verdict or {}
    interrupted = str(verdict.get("outcome", "")).upper() == "INTERRUPTED"

    # Failure evidence in the words of each rank, and when it started.
    log_fail: dict[int, float | None] = {
        r.rank: _earliest(h.evidence.ts for h in r.hits) for r in ranks
    }
    hits: dict[int, list[Hit]] = {}
    for r in ranks:
        found = list(r.hits) + _exit_hits(r, ranks, sigs, log_fail, interrupted)
        found.sort(
            key=lambda h: (
                h.evidence.ts is None,
                h.evidence.ts or 0.0,
                h.via != "log",  # at the same time, the words before the exit state
                h.evidence.line,
            )
        )
        hits[r.rank] = found
    failed = {r.rank for r in ranks if hits[r.rank] or _failed_exit(r)}

    candidates = _candidates(ranks, hits, sigs, failed)
    root = min(candidates, key=lambda c: c.key()) if candidates else None
    if root is None and failed:
        root = _from_consequences(ranks, hits, sigs, failed)
    ready = not failed and (
        any(r.phase == "serving" for r in ranks) or str(verdict.get("outcome")) == "READY"
    )
    notes = list(run.notes)
    if run.stopped_at is not None:
        notes.append(
            f"`cluster stop` began at {_clock(run.stopped_at)}"
            + (
                f"; {_plural(set_aside, 'failure line')} printed after it (ranks losing their "
                "peers as they were stopped) were set aside"
                if set_aside
                else ""
            )
        )
    if root is None and not ready:
        root = _from_laggard(run, ranks) or _from_supervisor(verdict, by_rank)
        if root is None and ranks:
            furthest = max((r.phase for r in ranks), key=PHASES.index)
            notes.append(
                f"no failure signature matched and no rank reached serving (furthest: {furthest}); "
                "the boot may have been stopped, or failed in a way no signature knows yet"
            )

    if root is not None:
        said = [w for w in run.warnings if w.rank == root.rank]
        root.evidence.extend(w for w in said[:2] if w not in root.evidence)

    # Roles.
    roles: dict[int, str] = {}
    reasons: dict[int, str] = {}
    also_on: list[int] = []
    if root is not None:
        roles[root.rank] = "root-cause"
        reasons[root.rank] = root.reason
        for c in candidates:
            if c.rank == root.rank or c.rank in roles:
                continue
            if c.strength >= 2 and c.signature == root.signature:
                roles[c.rank] = "same-cause"
                reasons[c.rank] = f"failed the same way: {c.title}"
                also_on.append(c.rank)
            elif c.strength == 3:
                roles[c.rank] = "other-cause"
                reasons[c.rank] = f"failed on its own too: {c.title}"
    for r in ranks:
        if r.rank in roles:
            continue
        if r.rank in failed:
            roles[r.rank] = "cascade"
            reasons[r.rank] = _cascade_reason(r, hits[r.rank], sigs, root)
        elif r.lines == 0 and r.exit is None:
            roles[r.rank] = "unknown"
            reasons[r.rank] = "no log and no exit state"
        else:
            roles[r.rank] = "ok"
            reasons[r.rank] = f"no failure; reached {r.phase}"
    cascade = tuple(r.rank for r in ranks if roles[r.rank] == "cascade")

    if ready:
        category = "ready"
    elif root is not None:
        category = root.category
    else:
        category = "unknown"
    root_model = (
        RootCause(
            rank=root.rank,
            category=root.category,
            signature=root.signature,
            title=root.title,
            confidence=root.confidence,
            reason=root.reason,
            evidence=tuple(root.evidence[:6]),
            also_on=tuple(sorted(also_on)),
        )
        if root is not None
        else None
    )
    all_hits = [h for r in ranks for h in hits[r.rank]]
    first_error = min(
        (h.evidence for h in all_hits if h.via == "log"),
        key=lambda e: (e.ts is None, e.ts or 0.0, e.rank or 0, e.line),
        default=None,
    )
    changes = _changes(root, run, sigs)
    rank_reports = tuple(
        RankReport(
            rank=r.rank,
            node=r.node,
            role=roles[r.rank],
            last_phase=r.phase,
            exit_code=r.exit.exit_code if r.exit else None,
            oom_killed=r.exit.oom_killed if r.exit else None,
            status=r.exit.status if r.exit else None,
            signatures=tuple(dict.fromkeys(h.signature for h in hits[r.rank])),
            reason=reasons[r.rank],
            last_line=r.last_line,
        )
        for r in ranks
    )
    diagnosis = Diagnosis(
        source=run.model_copy(update={"notes": tuple(notes)}),
        category=category,
        verdict="",
        first_failing_rank=root.rank if root is not None else None,
        root_cause=root_model,
        first_error=first_error,
        cascade_ranks=cascade,
        ranks=rank_reports,
        signatures=_signature_reports(ranks, hits, sigs),
        recipe_changes=changes,
        timeline=_timeline(ranks, hits, stopped_at=run.stopped_at),
        notes=tuple(notes),
    )
    return diagnosis.model_copy(update={"verdict": _verdict(diagnosis, root, ranks, sigs, roles)})


def _candidates(
    ranks: Sequence[RankFacts],
    hits: Mapping[int, list[Hit]],
    sigs: SignatureSet,
    failed: set[int],
) -> list[_Candidate]:
    out: list[_Candidate] = []
    causes: dict[int, _Candidate] = {}
    for r in ranks:
        own = [h for h in hits[r.rank] if h.role == "cause"]
        if not own:
            continue
        # the first cause; an OOM kill outranks whatever the dying process printed after it
        first = own[0]
        oom = [h for h in own if h.via == "exit" and h.category == "out-of-memory"]
        if oom and r.exit is not None and r.exit.oom_killed:
            first = oom[0]
        c = sigs.by_id[first.signature]
        confidence = "high" if first.via == "log" or (r.exit and r.exit.oom_killed) else "medium"
        cand = _Candidate(
            rank=r.rank,
            strength=2 if c.sig.waits else 3,
            ts=_earliest(h.evidence.ts for h in own),
            category=c.sig.category,
            signature=c.id,
            title=c.sig.title,
            confidence=confidence,
            reason=_cause_reason(r, first, c),
            evidence=[h.evidence for h in own if h.signature == first.signature][:3]
            + [h.evidence for h in own if h.signature != first.signature][:2],
        )
        causes[r.rank] = cand
        out.append(cand)

    # The post-load barrier: it blames the ranks that did not finish loading.
    barrier = [(r.rank, h) for r in ranks for h in hits[r.rank] if h.role == "barrier"]
    if barrier:
        printers = {k for k, _ in barrier}
        c = sigs.by_id[barrier[0][1].signature]
        fired = _earliest(h.evidence.ts for _, h in barrier)
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
                _Candidate(
                    rank=s.rank,
                    strength=2,
                    ts=fired,
                    category=c.sig.category,
                    signature=c.id,
                    title="it was still loading when SGLang's post-load barrier expired",
                    confidence="medium",
                    reason=_straggler_reason(s, printers, fired),
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
                _Candidate(
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
                _Candidate(
                    rank=r.rank,
                    strength=1,
                    ts=r.exit.finished_at,
                    category="unknown",
                    signature=None,
                    title=f"exited with code {r.exit.exit_code}",
                    confidence="low",
                    reason=f"exited with code {r.exit.exit_code} without a recognised error "
                    f"(last line: {_short(r.last_line.text) if r.last_line else 'none'})",
                    evidence=[_exit_evidence(r)] + ([r.last_line] if r.last_line else []),
                )
            )
    return out


def _from_consequences(
    ranks: Sequence[RankFacts],
    hits: Mapping[int, list[Hit]],
    sigs: SignatureSet,
    failed: set[int],
) -> _Candidate | None:
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
            f"its last line was at {_clock(r.last_line.ts)}"
            if r.last_line
            else "it printed nothing"
        )
        return _Candidate(
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
    return _Candidate(
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


def _from_laggard(run: RunFacts, ranks: Sequence[RankFacts]) -> _Candidate | None:
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
    where = f"last line: {_short(r.last_line.text)}" if r.last_line else "it printed nothing"
    return _Candidate(
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


def _from_supervisor(
    verdict: Mapping[str, object], by_rank: Mapping[int, RankFacts]
) -> _Candidate | None:
    """No evidence in the logs: fall back on the supervisor's own verdict, marked as such."""
    if not verdict:
        return None
    category = verdict.get("category")
    if not isinstance(category, str) or category not in CATEGORIES:
        category = _OUTCOME_CATEGORY.get(str(verdict.get("outcome", "")).upper(), "unknown")
    if category in ("ready", "unknown"):
        return None
    rank = verdict.get("rank")
    if not isinstance(rank, int):
        return None
    summary = str(verdict.get("summary") or verdict.get("message") or verdict.get("outcome"))
    facts = by_rank.get(rank)
    return _Candidate(
        rank=rank,
        strength=0,
        ts=None,
        category=category,
        signature=None,
        title=f"the supervisor's verdict: {summary}",
        confidence="low",
        reason=f"no log line explains it; the supervisor concluded: {_short(summary, 200)}",
        evidence=[facts.last_line] if facts and facts.last_line else [],
    )


# -- words -----------------------------------------------------------------------------------------


def _cause_reason(r: RankFacts, hit: Hit, c: Compiled) -> str:
    if hit.via == "exit" and r.exit is not None:
        ex = r.exit
        state = "OOMKilled" if ex.oom_killed else f"exit code {ex.exit_code}"
        if ex.oom_killed and ex.exit_code is not None:
            state += f", exit code {ex.exit_code}"
        said = f"; last line: {_short(r.last_line.text)}" if r.last_line else "; it printed nothing"
        return f"{c.sig.title} ({state}, in phase {r.phase}){said}"
    return f"{c.sig.title}: {_short(hit.evidence.text)} ({hit.evidence.where})"


def _straggler_reason(s: RankFacts, printers: set[int], fired: float | None) -> str:
    where = f"last line: {_short(s.last_line.text)}" if s.last_line else "it printed nothing"
    return (
        f"it never finished loading (reached {s.phase}; {where}); ranks {rank_list(printers)} "
        f"finished and the post-load barrier expired at {_clock(fired)}"
    )


def _cascade_reason(
    r: RankFacts, own: Sequence[Hit], sigs: SignatureSet, root: _Candidate | None
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


def _changes(
    root: _Candidate | None, run: RunFacts, sigs: SignatureSet
) -> tuple[RecipeChange, ...]:
    if root is None or root.signature is None:
        return ()
    c = sigs.by_id[root.signature]
    out: list[RecipeChange] = []
    for ch in c.sig.changes:
        if run.engine and ch.engine and ch.engine != run.engine:
            continue
        current: str | None = None
        if ch.flag is not None:
            current = _flag_value(run.recipe_args, ch.flag)
        elif ch.env is not None:
            current = run.recipe_env.get(ch.env)
        out.append(
            RecipeChange(
                name=ch.name,
                kind="flag" if ch.flag else "env",
                value=ch.value,
                current=current,
                note=ch.note,
                signature=c.id,
            )
        )
    return tuple(out)


def _flag_value(argv: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if eq and name == flag:
            return value
        if arg == flag:
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                return argv[i + 1]
            return ""
    return None


def render_change(ch: RecipeChange, *, recipe_known: bool = True) -> str:
    """`--attention-backend dsa (now: flashinfer)`, `GLOO_SOCKET_IFNAME (not set in the recipe)`."""
    if ch.kind == "flag":
        target = f"{ch.name} {ch.value}" if ch.value else ch.name
    else:
        target = f"{ch.name}={ch.value}" if ch.value is not None else ch.name
    if ch.current is not None and ch.value is not None and ch.current == ch.value:
        target += " (already so in the recipe: look at the image or the engine version)"
    elif ch.current is not None:
        now = ch.current if ch.current != "" else "set"
        target += f" (now: {now})"
    elif ch.kind == "env" and recipe_known:
        target += " (not set in the recipe)"
    return target + (f" — {ch.note}" if ch.note else "")


def _signature_reports(
    ranks: Sequence[RankFacts], hits: Mapping[int, list[Hit]], sigs: SignatureSet
) -> tuple[SignatureReport, ...]:
    order: dict[str, float] = {}
    per: dict[str, list[Hit]] = {}
    for r in ranks:
        for h in hits[r.rank]:
            per.setdefault(h.signature, []).append(h)
            t = h.evidence.ts if h.evidence.ts is not None else float("inf")
            order[h.signature] = min(order.get(h.signature, float("inf")), t)
    counts: dict[str, int] = {}
    for r in ranks:
        for sig_id, n in r.counts.items():
            counts[sig_id] = counts.get(sig_id, 0) + n
    out: list[SignatureReport] = []
    for sig_id in sorted(per, key=lambda s: (order[s], s)):
        c = sigs.by_id[sig_id]
        found = per[sig_id]
        seen_ranks: list[int] = []
        evidence: list[Evidence] = []
        for h in found:
            rank = h.evidence.rank
            if rank is not None and rank not in seen_ranks:
                seen_ranks.append(rank)
                if len(evidence) < EVIDENCE_PER_SIGNATURE:
                    evidence.append(h.evidence)
        out.append(
            SignatureReport(
                id=c.id,
                title=c.sig.title,
                category=c.sig.category,
                role=c.sig.role,
                meaning=" ".join(c.sig.meaning.split()),
                remedy=" ".join(c.sig.remedy.split()),
                changes=tuple(ch.render() for ch in c.sig.changes),
                sources=c.sig.sources,
                ranks=tuple(sorted(seen_ranks)),
                count=max(counts.get(sig_id, 0), len(found)),
                evidence=tuple(evidence),
            )
        )
    return tuple(out)


_MILESTONE_WORDS = {
    "server_args": "engine started",
    "dist_init": "torch distributed up",
    "load_begin": "weights: loading",
    "load_end": "weights: loaded",
    "warmup": "warming up (KV cache / graphs)",
    "ready": "ready",
}


def _timeline(
    ranks: Sequence[RankFacts], hits: Mapping[int, list[Hit]], *, stopped_at: float | None = None
) -> tuple[TimelineEntry, ...]:
    entries: list[TimelineEntry] = []
    if stopped_at is not None:
        entries.append(
            TimelineEntry(ts=stopped_at, rank=None, kind="milestone", what="`cluster stop` began")
        )
    for r in ranks:
        for name, ev in r.markers.items():
            if name not in _MILESTONE_WORDS:
                continue
            entries.append(
                TimelineEntry(
                    ts=ev.ts,
                    rank=r.rank,
                    kind="milestone",
                    what=_MILESTONE_WORDS[name],
                    file=ev.file,
                    line=ev.line,
                    text=ev.text[:300],
                )
            )
        seen: set[str] = set()
        for h in hits[r.rank]:
            if h.signature in seen:
                continue
            seen.add(h.signature)
            entries.append(
                TimelineEntry(
                    ts=h.evidence.ts,
                    rank=r.rank,
                    kind="exit" if h.via == "exit" else "match",
                    what=h.signature,
                    file=h.evidence.file,
                    line=h.evidence.line,
                    text=h.evidence.text[:300],
                )
            )
        ex = r.exit
        if ex is not None and ex.finished_at is not None and ex.exited:
            state = "OOMKilled" if ex.oom_killed else f"exit code {ex.exit_code}"
            entries.append(
                TimelineEntry(ts=ex.finished_at, rank=r.rank, kind="exit", what=f"exited ({state})")
            )
    entries.sort(key=lambda e: (e.ts is None, e.ts or 0.0, e.rank or 0))
    return tuple(entries[:MAX_TIMELINE])


def _verdict(
    d: Diagnosis,
    root: _Candidate | None,
    ranks: Sequence[RankFacts],
    sigs: SignatureSet,
    roles: Mapping[int, str],
) -> str:
    total_lines = sum(r.lines for r in ranks)
    if d.category == "ready":
        ready = min(
            (r.markers["ready"] for r in ranks if "ready" in r.markers),
            key=lambda e: (e.ts is None, e.ts or 0.0),
            default=None,
        )
        said = (
            f' (rank {ready.rank}: "{_short(ready.text, 90)}" at {_clock(ready.ts)})'
            if ready
            else ""
        )
        stopped = (
            f" Then `cluster stop` stopped it at {_clock(d.source.stopped_at)}."
            if d.source.stopped_at is not None
            else ""
        )
        return (
            f"Ready: the boot reached serving{said}. No failure signature matched in "
            f"{_plural(len(ranks), 'rank')}' logs ({total_lines} lines); warnings that healthy "
            f"boots print are not failures.{stopped}"
        )
    if root is None:
        why = (
            f"`cluster stop` stopped it at {_clock(d.source.stopped_at)}, before that"
            if d.source.stopped_at is not None
            else "It may have been stopped, or it failed in a way no signature knows yet"
        )
        return (
            f"No failure found: no signature matched in {_plural(len(ranks), 'rank')}' logs "
            f"({total_lines} lines) and no rank exited badly, but the boot did not reach serving. "
            f"{why}: read the last lines in the table."
        )
    facts = next((r for r in ranks if r.rank == root.rank), None)
    node = f" ({facts.node})" if facts is not None and facts.node else ""
    when = "" if root.brief or root.ts is None else f", at {_clock(root.ts)}"
    phase = ""
    if not root.brief and facts is not None and facts.phase != "pending" and root.strength != 2:
        phase = f", while {facts.phase}"
    parts = [f"Rank {root.rank}{node} failed first: {root.title}{when}{phase}."]
    if root.signature is not None and root.confidence != "low":
        parts.append(_first_sentence(sigs.by_id[root.signature].sig.meaning))
    warned = [w for w in d.source.warnings if w.rank == root.rank]
    if warned:
        said = _short(warned[0].text, 220).rstrip(".")
        parts.append(f"The supervisor warned at {_clock(warned[0].ts)}: {said}.")
    same = sorted(k for k, role in roles.items() if role == "same-cause")
    if same:
        parts.append(f"Rank{'s' if len(same) > 1 else ''} {rank_list(same)} failed the same way.")
    other = sorted(k for k, role in roles.items() if role == "other-cause")
    if other:
        parts.append(
            f"Rank{'s' if len(other) > 1 else ''} {rank_list(other)} also failed for "
            "reasons of their own (see the table)."
        )
    cascade = sorted(d.cascade_ranks)
    if cascade:
        kinds = sorted({s for r in d.ranks if r.rank in cascade for s in r.signatures})
        what = ", ".join(sigs.by_id[k].sig.title for k in kinds[:3]) if kinds else "exits"
        parts.append(
            f"{'Rank' if len(cascade) == 1 else 'Ranks'} {rank_list(cascade)} failed as a "
            f"consequence ({what}): not causes."
        )
    first = d.first_error
    if first is not None and first.rank is not None and first.rank != root.rank:
        parts.append(
            f"The first error line was printed by rank {first.rank} ({first.where}), "
            f"a consequence of rank {root.rank}."
        )
    if d.recipe_changes:
        known = d.source.kind == "run"
        rendered = [render_change(ch, recipe_known=known) for ch in d.recipe_changes[:3]]
        parts.append("Change: " + "; ".join(rendered) + ".")
    elif root.signature is not None:
        parts.append("What to do: " + _first_sentence(sigs.by_id[root.signature].sig.remedy))
    if root.confidence == "low":
        parts.append(f"Confidence is low: {root.reason}.")
    return " ".join(parts)
