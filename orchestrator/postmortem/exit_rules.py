"""What a rank's exit state says on its own: the exit rules of the signatures.

A signature can name an exit state instead of (or as well as) log lines: OOMKilled; exit 137
before anyone else failed; exit 127 a second after start with nothing printed. The rules are
data (`signatures/*.yaml`); this module decides whether one holds for a rank, against the
other ranks' exits and the first failure in their logs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from orchestrator.postmortem.model import Evidence, ExitInfo, Hit, RankFacts
from orchestrator.postmortem.signatures import ExitRule, SignatureSet
from orchestrator.wording import short

SKEW_S = 1.0  # clocks of different nodes disagree by this much and it means nothing
TOGETHER_S = 2.0  # exits this close together are one event (a stop), not a first death
STOP_CODES = frozenset({137, 143})  # SIGKILL / SIGTERM: what `docker stop` leaves


def earliest(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def failed_exit(facts: RankFacts) -> bool:
    """A non-zero exit that is not simply the stop of a rank that was serving."""
    ex = facts.exit
    if ex is None:
        return False
    if ex.oom_killed:
        return True
    if ex.exit_code in (None, 0):
        return ex.status == "dead" or (ex.status == "created" and bool(ex.error))
    return not (facts.phase == "serving" and ex.exit_code in STOP_CODES)


def exit_evidence(facts: RankFacts) -> Evidence:
    ex = facts.exit or ExitInfo()
    file, _, line = ex.source.rpartition(":")
    parts = [f"status={ex.status}" if ex.status else "", f"exit_code={ex.exit_code}"]
    if ex.oom_killed is not None:
        parts.append(f"oom_killed={'true' if ex.oom_killed else 'false'}")
    if ex.started_at is not None and ex.finished_at is not None:
        parts.append(f"ran {ex.finished_at - ex.started_at:.1f} s")
    if ex.error:
        parts.append(f"error={short(ex.error, 200)}")
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
                and failed_exit(o)
                and ox.finished_at < f + TOGETHER_S
            ):
                return False
    return True


def exit_hits(
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
                    evidence=exit_evidence(facts),
                    via="exit",
                )
            )
    return hits
