"""Read what a run kept: summaries of runs, and rank logs merged across ranks by timestamp."""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from orchestrator.dialects.timestamps import line_timestamp_ns, timestamp_ns
from orchestrator.errors import RunStoreError
from orchestrator.runstore import Run, RunStore
from orchestrator.supervisor.follower import split_lines


class RunSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    dir: str
    recipe: str | None
    started: str
    outcome: str | None
    duration_s: float | None
    supervisor_alive: bool
    restarts: int = 0  # serving restarts of the group (each earlier attempt kept in attempt-N/)
    problem: str | None = None  # why the run's files could not be read, when they could not


def run_started(run: Run) -> datetime:
    return datetime.strptime(run.id.split("-")[0], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


def summarize(run: Run) -> RunSummary:
    """What the run's files say; a run whose files do not read is still listed, with why."""
    try:
        return _summarize(run)
    except (RunStoreError, OSError, ValueError, AttributeError, TypeError) as exc:
        why = exc.line() if isinstance(exc, RunStoreError) else f"{type(exc).__name__}: {exc}"
        return RunSummary(
            run_id=run.id,
            dir=str(run.dir),
            recipe=None,
            started=run_started(run).isoformat(),
            outcome=None,
            duration_s=None,
            supervisor_alive=False,
            problem=why[:200],
        )


def _summarize(run: Run) -> RunSummary:
    manifest = run.manifest() if run.manifest_path.exists() else None
    status = run.read_status() or {}
    verdict = run.verdict()
    outcome = verdict.outcome.value if verdict else status.get("outcome")
    started = run_started(run)
    updated = status.get("updated")
    recipe = manifest.recipe.name if manifest else None
    return RunSummary(
        run_id=run.id,
        dir=str(run.dir),
        recipe=recipe or status.get("recipe"),
        started=started.isoformat(),
        outcome=outcome,
        duration_s=(float(updated) - started.timestamp()) if updated else None,
        supervisor_alive=run.supervisor_alive(),
        restarts=len(run.kept_attempts()),
    )


def list_runs(store: RunStore) -> list[RunSummary]:
    return [summarize(r) for r in store.runs()]


def rank_log_paths(run: Run) -> dict[int, list[Path]]:
    found: dict[int, list[Path]] = {}
    for d in sorted(run.dir.glob("rank-*")):
        try:
            k = int(d.name.split("-", 1)[1])
        except ValueError:
            continue
        found[k] = [d / "stdout.log", d / "stderr.log"]
    return dict(sorted(found.items()))


def _lines(path: Path, rank: int, since_ns: int) -> Iterator[tuple[int, int, str]]:
    if not path.exists():
        return
    for raw in split_lines(path.read_bytes()):
        ns = line_timestamp_ns(raw)
        if ns >= since_ns:
            yield ns, rank, raw.decode("utf-8", errors="replace").rstrip("\n")


def merged_lines(run: Run, ranks: list[int], since: str | None = None) -> Iterator[tuple[int, str]]:
    """(rank, raw line) for the chosen ranks, both streams, in timestamp order."""
    since_ns = timestamp_ns(since) if since else 0
    paths = rank_log_paths(run)
    streams = [_lines(p, k, since_ns) for k in ranks for p in paths.get(k, [])]
    for _ns, rank, line in heapq.merge(*streams):
        yield rank, line


def follow_lines(run: Run, ranks: list[int], poll_s: float = 0.5) -> Iterator[tuple[int, str]]:
    """Print what arrives in the preserved files from now on (`cluster logs -f`)."""
    paths = rank_log_paths(run)
    offsets = {p: p.stat().st_size if p.exists() else 0 for k in ranks for p in paths.get(k, [])}
    owner = {p: k for k in ranks for p in paths.get(k, [])}
    partial: dict[Path, bytes] = dict.fromkeys(offsets, b"")
    while True:
        for p in offsets:
            if not p.exists():
                continue
            with p.open("rb") as fh:
                fh.seek(offsets[p])
                data = fh.read()
            offsets[p] += len(data)
            *done, partial[p] = (partial[p] + data).split(b"\n")
            for raw in done:
                yield owner[p], raw.decode("utf-8", errors="replace")
        time.sleep(poll_s)
