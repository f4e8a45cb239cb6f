"""From facts to the answer: which rank failed first, why, who merely followed, what to change.

Pure: `diagnose(run, ranks, signatures)` reads nothing and returns a `Diagnosis`. The evidence
comes from each rank's log hits and its exit state (`exit_rules.py`); the first failing rank is
the strongest candidate (`blame.py` says how strength is weighed). Every other failed rank is a
cascade (or failed the same way on its own: `also_on`). A boot with no failure evidence that
reached serving is `ready`; one that simply stopped is `unknown`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from orchestrator.models.recipe import flag_value
from orchestrator.postmortem.blame import (
    Candidate,
    candidates,
    cascade_reason,
    from_consequences,
    from_exceptions,
    from_hang,
    from_laggard,
    from_measured,
    from_supervisor,
    raised_before,
    served_after_the_end,
    weigh_measured,
)
from orchestrator.postmortem.calibration import load_calibration
from orchestrator.postmortem.exit_rules import earliest, exit_hits, failed_exit
from orchestrator.postmortem.families import (
    ARG_CHECK_FRAMES,
    FAMILIES,
    Raised,
    classify,
    exception_of,
    family_index,
    holding,
)
from orchestrator.postmortem.model import (
    PHASES,
    Diagnosis,
    Dissent,
    Evidence,
    Hit,
    NoFailure,
    RankFacts,
    RankReport,
    RecipeChange,
    RootCause,
    RunFacts,
    SignatureReport,
    TimelineEntry,
)
from orchestrator.postmortem.signatures import SignatureSet
from orchestrator.postmortem.stated import says_health_check_failed
from orchestrator.wording import clock, first_sentence, plural, rank_list, short

if TYPE_CHECKING:
    from orchestrator.postmortem.learned import Opinion

__all__ = ["diagnose", "rank_list", "render_change"]

MAX_TIMELINE = 200
EVIDENCE_PER_SIGNATURE = 8


# -- the diagnosis ---------------------------------------------------------------------------------


def _before_stop(facts: RankFacts, stopped_at: float) -> tuple[RankFacts, int]:
    """A rank as it was when `cluster stop` began, and how many hits came after.

    Stopping ranks one after another makes the others print what a lost peer makes them
    print (NCCL and Gloo errors, SGLang's sigquit): those lines are the stop's doing, not a
    failure. They stay in the logs and are counted in the notes; they are not weighed. An exit
    the stop caused (or a state saved while the rank still ran) reads `stopped`."""
    kept = tuple(h for h in facts.hits if h.evidence.ts is None or h.evidence.ts < stopped_at)
    # The tracebacks a lost peer causes too (a raised exception marks a boot failed).
    raised = tuple(e for e in facts.exceptions if e.ts is None or e.ts < stopped_at)
    stated = tuple(e for e in facts.stated if e.ts is None or e.ts < stopped_at)
    ex = facts.exit
    if ex is not None and not ex.oom_killed:
        by_stop = ex.status == "running" or (
            ex.finished_at is not None and ex.finished_at >= stopped_at
        )
        if by_stop:
            ex = ex.model_copy(update={"status": "stopped", "exit_code": None})
    update = {"hits": kept, "exceptions": raised, "stated": stated, "exit": ex}
    return facts.model_copy(update=update), len(facts.hits) - len(kept)


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
    # (a notice is not failure evidence: a slow boot prints it while it still progresses)
    log_fail: dict[int, float | None] = {
        r.rank: earliest(h.evidence.ts for h in r.hits if h.role != "notice") for r in ranks
    }
    hits: dict[int, list[Hit]] = {}
    for r in ranks:
        found = list(r.hits) + exit_hits(r, ranks, sigs, log_fail, interrupted)
        found.sort(
            key=lambda h: (
                h.evidence.ts is None,
                h.evidence.ts or 0.0,
                h.via != "log",  # at the same time, the words before the exit state
                h.evidence.line,
            )
        )
        hits[r.rank] = found
    # What the blame weighs: everything but the notices, which the report still lists.
    shown = hits
    hits = {k: [h for h in v if h.role != "notice"] for k, v in shown.items()}
    if run.kind == "logs":
        for r in ranks:
            if _survived_before_serving(r, hits[r.rank]):
                hits[r.rank] = []
    # An exception line is failure evidence too, even when no signature names it: a boot that
    # raised is never `ready`.
    failed = {r.rank for r in ranks if hits[r.rank] or failed_exit(r) or r.exceptions}
    if run.kind == "logs":
        failed |= {
            r.rank for r in ranks if _ends_failing_after_ready(r) or _ends_on_a_failed_request(r)
        }

    suspects = candidates(ranks, hits, sigs, failed)
    root = min(suspects, key=lambda c: c.key()) if suspects else None
    refused_for: list[str] = []
    if root is not None:
        _engine_by_frames(root, ranks, sigs)
        refused_for = _who_refused(root, ranks)
    if root is None and failed:
        root = from_consequences(ranks, hits, sigs, failed)
    if root is None or (root.category == "unknown" and not root.final):
        # the traceback fallback: the exception's family, when no signature says more
        fallback = from_exceptions(ranks, prefer=root.rank if root is not None else None)
        if fallback is not None:
            if root is not None:
                fallback.evidence.extend(e for e in root.evidence if e not in fallback.evidence)
            root = fallback
    ready = not failed and (
        any(r.phase == "serving" for r in ranks) or str(verdict.get("outcome")) == "READY"
    )
    notes = list(run.notes)
    too_late = served_after_the_end(run.measured, ranks, verdict) if ready else None
    if too_late is not None:  # the supervisor had ended the boot on its deadline by then
        ready = False
        notes.append(too_late)
    if run.stopped_at is not None:
        notes.append(
            f"`cluster stop` began at {clock(run.stopped_at)}"
            + (
                f"; {plural(set_aside, 'failure line')} printed after it (ranks losing their "
                "peers as they were stopped) were set aside"
                if set_aside
                else ""
            )
        )
    if root is None and not ready:
        root = from_hang(ranks) or from_laggard(run, ranks) or from_supervisor(verdict, by_rank)
        if root is None and ranks and too_late is None:
            furthest = max((r.phase for r in ranks), key=PHASES.index)
            notes.append(
                f"no failure signature matched and no rank reached serving (furthest: {furthest}); "
                "the boot may have been stopped, or failed in a way no signature knows yet"
            )

    if not ready:  # what the supervisor measured, weighed against what the ranks printed
        measured = from_measured(run.measured, ranks, hits, failed, verdict)
        root = weigh_measured(root, measured, ranks)

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
        for c in suspects:
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
            reasons[r.rank] = cascade_reason(r, hits[r.rank], sigs, root)
        elif r.lines == 0 and r.exit is None:
            roles[r.rank] = "unknown"
            reasons[r.rank] = "no log and no exit state"
        else:
            roles[r.rank] = "ok"
            reasons[r.rank] = f"no failure; reached {r.phase}" + (
                ", then served in the head's group (a worker prints nothing more)"
                if ready and r.phase in ("loaded", "warming")
                else ""
            )
    cascade = tuple(r.rank for r in ranks if roles[r.rank] == "cascade")

    if ready:
        category = "ready"
    elif root is not None:
        category = root.category
    else:
        category = "unknown"
    # Precision first: a named category stands only when its deciding path's measured
    # precision clears the threshold; otherwise it is withheld as `closest`.
    path = deciding_path(root, ranks) if root is not None and not ready else None
    calib = load_calibration()
    confidence = calib.confidence(path) if path is not None else None
    closest: str | None = None
    # A hang in a run directory is exempt: its path's record comes from pasted logs, where a
    # hang is never answered (a paste cannot tell it from a cut); in a run the supervisor
    # measured the silence, evidence no paste has, so the pastes' record does not speak for it.
    measured_hang = path is not None and path.startswith("hang:") and run.kind == "run"
    if (
        confidence is not None
        and category not in ("ready", "unknown")
        and confidence < calib.threshold
        and not measured_hang
    ):
        closest, category = category, "unknown"
    elif path is not None and path.startswith("hang:") and run.kind == "logs":
        # Pasted logs that end during distributed init cannot tell a hang from a cut paste (no
        # supervisor measured the silence): the hang is the closest guess, not a failure.
        closest, category = category, "unknown"
    # Split evidence (learned.dissent): the rules named a category from a line, but the model,
    # reading the whole boot, is sure of another. On logs neither had seen that is where the
    # rules were wrong most often, so neither is given: the rules' answer becomes the closest
    # guess and the report shows both. Only for pasted logs: the evidence for it is theirs (the
    # model learned single pastes; a run's other ranks add their cascades' words), and a run
    # directory holds evidence no paste has (exit states, the supervisor's measured silence).
    dissent = (
        _dissent(ranks, category, lambda: _weighed(root, ranks, hits, sigs, refused_for))
        if root is not None
        and category not in ("ready", "unknown")
        and confidence is not None
        and run.kind == "logs"
        else None
    )
    if dissent is not None:
        closest, category = category, "unknown"
    # The second opinion (learned.py): only where the rules named nothing, never `ready`.
    # Only where nothing points at a rank: a root the blame found (a signature, a rank that
    # died silently while the others echoed) is not overruled by words.
    asked = category == "unknown" and not ready and root is None
    second = _second_opinion(ranks) if asked else None
    if (
        second is not None
        and second.category == "rendezvous-network"
        and not failed
        and any("dist_init" in r.markers for r in ranks)
    ):
        # nothing failed and the log itself says the rendezvous completed: a slow boot after
        # it is not a rendezvous hang (the words of NCCL's init lines are not evidence of one)
        second = None
    if (
        second is not None
        and second.category == "out-of-memory"
        and killed_after_raising(ranks, hits, sigs)
    ):
        # the blame set that `Killed` aside as the end of the exception before it; the model,
        # reading the word, must not bring it back as an OOM
        second = None
    if second is not None:
        category, closest = second.category, None
        path, confidence = f"model:{second.category}", second.probability
    if category == "ready":
        outcome = "ready"
    elif category != "unknown":
        outcome = "failed"
    elif failed or any(r.stated for r in ranks):
        # a line that says something failed, in words no rule names, is still a failure: the
        # engineer must read it, not wait for a boot that is already dead (stated.py)
        outcome = "failed-unknown"
    else:
        outcome = "no-failure"
    no_failure = _no_failure(ranks) if outcome == "no-failure" else None
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
            signatures=tuple(dict.fromkeys(h.signature for h in shown[r.rank])),
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
        signatures=_signature_reports(ranks, shown, sigs),
        recipe_changes=changes,
        timeline=_timeline(ranks, shown, stopped_at=run.stopped_at),
        notes=tuple(notes),
        outcome=outcome,
        confidence=round(confidence, 3) if confidence is not None else None,
        closest=closest,
        decided_by=path,
        named_by=(
            _model_words(second)
            if second is not None
            else named_by(path, root, sigs)
            if path is not None and root is not None
            else ""
        ),
        no_failure=no_failure,
        dissent=(
            Dissent(
                category=dissent.category,
                probability=round(dissent.probability, 3),
                lines=dissent.lines,
            )
            if dissent is not None
            else None
        ),
    )
    words = (
        _stated_words(diagnosis, ranks)
        if outcome == "failed-unknown"
        and (not failed or root is None)
        and any(r.stated for r in ranks)
        else _verdict(diagnosis, root, ranks, sigs, roles, refused_for)
    )
    return diagnosis.model_copy(update={"verdict": words})


_ENGINE_FRAMES = (("/sglang/", "sglang"), ("/vllm/", "vllm"))


# Words a log line uses when something failed (not "error": loggers name themselves with it,
# `uvicorn.error`, FastChat's `| ERROR | stderr |` on every line).
_FAILURE_WORDS = re.compile(
    r"(?i)\b(?:timeout|timed out|exception|fatal|killed|aborted|traceback|failed)\b"
)


# An access log line of a request the server failed: gin's `| 500 |`, uvicorn's `" 500`
_SERVER_ERROR = re.compile(r'\| 5\d\d \||" 5\d\d(?: |$)')


def _ends_failing_after_ready(r: RankFacts) -> bool:
    """A pasted log that ends, after the engine said it serves, on a line saying something
    failed ("[TP3] Watchdog timeout (self.watchdog_timeout=300)"), or
    that states a failure anywhere after that (an ERROR line, `panic:`): the paste goes on
    past the start-up because that is what went wrong. A failure no rule names, never
    `ready`."""
    serving = [r.markers[m] for m in ("ready", "traffic") if m in r.markers]
    last = r.last_line
    if last is None or not serving:
        return False
    if any(s.file == e.file and s.line < e.line for s in serving for e in r.stated):
        return True  # a line after it says something failed (stated.py): not ready
    if any(says_health_check_failed(e.text) for e in r.stated):
        return True  # a health check failed: the server was serving, wherever the line stands
    if not any(s.file == last.file and s.line < last.line for s in serving):
        return False
    if any(m.file == last.file and m.line == last.line for m in r.markers.values()):
        return False
    return bool(_FAILURE_WORDS.search(last.text))  # a 5xx last line: _ends_on_a_failed_request


def _survived_before_serving(r: RankFacts, hits: Sequence[Hit]) -> bool:
    """A pasted log whose only failure lines are symptoms (something ended badly, no cause
    named) printed before the engine said it serves, with nothing raised and nothing failing
    after: the server came up past them, so they were not its failure (InvokeAI's optional
    `make` that "returned non-zero exit status 1", then `Patchmatch not loaded (nonfatal)` and
    uvicorn's startup: the thirty-second set). A named cause still counts wherever it is."""
    serving = [r.markers[m] for m in ("ready", "traffic") if m in r.markers]
    if not hits or not serving or r.exceptions or failed_exit(r):
        return False
    first = min(serving, key=lambda e: e.line)
    return all(
        h.role == "symptom"
        and h.via == "log"
        and h.evidence.file == first.file
        and h.evidence.line < first.line
        for h in hits
    )


def _ends_on_a_failed_request(r: RankFacts) -> bool:
    """A pasted log whose last line is a request the server answered 5xx (gin's `| 500 |`):
    the server was up and the paste stops on what went wrong, ready marker or not (ollama's
    gin prints no ready line of its own). A failure no rule names, never "no failure found";
    a 500 followed by requests answered 200 is a server that recovered."""
    return r.last_line is not None and bool(_SERVER_ERROR.search(r.last_line.text))


def _engine_by_frames(root: Candidate, ranks: Sequence[RankFacts], sigs: SignatureSet) -> None:
    """A signature whose category depends on the engine (gloo's monitoredBarrier is SGLang's
    post-load barrier inside SGLang's scheduler, a transport timeout elsewhere), on a log whose
    lines name no engine: the traceback frames do (`.../sglang/srt/managers/scheduler.py`)."""
    if root.signature is None or any(r.engine for r in ranks):
        return
    by_engine = sigs.by_id[root.signature].sig.engine_category
    if not by_engine:
        return
    frames = " ".join(f for r in ranks for f in r.exception_frames)
    seen = {engine for needle, engine in _ENGINE_FRAMES if needle in frames}
    if len(seen) == 1:
        engine = seen.pop()
        root.category = by_engine.get(engine, sigs.by_id[root.signature].sig.category)


_ARG_CHECKS = re.compile(ARG_CHECK_FRAMES)


def _deciding_exception(root: Candidate, ranks: Sequence[RankFacts]) -> tuple[Raised | None, str]:
    """The exception the root cause rests on (its first evidence line, raised on its rank) and
    that traceback's frames; (None, "") when the evidence is not a raised exception."""
    facts = next((r for r in ranks if r.rank == root.rank), None)
    if facts is None or not root.evidence or root.evidence[0] not in facts.exceptions:
        return None, ""
    ev = root.evidence[0]
    i = facts.exceptions.index(ev)
    frames = facts.exception_frames[i] if i < len(facts.exception_frames) else ""
    return exception_of(ev.text), frames


def _who_refused(root: Candidate, ranks: Sequence[RankFacts]) -> list[str]:
    """A refusal that names the GPU, raised by the engine's argument checks at start-up (not a
    kernel at run time), is the validator's: the flag is what to change. Returns the other
    reading the frames decided against (the verdict says both), or nothing."""
    if root.category != "unsupported-arch-kernel":
        return []
    raised, frames = _deciding_exception(root, ranks)
    if raised is None or raised.name not in _REFUSALS:
        return []
    if not _ARG_CHECKS.search(frames):
        return ["config-validator-refusal"]  # a refusal, but by the kernel's own check
    root.category = "config-validator-refusal"
    return ["unsupported-arch-kernel"]


_REFUSALS = frozenset(
    {"ValueError", "NotImplementedError", "AssertionError", "VLLMValidationError", "TypeError"}
)


def split_reading(root: Candidate, ranks: Sequence[RankFacts]) -> list[str]:
    """Other categories the deciding exception line also reads as (medium families only): the
    evidence is split, and the verdict says both (a refusal that names the GPU)."""
    if root.signature is not None or root.strength != 1:
        return []
    raised, frames = _deciding_exception(root, ranks)
    if raised is None:
        return []
    return list(
        dict.fromkeys(
            FAMILIES[k].category
            for k in holding(raised, frames)
            if FAMILIES[k].confidence == "medium" and FAMILIES[k].category != root.category
        )
    )


def deciding_path(root: Candidate, ranks: Sequence[RankFacts]) -> str:
    """The path that named the root cause (calibration.py says what each kind means)."""
    if root.signature is not None:
        return f"{'echo' if root.strength == 0 else 'sig'}:{root.signature}"
    if root.strength == 1 and root.evidence:
        facts = next((r for r in ranks if r.rank == root.rank), None)
        ev = root.evidence[0]
        if facts is not None and ev in facts.exceptions:
            i = facts.exceptions.index(ev)
            frames = facts.exception_frames[i] if i < len(facts.exception_frames) else ""
            raised = exception_of(ev.text)
            fam = classify(raised, frames) if raised is not None else None
            if fam is not None:
                return f"family:{family_index(fam)}"
    kind = {
        "it began distributed init": "hang",
        "it was still": "laggard",
        "went silent": "silent",
        "its node became": "lost",
        "the supervisor's verdict": "supervisor",
    }
    head = next((v for k, v in kind.items() if root.title.startswith(k)), f"s{root.strength}")
    return f"{head}:{root.category}"


def named_by(path: str, root: Candidate, sigs: SignatureSet) -> str:
    """The deciding path in words, with the line(s) it rests on."""
    head, _, rest = path.partition(":")
    lines = ", ".join(e.where for e in root.evidence[:2])
    at = f" (from {lines})" if lines else ""
    if head in ("sig", "echo") and rest in sigs.by_id:
        what = "signature" if head == "sig" else "only the consequences signature"
        return f"{what} {rest}{at}"
    if head == "family":
        return f"the exception's family ({root.title}){at}"
    return f"the boot's shape ({head}){at}"


def killed_after_raising(
    ranks: Sequence[RankFacts], hits: Mapping[int, Sequence[Hit]], sigs: SignatureSet
) -> bool:
    """A rank whose only OOM evidence is weak (a bare `Killed`, exit -9) printed after it
    raised an exception (blame reads the exception instead)."""
    for r in ranks:
        weak = [h for h in hits[r.rank] if sigs.by_id[h.signature].sig.weak]
        if weak and len(weak) == len(hits[r.rank]) and raised_before(r, weak[0].evidence):
            return True
    return False


def _second_opinion(ranks: Sequence[RankFacts]) -> Opinion | None:
    from orchestrator.postmortem.learned import opinion  # its weights only when asked

    return opinion(ranks)


def _dissent(
    ranks: Sequence[RankFacts], named: str, weighed: Callable[[], set[str]]
) -> Opinion | None:
    from orchestrator.postmortem.learned import dissent  # its weights only when asked

    other = dissent(ranks, named)
    # a reading the rules already weighed and ranked below theirs is not a split: a
    # consequence's signature (the watchdog after an OOM), the other side of a refusal
    # decided by who raised it (the frames); looked up only when the model disagrees
    return None if other is None or other.category in weighed() else other


def _weighed(
    root: Candidate,
    ranks: Sequence[RankFacts],
    hits: Mapping[int, Sequence[Hit]],
    sigs: SignatureSet,
    refused_for: Sequence[str],
) -> set[str]:
    """The categories the rules saw in this boot besides the one they named."""
    seen = {sigs.by_id[h.signature].sig.category for r in ranks for h in hits[r.rank]}
    return seen | set(refused_for) | set(split_reading(root, ranks))


def _where(lines: Sequence[Evidence]) -> str:
    return ", ".join(e.where for e in lines)


def _model_words(said: Opinion) -> str:
    lines = _where(said.lines)
    return f"the model (learned.py), from lines {lines}" if lines else "the model (learned.py)"


def _model_line(d: Diagnosis, ranks: Sequence[RankFacts]) -> str:
    """The text of the first line the model's answer rests on."""
    where = d.named_by.rpartition("from lines ")[2].split(", ")[0]
    for r in ranks:
        for ev in (*r.exceptions, *r.stated, *(h.evidence for h in r.hits), r.last_line):
            if ev is not None and ev.where == where:
                return ev.text
    return ""


def _stated_words(d: Diagnosis, ranks: Sequence[RankFacts]) -> str:
    """The verdict of a boot whose only failure evidence is a line saying one, in words no
    signature or exception family names."""
    said = min(
        (e for r in ranks for e in r.stated),
        key=lambda e: (e.ts is None, e.ts or 0.0, e.rank or 0, e.line),
    )
    rank = f"rank {said.rank}, " if said.rank is not None and len(ranks) > 1 else ""
    closest = f" The closest guess: {d.closest}." if d.closest else ""
    return (
        f'Failed, cause not named: a line says something failed ({rank}{said.where}: "'
        f'{short(said.text, 200)}"), in words no signature or exception family knows.{closest} '
        "Read that line and the lines before it."
    )


def _no_failure(ranks: Sequence[RankFacts]) -> NoFailure:
    """How far a boot with no failure got: the furthest rank's phase and its last line."""
    if not ranks:
        return NoFailure(furthest_phase="pending")
    best = max(ranks, key=lambda r: (PHASES.index(r.phase), -r.rank))
    return NoFailure(furthest_phase=best.phase, rank=best.rank, last_line=best.last_line)


def _no_failure_words(nf: NoFailure, ranks: Sequence[RankFacts], total_lines: int) -> str:
    last = f'; last line: "{short(nf.last_line.text, 120)}"' if nf.last_line else ""
    rank = f" (rank {nf.rank})" if nf.rank is not None and len(ranks) > 1 else ""
    return f"No failure found; furthest phase: {nf.phase_words()}{rank}{last}."


def _changes(root: Candidate | None, run: RunFacts, sigs: SignatureSet) -> tuple[RecipeChange, ...]:
    if root is None or root.signature is None:
        return ()
    c = sigs.by_id[root.signature]
    out: list[RecipeChange] = []
    for ch in c.sig.changes:
        if run.engine and ch.engine and ch.engine != run.engine:
            continue
        current: str | None = None
        if ch.flag is not None:
            current = flag_value(run.recipe_args, ch.flag)
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
    root: Candidate | None,
    ranks: Sequence[RankFacts],
    sigs: SignatureSet,
    roles: Mapping[int, str],
    refused_for: Sequence[str] = (),
) -> str:
    total_lines = sum(r.lines for r in ranks)
    if d.category == "ready":
        ready = min(
            (r.markers["ready"] for r in ranks if "ready" in r.markers),
            key=lambda e: (e.ts is None, e.ts or 0.0),
            default=None,
        )
        said = (
            f' (rank {ready.rank}: "{short(ready.text, 90)}" at {clock(ready.ts)})' if ready else ""
        )
        stopped = (
            f" Then `cluster stop` stopped it at {clock(d.source.stopped_at)}."
            if d.source.stopped_at is not None
            else ""
        )
        return (
            f"Ready: the boot reached serving{said}. No failure signature matched in "
            f"{plural(len(ranks), 'rank')}' logs ({total_lines} lines); warnings that healthy "
            f"boots print are not failures.{stopped}"
        )
    if d.decided_by is not None and d.decided_by.startswith("model:"):
        return (
            f"Probably {d.category} (named by the model, probability {d.confidence:.0%}; no "
            f"signature or exception family names it): {d.named_by}. "
            + (f'The deciding line: "{short(_model_line(d, ranks), 200)}". ' if ranks else "")
            + "Check that line before changing the recipe."
        )
    if root is None:
        why = (
            f"`cluster stop` stopped it at {clock(d.source.stopped_at)}, before that"
            if d.source.stopped_at is not None
            else "It may have been stopped, or it failed in a way no signature knows yet"
        )
        where = _no_failure_words(d.no_failure, ranks, total_lines) if d.no_failure else ""
        return (
            f"No failure found: no signature matched in {plural(len(ranks), 'rank')}' logs "
            f"({total_lines} lines) and no rank exited badly, but the boot did not reach serving. "
            f"{why}: read the last lines in the table.{' ' + where if where else ''}"
        )
    facts = next((r for r in ranks if r.rank == root.rank), None)
    if d.outcome == "no-failure" and d.no_failure is not None:
        # a structural guess (a hang, a laggard) that did not clear the threshold
        return _no_failure_words(d.no_failure, ranks, total_lines) + (
            f" Closest guess: {d.closest} ({root.title}; confidence {d.confidence})."
            if d.closest
            else ""
        )
    node = f" ({facts.node})" if facts is not None and facts.node else ""
    when = "" if root.brief or root.ts is None else f", at {clock(root.ts)}"
    phase = ""
    if not root.brief and facts is not None and facts.phase != "pending" and root.strength != 2:
        phase = f", while {facts.phase}"
    parts = [f"Rank {root.rank}{node} failed first: {root.title}{when}{phase}."]
    if d.closest is not None and d.dissent is not None:
        split = d.dissent
        lines = _where(split.lines)
        parts.insert(
            0,
            f"Cause not named: the evidence is split. The rules read {d.closest} "
            f"({d.named_by}); the model reads {split.category} "
            f"(probability {split.probability:.2f}{', from ' + lines if lines else ''}). On "
            "logs neither had seen, such splits were where the rules were most often wrong: "
            f"check both, {d.closest} first.",
        )
    elif d.closest is not None:
        parts.insert(
            0,
            f"Cause not named: the closest category is {d.closest}, but its deciding path "
            f"({d.decided_by}) was right only {d.confidence:.0%} of the time on logs it was not "
            "written from, below the threshold.",
        )
    if root.signature is not None and root.confidence != "low":
        parts.append(first_sentence(sigs.by_id[root.signature].sig.meaning))
    warned = [w for w in d.source.warnings if w.rank == root.rank]
    if warned:
        said = short(warned[0].text, 220).rstrip(".")
        parts.append(f"The supervisor warned at {clock(warned[0].ts)}: {said}.")
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
        parts.append("What to do: " + first_sentence(sigs.by_id[root.signature].sig.remedy))
    also = list(refused_for) or split_reading(root, ranks)
    if also and d.category not in ("unknown", "ready"):
        parts.append(
            f"The evidence is split: the same line also reads as {' or '.join(also)}; "
            f"{d.category} because of who raised it (the frames and the class)."
        )
    if root.confidence == "low":
        parts.append(f"Confidence is low: {root.reason}.")
    return " ".join(parts)
