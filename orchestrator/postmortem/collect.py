"""Gather the facts a postmortem reasons on, from a run directory or from loose log files.

The only module of the postmortem that reads the disk. A run directory is read as
`docs/run-directory.md` lays it out, and any file may be missing or torn: a missing file is
simply no evidence, an unreadable one becomes a note. Rank logs are scanned by `timeline`
(streaming); exit states come from exit.json, then inspect.json, then events.jsonl.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.errors import ConfigError, RunStoreError
from orchestrator.models.events import (
    RECORD,
    FollowInterrupted,
    Record,
    Step,
    Stopped,
    VerdictRecord,
    WatcherWarning,
)
from orchestrator.models.run import NodeBack, NodeLost, RankExited, RankStarted
from orchestrator.postmortem.measured import Measured, SampleRow, measured_from
from orchestrator.postmortem.model import PHASES, Evidence, ExitInfo, Hit, RankFacts, RunFacts
from orchestrator.postmortem.signatures import SignatureSet
from orchestrator.postmortem.timeline import (
    FileScan,
    ScanJob,
    parse_timestamp,
    scan_files,
)
from orchestrator.runstore import Run

_RANK_DIR = re.compile(r"^rank-(\d+)$")
# rank-3.log, rank3, rank_3, tp3, TP3, node-rank-3: the number after one of these words.
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|tp|node[-_]?rank)[-_]?(\d+)(?![0-9])", re.I)
_RANK_FOLDER = re.compile(r"^(?:rank|tp)[-_]?(\d+)$", re.I)  # a run's rank-3/ copied as is
# events.jsonl as its typed records, each with its line number (for evidence).
Events = list[tuple[int, Record]]


@dataclass(frozen=True)
class Collected:
    run: RunFacts
    ranks: list[RankFacts]


# -- small readers ------------------------------------------------------------------------------


def _verdict_document(run: Run, notes: list[str]) -> dict[str, Any] | None:
    """verdict.json through its typed reader (an earlier release's shape upgraded), as the
    plain document the blame reads; a file that does not read is a note, not a stop."""
    try:
        verdict = run.verdict()
    except RunStoreError as exc:
        notes.append(exc.line())
        return None
    return verdict.document() if verdict is not None else None


def _read_json(path: Path, notes: list[str]) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, json.JSONDecodeError) as exc:
        notes.append(f"{path.name}: unreadable ({exc}); ignored")
        return None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        data = data[0]  # `docker inspect` prints a list
    return data if isinstance(data, dict) else None


def rank_logs(folder: Path) -> list[Path]:
    """A rank's log files: every `*.log`, but one copy of each stream.

    `cluster stop` saves the node's complete log as `full-<stream>.log` beside the followed
    `<stream>.log`; both hold the same lines, so only the larger (the more complete) is read.
    """
    chosen: dict[str, Path] = {}
    for log in sorted(folder.glob("*.log")):
        stream = log.name.removeprefix("full-")
        old = chosen.get(stream)
        if old is None or log.stat().st_size > old.stat().st_size:
            chosen[stream] = log
    return sorted(chosen.values())


def _ts(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value:
        return parse_timestamp(value)
    return None


def _line_of(path: Path, key: str) -> int:
    """The line of a JSON file on which `"key"` first appears (1 when unknown)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                if f'"{key}"' in line:
                    return n
    except OSError:
        pass
    return 1


def _flatten(items: Iterable[Any]) -> list[str]:
    out: list[str] = []
    for item in items:
        if isinstance(item, list | tuple):
            out.extend(str(x) for x in item)
        elif item is not None:
            out.append(str(item))
    return out


def rank_from_name(path: Path) -> int | None:
    """The rank a file's name states (rank-3.log, rank3, tp3), or its folder's (rank-3/...)."""
    if m := _RANK_IN_NAME.search(path.name):
        return int(m.group(1))
    if m := _RANK_FOLDER.match(path.parent.name):
        return int(m.group(1))
    return None


# -- exit states -----------------------------------------------------------------------------------


def _exit_from_files(rank_dir: Path, display: str, notes: list[str]) -> ExitInfo | None:
    exit_json = _read_json(rank_dir / "exit.json", notes)
    inspect = _read_json(rank_dir / "inspect.json", notes)
    state: dict[str, Any] = {}
    if inspect is not None:
        raw_state = inspect.get("State")
        if isinstance(raw_state, dict):
            state = raw_state
    if exit_json is None and not state:
        return None
    started = _ts(state.get("StartedAt"))
    error = state.get("Error") or None
    error_source = (
        f"{display}/inspect.json:{_line_of(rank_dir / 'inspect.json', 'Error')}" if error else ""
    )
    if exit_json is not None:
        code = exit_json.get("exit_code")
        oom = exit_json.get("oom_killed")
        if oom is None and "OOMKilled" in state:
            oom = bool(state["OOMKilled"])
        return ExitInfo(
            status=exit_json.get("status") or (state.get("Status") if state else None),
            exit_code=int(code) if isinstance(code, int) else None,
            oom_killed=bool(oom) if oom is not None else None,
            signal=exit_json.get("signal"),
            started_at=started,
            finished_at=_ts(exit_json.get("finished_at")) or _ts(state.get("FinishedAt")),
            error=str(error) if error else None,
            source=f"{display}/exit.json:1",
            error_source=error_source,
        )
    status = state.get("Status")
    exited = status in ("exited", "dead") or (status == "created" and bool(error))
    code = state.get("ExitCode")
    return ExitInfo(
        status=str(status) if status else None,
        exit_code=int(code) if exited and isinstance(code, int) else None,
        oom_killed=bool(state.get("OOMKilled")) if "OOMKilled" in state else None,
        started_at=started,
        finished_at=_ts(state.get("FinishedAt")),
        error=str(error) if error else None,
        source=f"{display}/inspect.json:{_line_of(rank_dir / 'inspect.json', 'State')}",
        error_source=error_source,
    )


def _exit_from_events(events: Events, rank: int) -> ExitInfo | None:
    found: ExitInfo | None = None
    for n, ev in events:
        if isinstance(ev, RankExited) and ev.rank == rank:
            found = ExitInfo(
                status="exited",
                exit_code=ev.exit_code,
                oom_killed=ev.oom_killed,
                finished_at=ev.ts,
                source=f"events.jsonl:{n}",
            )
    return found


def _lost_from_events(events: Events, rank: int) -> Evidence | None:
    """When the supervisor lost this rank's node for good (a `node_lost` not followed by a
    `node_back`), as evidence pointing at the event."""
    lost: Evidence | None = None
    for n, ev in events:
        if isinstance(ev, NodeLost) and ev.rank == rank:
            text = f"node_lost: rank {rank}'s node became unreachable ({ev.reason})"
            lost = lost or Evidence(file="events.jsonl", line=n, text=text, ts=ev.ts, rank=rank)
        elif isinstance(ev, NodeBack) and ev.rank == rank:
            lost = None
    return lost


def _started_from_events(events: Events, rank: int) -> float | None:
    for _n, ev in events:
        if isinstance(ev, RankStarted) and ev.rank == rank:
            return ev.ts
    return None


def _read_events(run: Run) -> Events:
    """events.jsonl through its typed records. A line no record describes (torn by a crash
    mid-write, or a newer version's kind) is skipped, never fatal. Silently, as before: the
    fixture runs' events.jsonl hold such lines (`run_created`, `rank_started` without its
    container), so a note would change every golden report (left for their owner)."""
    events: Events = []
    if run.events_path.exists():
        with run.events_path.open(encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                with contextlib.suppress(ValidationError):
                    events.append((n, RECORD.validate_json(line)))
    return events


# -- what the supervisor measured: samples, starts, losses, warnings, its last view -------------


def _samples(path: Path, notes: list[str]) -> list[tuple[int, SampleRow]]:
    """rank-<k>/samples.jsonl as (line, row); a torn or foreign line is skipped."""
    rows: list[tuple[int, SampleRow]] = []
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                with contextlib.suppress(ValidationError):
                    rows.append((n, SampleRow.model_validate_json(line)))
    except OSError as exc:
        notes.append(f"{path.name}: unreadable ({exc}); ignored")
    return rows


def _measured(
    run: Run,
    events: Events,
    recipe: Mapping[str, Any],
    status: Mapping[str, Any] | None,
    ranks: Sequence[int],
    rank_dirs: Mapping[int, Path],
    nodes: Mapping[int, str],
    notes: list[str],
) -> Measured:
    samples = {
        k: _samples(folder / "samples.jsonl", notes)
        for k, folder in rank_dirs.items()
        if (folder / "samples.jsonl").is_file()
    }
    model = recipe.get("model") if isinstance(recipe.get("model"), dict) else {}
    expected = (model or {}).get("expected_bytes_per_rank")
    phases: dict[int, str] = {}
    for view in (status or {}).get("ranks") or ():
        if isinstance(view, dict) and isinstance(view.get("rank"), int):
            phases[view["rank"]] = str(view.get("phase"))
    return measured_from(
        events,
        samples,
        ranks=ranks,
        expected_bytes=expected if isinstance(expected, int) and expected > 0 else None,
        nodes=nodes,
        view_phases=phases,
    )


# -- evidence outside the logs: docker's State.Error, error text in events ------------------------


def _text_hits(text: str, sigs: SignatureSet, evidence: Evidence) -> list[Hit]:
    return [
        Hit(signature=c.id, category=c.sig.category, role=c.sig.role, evidence=evidence)
        for c in sigs.match_text(text)
    ]


def _event_text(ev: Record) -> str:
    """The words of a record worth matching: what the nodes and tools said (a lost node's
    reason, a step's detail) and the watchers' warnings. Not a rank's `last_lines` (they repeat
    the logs), and not the verdict: it is the supervisor's own conclusion ("not ready after
    24 s"), and read as evidence it would name a cause from the answer it is to explain."""
    if isinstance(ev, NodeLost | FollowInterrupted):
        return ev.reason
    if isinstance(ev, WatcherWarning):
        return ev.message
    if isinstance(ev, Step):
        return ev.detail
    return ""


def _event_hits(events: Events, sigs: SignatureSet) -> dict[int | None, list[Hit]]:
    out: dict[int | None, list[Hit]] = {}
    for n, ev in events:
        value = _event_text(ev)
        if not value:
            continue
        rank = getattr(ev, "rank", None)
        evidence = Evidence(file="events.jsonl", line=n, text=value[:2000], ts=ev.ts, rank=rank)
        out.setdefault(rank, []).extend(_text_hits(value, sigs, evidence))
    return out


# -- from scans to rank facts ----------------------------------------------------------------------


def _evidence(line: Any, rank: int) -> Evidence:
    return Evidence(file=line.file, line=line.line, text=line.text, ts=line.ts, rank=rank)


def _rank_facts(
    rank: int,
    scans: Sequence[FileScan],
    sigs: SignatureSet,
    *,
    exit_info: ExitInfo | None,
    extra_hits: Sequence[Hit] = (),
    node: str | None = None,
) -> RankFacts:
    hits: list[Hit] = []
    counts: dict[str, int] = {}
    markers: dict[str, Evidence] = {}
    engines: dict[str, int] = {}
    first: Evidence | None = None
    last: Evidence | None = None
    phase_rank = 0
    exceptions: list[Evidence] = []
    frames: list[str] = []
    stated: list[Evidence] = []
    for scan in scans:
        exceptions.extend(_evidence(line, rank) for line in scan.exceptions)
        stated.extend(_evidence(line, rank) for line in scan.stated)
        frames.extend(scan.frames)
        for m in scan.matches:
            c = sigs.by_id[m.signature]
            hits.append(
                Hit(
                    signature=c.id,
                    category=c.sig.category,
                    role=c.sig.role,
                    evidence=_evidence(m.line, rank),
                )
            )
        for sig_id, n in scan.counts.items():
            counts[sig_id] = counts.get(sig_id, 0) + n
        for name, line in scan.markers.items():
            ev = _evidence(line, rank)
            old = markers.get(name)
            if old is None or (ev.ts is not None and (old.ts is None or ev.ts < old.ts)):
                markers[name] = ev
        for eng, n in scan.engines.items():
            engines[eng] = engines.get(eng, 0) + n
        phase_rank = max(phase_rank, PHASES.index(scan.phase))
        if scan.first is not None:
            ev = _evidence(scan.first, rank)
            if first is None or (ev.ts or 0) < (first.ts or 0):
                first = ev
        if scan.last is not None:
            ev = _evidence(scan.last, rank)
            if last is None or (ev.ts or 0) >= (last.ts or 0):
                last = ev
    for h in extra_hits:
        hits.append(h)
        counts[h.signature] = counts.get(h.signature, 0) + 1
    hits.sort(key=lambda h: (h.evidence.ts is None, h.evidence.ts or 0.0, h.evidence.line))
    engine = max(engines, key=lambda k: engines[k]) if engines else None
    return RankFacts(
        rank=rank,
        node=node,
        files=tuple(s.display for s in scans),
        lines=sum(s.lines for s in scans),
        bytes=sum(s.size for s in scans),
        phase=PHASES[phase_rank],
        engine=engine,
        markers=markers,
        exceptions=tuple(exceptions),
        exception_frames=tuple(frames),
        stated=tuple(stated),
        hits=tuple(hits),
        counts=counts,
        first_line=first,
        last_line=last,
        exit=exit_info,
    )


def _nodes(manifest: Mapping[str, Any] | None, status: Mapping[str, Any] | None) -> dict[int, str]:
    """rank -> node name, from wherever the run recorded it (status.json, the launch plan)."""
    found: dict[int, str] = {}

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            rank, node = value.get("rank"), value.get("node") or value.get("host")
            if isinstance(rank, int) and isinstance(node, str):
                found.setdefault(rank, node)
            for v in value.values():
                visit(v)
        elif isinstance(value, list):
            for v in value:
                visit(v)

    visit(status or {})
    visit((manifest or {}).get("plans") or {})
    return found


def _year(ts: float | None) -> int | None:
    return datetime.fromtimestamp(ts, UTC).year if ts is not None else None


def collect_run(run: Run, sigs: SignatureSet, *, workers: int | None = None) -> Collected:
    """Everything a run directory says: manifest, verdict, events, and each rank's files."""
    notes: list[str] = []
    manifest = _read_json(run.manifest_path, notes)
    status = _read_json(run.status_path, notes)
    verdict = _verdict_document(run, notes)
    events = _read_events(run)
    if verdict is None:
        for _n, ev in events:
            if isinstance(ev, VerdictRecord):
                verdict = ev.model_dump(mode="json", exclude={"kind"})
    # `cluster stop` records when it began: what ranks print after that is the stop's doing.
    stopped_at = min((ev.began for _n, ev in events if isinstance(ev, Stopped)), default=None)
    warnings = tuple(
        Evidence(file="events.jsonl", line=n, text=ev.message[:2000], ts=ev.ts, rank=ev.rank)
        for n, ev in events
        if isinstance(ev, WatcherWarning)
    )
    recipe = (manifest or {}).get("recipe") or {}
    created = _ts((manifest or {}).get("created"))
    if created is None:
        try:
            created = (
                datetime.strptime(run.id.split("-")[0], "%Y%m%dT%H%M%SZ")
                .replace(tzinfo=UTC)
                .timestamp()
            )
        except ValueError:
            created = None

    rank_dirs: dict[int, Path] = {}
    for entry in run.dir.iterdir() if run.dir.is_dir() else ():
        if entry.is_dir() and (m := _RANK_DIR.match(entry.name)):
            rank_dirs[int(m.group(1))] = entry
    expected = recipe.get("nodes") if isinstance(recipe.get("nodes"), int) else 0
    ranks = sorted(set(rank_dirs) | set(range(int(expected or 0))))
    jobs: list[ScanJob] = []
    owner: list[int] = []
    year = _year(created)
    for k in ranks:
        folder = rank_dirs.get(k)
        if folder is None:
            continue
        for log in rank_logs(folder):
            jobs.append(ScanJob(log, f"{folder.name}/{log.name}", year))
            owner.append(k)
    scans = scan_files(jobs, sigs, workers=workers)
    by_rank: dict[int, list[FileScan]] = {}
    for k, scan in zip(owner, scans, strict=True):
        by_rank.setdefault(k, []).append(scan)
    event_hits = _event_hits(events, sigs)
    nodes = _nodes(manifest, status)
    facts: list[RankFacts] = []
    for k in ranks:
        folder = rank_dirs.get(k)
        exit_info = _exit_from_files(folder, folder.name, notes) if folder is not None else None
        if exit_info is None:
            exit_info = _exit_from_events(events, k)
        started = _started_from_events(events, k)
        if exit_info is not None and exit_info.started_at is None and started is not None:
            exit_info = exit_info.model_copy(update={"started_at": started})
        extra = list(event_hits.get(k, []))
        lost_at = _lost_from_events(events, k)
        if exit_info is not None and exit_info.error:
            where_file, _, where_line = (exit_info.error_source or exit_info.source).rpartition(":")
            evidence = Evidence(
                file=where_file,
                line=int(where_line or 1),
                text=exit_info.error[:2000],
                ts=exit_info.finished_at or exit_info.started_at,
                rank=k,
            )
            extra.extend(_text_hits(exit_info.error, sigs, evidence))
        facts.append(
            _rank_facts(
                k,
                by_rank.get(k, []),
                sigs,
                exit_info=exit_info,
                extra_hits=extra,
                node=nodes.get(k),
            ).model_copy(update={"lost": lost_at})
        )
    # the nodes' kernel logs (issue 28): each line joins the rank it concerns, on our clock
    from orchestrator.postmortem.kernel_hits import with_kernel_evidence

    facts, kernel_notes = with_kernel_evidence(run.dir, facts, sigs)
    notes.extend(kernel_notes)
    env = recipe.get("env") if isinstance(recipe.get("env"), dict) else {}
    engine = recipe.get("engine") if isinstance(recipe.get("engine"), str) else None
    if engine is None:
        engine = _majority(f.engine for f in facts)
    run_facts = RunFacts(
        kind="run",
        run_id=run.id,
        path=str(run.dir),
        engine=engine,
        recipe=recipe.get("name") if isinstance(recipe.get("name"), str) else None,
        recipe_args=tuple(_flatten(recipe.get("args") or [])),
        recipe_env={str(k): str(v) for k, v in (env or {}).items()},
        created=created,
        supervisor_verdict=verdict,
        stopped_at=stopped_at,
        warnings=warnings,
        measured=_measured(run, events, recipe, status, ranks, rank_dirs, nodes, notes),
        notes=tuple(
            notes
            + [
                f"run-level event: {h.signature} ({h.evidence.where})"
                for h in event_hits.get(None, [])
            ]
        ),
    )
    return Collected(run_facts, facts)


def _majority(values: Iterable[str | None]) -> str | None:
    counts: dict[str, int] = {}
    for v in values:
        if v:
            counts[v] = counts.get(v, 0) + 1
    return max(counts, key=lambda k: counts[k]) if counts else None


def assign_ranks(paths: Sequence[Path]) -> dict[int, list[Path]]:
    """Ranks for loose log files: the one a name states, else the next free one in given order."""
    named: list[tuple[Path, int | None]] = [(p, rank_from_name(p)) for p in paths]
    taken = {r for _, r in named if r is not None}
    out: dict[int, list[Path]] = {}
    free = (i for i in range(len(paths) + len(taken) + 1) if i not in taken)
    for path, rank in named:
        k = rank if rank is not None else next(free)
        out.setdefault(k, []).append(path)
    return dict(sorted(out.items()))


def collect_logs(
    paths: Sequence[Path], sigs: SignatureSet, *, workers: int | None = None
) -> Collected:
    """Loose log files (one per rank, pasted into a ticket): no exit states, only words."""
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ConfigError(
            f"no such log file: {missing[0]}",
            where="cluster postmortem --logs",
            hint="give the rank log files, e.g. rank-0.log rank-1.log",
            more=tuple(f"no such log file: {m}" for m in missing[1:]),
        )
    assigned = assign_ranks(paths)
    jobs: list[ScanJob] = []
    owner: list[int] = []
    for k, files in assigned.items():
        for p in files:
            year = datetime.fromtimestamp(p.stat().st_mtime, UTC).year
            jobs.append(ScanJob(p, str(p), year, tidy=True))
            owner.append(k)
    scans = scan_files(jobs, sigs, workers=workers)
    by_rank: dict[int, list[FileScan]] = {}
    for k, scan in zip(owner, scans, strict=True):
        by_rank.setdefault(k, []).append(scan)
    facts = [_rank_facts(k, by_rank.get(k, []), sigs, exit_info=None) for k in assigned]
    notes: list[str] = []
    if len(paths) == 1:
        facts, split = split_by_rank_tags(facts[0])
        if split:
            notes.append(
                "one file with several ranks' lines: matches attributed to the rank their "
                "line names ([rankN], TPN, rank=N); milestones stay with the file"
            )
    common = Path(_common_dir(paths))
    run_facts = RunFacts(
        kind="logs",
        path=str(common),
        engine=_majority(f.engine for f in facts),
        notes=tuple(
            [f"rank {k}: {', '.join(str(p) for p in files)}" for k, files in assigned.items()]
            + notes
        ),
    )
    return Collected(run_facts, facts)


# The rank a merged log's line names: torch's `[rank3]:` / `[Rank 3]`, SGLang's `TP3]` (`DP0 TP3`),
# vLLM's worker prefixes `(VllmWorker rank=3 pid=...)`, `(Worker_TP3 pid=...)`.
_RANK_TAG = re.compile(r"\[[Rr]ank ?(\d+)\]|\bTP(\d+)\]|\bTP(\d+) |\brank=(\d+)\b|Worker_TP(\d+)\b")


def rank_tag(text: str) -> int | None:
    """The rank a line names in its prefix, if any."""
    m = _RANK_TAG.search(text[:200])
    if m is None:
        return None
    return int(next(g for g in m.groups() if g is not None))


def split_by_rank_tags(facts: RankFacts) -> tuple[list[RankFacts], bool]:
    """One file holding several ranks' lines: give each match to the rank its line names.

    Only matches move; milestones, line counts and the last line stay with the file's rank.
    Returns the ranks and whether anything moved.
    """
    moved: dict[int, list[Hit]] = {}
    kept: list[Hit] = []
    for h in facts.hits:
        tag = rank_tag(h.evidence.text)
        if tag is None or tag == facts.rank:
            kept.append(h)
        else:
            ev = h.evidence.model_copy(update={"rank": tag})
            moved.setdefault(tag, []).append(h.model_copy(update={"evidence": ev}))
    if not moved:
        return [facts], False
    gone: dict[str, int] = {}
    for hits in moved.values():
        for h in hits:
            gone[h.signature] = gone.get(h.signature, 0) + 1
    left = {
        sig: max(n - gone.get(sig, 0), sum(1 for h in kept if h.signature == sig))
        for sig, n in facts.counts.items()
    }
    out = [facts.model_copy(update={"hits": tuple(kept), "counts": left})]
    for tag, hits in sorted(moved.items()):
        counts: dict[str, int] = {}
        for h in hits:
            counts[h.signature] = counts.get(h.signature, 0) + 1
        out.append(
            RankFacts(
                rank=tag,
                files=facts.files,
                lines=len(hits),
                phase="starting",
                engine=facts.engine,
                hits=tuple(hits),
                counts=counts,
                last_line=hits[-1].evidence,
            )
        )
    merged: dict[int, RankFacts] = {}
    for f in out:
        if f.rank in merged:  # the file's own rank also tagged: fold its hits in
            base = merged[f.rank]
            merged[f.rank] = base.model_copy(update={"hits": base.hits + f.hits})
        else:
            merged[f.rank] = f
    return [merged[k] for k in sorted(merged)], True


def _common_dir(paths: Sequence[Path]) -> str:
    parents = [str(p.resolve().parent) for p in paths]
    if not parents:
        return "."
    prefix = parents[0]
    for other in parents[1:]:
        while not (other + "/").startswith(prefix.rstrip("/") + "/") and "/" in prefix.strip("/"):
            prefix = prefix.rsplit("/", 1)[0] or "/"
    return prefix
