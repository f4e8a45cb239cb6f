"""The postmortem of a run that failed after READY: the serving watch's incidents explained.

A boot failure is read from the logs (diagnose.py). An incident after READY (RANK_DIED, WEDGED,
MEMORY_LOW, NODE_LOST while serving: supervisor/serving.py) was named by the serving watch while
it happened, with the rank, the evidence and the last lines (events.jsonl `incident`). This
module puts that first in the diagnosis: how long the group served, which rank failed first and
how, the category, and what to change; the logs' own reading (a signature, an exception family
in the died rank's log) stays, and names the category when it has one. Restarts (`restart:`)
are told attempt by attempt, with the folder each earlier attempt's logs are kept in.

Pure (`explain`) over the run's records, and one reader (`explain_run`) called once by
`postmortem_run`.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.models.events import Incident, Restarted, VerdictRecord
from orchestrator.models.run import Outcome
from orchestrator.postmortem.model import Diagnosis, Evidence, RootCause
from orchestrator.postmortem.signatures import Category
from orchestrator.runstore import Run
from orchestrator.wording import clock, short

# The postmortem's category for an incident whose died rank's log names none of its own.
_CATEGORY: dict[str, Category] = {
    "RANK_DIED": "unknown",
    "WEDGED": "watchdog-timeout",
    "MEMORY_LOW": "out-of-memory",
    "NODE_LOST": "rendezvous-network",
}

# What to change, per incident: the first thing an operator does about it.
_CHANGE: dict[str, str] = {
    "RANK_DIED": "read the died rank's last lines above (its log in the run directory: rank-K/); "
    "if they name a cause, fix that in the recipe; to ride out rare deaths, add "
    "`restart: {max: 2}` to the recipe (bounded: never a storm)",
    "WEDGED": "the group is alive but no token comes out: stop it (`cluster stop`), look at the "
    "head's last lines for a stuck collective or kernel, and boot again; raise `timeouts.wedge` "
    "only if long requests legitimately produce no token for that long",
    "MEMORY_LOW": "find what grows on that node (the engine's RSS, a leak across restarts) and "
    "lower the engine's memory share (e.g. --mem-fraction-static / --gpu-memory-utilization); "
    "never drop the page cache; `restart.min_mem_available` keeps a restart off a starved node",
    "NODE_LOST": "check that node's power, management link and sshd (`cluster inventory check`); "
    "its log up to the loss is kept in the run directory; boot again once it answers",
}


@dataclass(frozen=True)
class ServingHistory:
    """What the run's records say about its life after READY."""

    ready_at: float | None
    incidents: tuple[Incident, ...]
    restarts: tuple[Restarted, ...]


def history_of(run: Run) -> ServingHistory:
    ready_at: float | None = None
    incidents: list[Incident] = []
    restarts: list[Restarted] = []
    for e in run.events():
        if isinstance(e, VerdictRecord) and e.outcome is Outcome.READY and ready_at is None:
            ready_at = e.decided_at or e.ts
        elif isinstance(e, Incident):
            incidents.append(e)
        elif isinstance(e, Restarted):
            restarts.append(e)
    return ServingHistory(ready_at, tuple(incidents), tuple(restarts))


def explain_run(run: Run, d: Diagnosis) -> Diagnosis:
    """The diagnosis with the run's serving incidents explained (unchanged without any)."""
    return explain(d, history_of(run))


def _served(h: ServingHistory, until: float) -> str:
    if h.ready_at is None:
        return ""
    s = max(until - h.ready_at, 0.0)
    text = f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m" if s >= 3600 else f"{s / 60:.1f} min"
    return f" after serving {text} (READY at {clock(h.ready_at)})"


def _attempts(h: ServingHistory) -> str:
    if not h.restarts:
        return ""
    told = "; ".join(
        f"attempt {i.attempt}: {i.outcome.value if i.outcome else '?'} rank {i.rank}"
        + ("" if i.final else " (restarted)")
        for i in h.incidents
    )
    kept = ", ".join(f"{r.kept}/" for r in h.restarts)
    return (
        f" The recipe's restart brought the whole group back "
        f"{len(h.restarts)} time(s) ({told}); the earlier attempts' logs are kept in {kept}."
    )


def explain(d: Diagnosis, h: ServingHistory) -> Diagnosis:
    """Pure: `d` (the logs' reading) with the incident that ended the run put first."""
    if not h.incidents:
        return d
    ended = next((i for i in reversed(h.incidents) if i.final), h.incidents[-1])
    kind = ended.outcome.value if ended.outcome else "RANK_DIED"
    serving_category = ended.outcome.category if ended.outcome else "rank-died-serving"
    own = d.root_cause if d.root_cause is not None and d.root_cause.rank == ended.rank else None
    found = own is not None and d.category not in ("ready", "unknown")
    category: Category = d.category if found else _CATEGORY.get(kind, "unknown")
    how = ""
    if ended.exit_code is not None or ended.oom_killed:
        how = " (OOMKilled)" if ended.oom_killed else f" (exit code {ended.exit_code})"
    signal = f", signal {ended.signal}" if ended.signal else ""
    last = ""
    if ended.last_lines and ended.last_lines[-1].strip()[:60] not in ended.message:
        last = f" Its last line: {short(ended.last_lines[-1], 200).rstrip('.')}."
    why = f" Its log says: {own.title}." if found and own is not None else ""
    change = _CHANGE.get(kind, _CHANGE["RANK_DIED"])
    verdict = (
        f"{kind} ({serving_category}{signal}): rank {ended.rank}"
        f"{how}{_served(h, ended.ts)}, at {clock(ended.ts)}: "
        f"{short(ended.message, 300).rstrip('.')}."
        f"{last}{why}{_attempts(h)} What to change: {change}."
    )
    # The died rank's last line, where the logs' reading found it (file and line number).
    evidence: tuple[Evidence, ...] = tuple(
        r.last_line for r in d.ranks if r.rank == ended.rank and r.last_line is not None
    )
    root = RootCause(
        rank=ended.rank,
        category=category,
        signature=own.signature if found and own is not None else None,
        title=f"{kind} while serving: {short(ended.message, 160)}",
        confidence="high" if kind != "RANK_DIED" or found else "medium",
        reason=f"named by the serving watch at {clock(ended.ts)}{signal}: "
        f"{short(ended.message, 200)}",
        evidence=(own.evidence if found and own is not None else ()) or evidence,
    )
    notes = (
        *(f"incident: {_line(i)}" for i in h.incidents),
        f"the boot itself reached READY; the logs' own reading: {short(d.verdict, 300)}",
        *d.notes,
    )
    return d.model_copy(
        update={
            "category": category,
            "verdict": verdict,
            "first_failing_rank": ended.rank,
            "root_cause": root,
            "outcome": "failed" if category != "unknown" else "failed-unknown",
            "notes": notes,
            "no_failure": None,
        }
    )


def _line(i: Incident) -> str:
    what = i.outcome.value if i.outcome else "?"
    final = "final" if i.final else "restarted"
    return f"{clock(i.ts)} attempt {i.attempt} {what} rank {i.rank} ({final}): {short(i.message)}"
