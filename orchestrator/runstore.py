"""Runs on disk: everything observed lands here first, so the postmortem works from this folder.

    <runs>/<run-id>/           0700; id YYYYmmddTHHMMSSZ-<6 hex> (valid in container names)
      manifest.json            resolved recipe, inventory snapshot and its hash, plans, versions
      verdict.json             how it ended; written once (run_files.py types both)
      events.jsonl             append-only, one typed event per line
      status.json              the latest view, replaced atomically
      lock.json                the one controller that writes this run, with a heartbeat: taken
                               when the folder is made, held through preflight, push, start and
                               supervision
      stop-request.json        `cluster stop` asks the run's controller to end (it writes STOPPED)
      rank-<k>/                per rank: preserved streams, inspect output, samples

`<runs>` is the inventory's `cluster_runs_dir`, else `$XDG_STATE_HOME/cluster/runs`, so every
terminal finds the same runs. Every writer goes through `redact`: secrets never reach the disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import socket
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from orchestrator.errors import RunLocked, RunStoreError
from orchestrator.models.events import RECORD, Record
from orchestrator.paths import state_dir
from orchestrator.redact import REDACTED, is_secret_name, redact

if TYPE_CHECKING:  # run_files imports the plans; most commands never read a manifest
    from orchestrator.models.bench import BenchReport
    from orchestrator.run_files import RunManifest, Verdict

BENCH_FILE = "bench.json"  # the last `cluster bench` (serving_bench writes it)

__all__ = ["REDACTED", "Run", "RunLock", "RunStore", "VerdictExists", "is_secret_name", "redact"]

RUN_ID_RE = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{6}$")
# A supervisor writes its heartbeat every HEARTBEAT_S; a lock older than STALE_S is dead.
HEARTBEAT_S = 2.0
STALE_S = 15.0


# -- run ids and folders --------------------------------------------------------------------


def new_run_id(now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def default_runs_dir() -> Path:
    return state_dir() / "runs"


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file in the same folder and rename: readers never see half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _json(value: Any) -> str:
    return json.dumps(redact(value), indent=2, default=str) + "\n"


class _InRunDir:
    """A file every run directory holds, by name (`run.manifest_path`: `run.dir/manifest.json`);
    one descriptor rather than a property per file."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, run: Run, owner: type[Run] | None = None) -> Path:
        return run.dir / self.name


@dataclass(frozen=True)
class Run:
    """One run directory. Cheap to construct; every method touches the disk it names."""

    id: str
    dir: Path

    manifest_path = _InRunDir("manifest.json")
    verdict_path = _InRunDir("verdict.json")
    events_path = _InRunDir("events.jsonl")
    status_path = _InRunDir("status.json")
    lock_path = _InRunDir("lock.json")
    stop_request_path = _InRunDir("stop-request.json")

    def rank_dir(self, rank: int) -> Path:
        path = self.dir / f"rank-{rank}"
        path.mkdir(mode=0o700, exist_ok=True)
        return path

    def attempt_dir(self, attempt: int) -> Path:
        """Where a serving restart keeps attempt `attempt`'s logs and inspect output (created
        by the serving watch before the group is started again)."""
        return self.dir / f"attempt-{attempt}"

    def kept_attempts(self) -> list[Path]:
        """The earlier attempts a serving restart kept, in order (none for a run never
        restarted)."""
        found = [p for p in self.dir.glob("attempt-*") if p.is_dir() and p.name[8:].isdigit()]
        return sorted(found, key=lambda p: int(p.name[8:]))  # attempt-10 after attempt-2

    def write_manifest(self, manifest: RunManifest) -> None:
        atomic_write_text(self.manifest_path, _json(manifest.model_dump(mode="json")))

    def read_manifest(self) -> dict[str, Any]:
        """The manifest as it lies, untyped: only for the postmortem, which must read whatever a
        damaged, hand-made or foreign run left. Everyone else: `manifest()`."""
        return _read_json(self.manifest_path)

    def manifest(self) -> RunManifest:
        """The typed manifest (an earlier release's shape upgraded on the way)."""
        from orchestrator.run_files import RECORDED, RunManifest, UpgradeError, upgrade_manifest

        if not self.manifest_path.exists():
            raise RunStoreError("the run has no manifest.json", where=str(self.dir))
        try:
            return RunManifest.model_validate(
                upgrade_manifest(_read_json(self.manifest_path)), context=RECORDED
            )
        except (ValidationError, UpgradeError) as exc:
            raise RunStoreError(
                f"manifest.json does not read: {_first_error(exc)}",
                where=str(self.dir),
                hint="a run written by a newer `cluster`? `cluster postmortem` still reads it",
            ) from exc

    def has_launch_plan(self) -> bool:
        """Ranks were planned (preflight passed): the manifest holds the launch plan."""
        return self.manifest_path.exists() and self.manifest().plans.launch is not None

    def verdict(self) -> Verdict | None:
        """How the run ended; None while it has no verdict yet."""
        from orchestrator.run_files import UpgradeError, Verdict, upgrade_verdict

        if not self.verdict_path.exists():
            return None
        try:
            return Verdict.model_validate(upgrade_verdict(_read_json(self.verdict_path)))
        except (ValidationError, UpgradeError) as exc:
            raise RunStoreError(
                f"verdict.json does not read: {_first_error(exc)}", where=str(self.dir)
            ) from exc

    def write_verdict(self, verdict: Verdict) -> Verdict:
        """Written once. A serving outcome (READY, SMOKE_FAILED) may be followed by the one
        that ends the serving (an incident, STOPPED); any other verdict is final, and a second
        writer gets `VerdictExists` (two controllers on one run must never both decide)."""
        text = _json(verdict.document())  # exit_code and category beside, for scripts
        current = self.verdict() if self.verdict_path.exists() else None
        if current is not None and not current.outcome.serving:
            raise VerdictExists(
                f"the run already has its verdict {current.outcome.value}; "
                f"{verdict.outcome.value} was not written",
                where=str(self.dir),
            )
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".verdict.json.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            if current is None:
                try:  # link, not rename: fails if another writer got there first
                    os.link(tmp, self.verdict_path)
                except FileExistsError:
                    raise VerdictExists(
                        f"another writer decided this run first; {verdict.outcome.value} was "
                        "not written",
                        where=str(self.dir),
                    ) from None
            else:
                os.replace(tmp, self.verdict_path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return verdict

    def bench_report(self) -> BenchReport:
        """The last `cluster bench` of this run (bench.json), typed."""
        from orchestrator.models.bench import BenchReport

        path = self.dir / BENCH_FILE
        if not path.exists():
            raise RunStoreError(
                "this run has no bench results",
                where=str(self.dir),
                hint=f"`cluster bench {self.id}` measures it while it serves",
            )
        try:
            return BenchReport.model_validate_json(path.read_text())
        except (ValidationError, ValueError) as exc:
            raise RunStoreError(
                f"{BENCH_FILE} does not parse: {str(exc).splitlines()[0]}", where=str(path)
            ) from None

    def bench_report_if_any(self) -> BenchReport | None:
        try:
            return self.bench_report()
        except RunStoreError:
            return None

    # -- stop requests ------------------------------------------------------------------------

    def request_stop(self, by: str) -> None:
        """Ask the run's controller to end (it writes the STOPPED verdict itself)."""
        atomic_write_text(
            self.stop_request_path,
            json.dumps(
                {"by": by, "pid": os.getpid(), "host": socket.gethostname(), "at": time.time()}
            ),
        )

    def stop_requested(self) -> bool:
        return self.stop_request_path.exists()

    def append_event(self, event: Record) -> None:
        """One record (models/events.py) as one JSON line, appended with a single write so
        concurrent readers see whole lines."""
        line = json.dumps(redact(event), default=str, separators=(",", ":")) + "\n"
        fd = os.open(self.events_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)

    def events(self) -> Iterator[Record]:
        """Replay the records. A torn last line (a crash mid-write) is skipped, not fatal, and
        so is a line no record of this version describes (a newer version's kind)."""
        if not self.events_path.exists():
            return
        with self.events_path.open(encoding="utf-8") as fh:
            for line in fh:
                with contextlib.suppress(ValidationError):
                    yield RECORD.validate_json(line)

    def write_status(self, status: Mapping[str, Any] | BaseModel) -> None:
        atomic_write_text(self.status_path, _json(status))

    def read_status(self) -> dict[str, Any] | None:
        return _read_json(self.status_path) if self.status_path.exists() else None

    def write_text(self, relpath: str, text: str) -> Path:
        """A file under the run (e.g. rank-3/inspect.json); JSON-looking content is redacted."""
        path = self.dir / relpath
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write_text(path, text)
        return path

    def write_json(self, relpath: str, value: Any) -> Path:
        return self.write_text(relpath, _json(value))

    # -- the supervisor lock ----------------------------------------------------------------

    def lock_holder(self) -> dict[str, Any] | None:
        if not self.lock_path.exists():
            return None
        try:
            return _read_json(self.lock_path)
        except RunStoreError:
            return None

    def supervisor_alive(self, now: float | None = None) -> bool:
        """A supervisor is alive when its heartbeat is fresh (and, on this host, its pid runs)."""
        holder = self.lock_holder()
        if holder is None:
            return False
        age = (now or time.time()) - float(holder.get("heartbeat", 0))
        if age > STALE_S:
            return False
        if holder.get("host") == socket.gethostname():
            return _pid_alive(int(holder.get("pid", -1)))
        return True

    def acquire_lock(self, owner: str = "supervisor") -> RunLock:
        """Take the run for this process; `RunLocked` when another live controller holds it."""
        if self.supervisor_alive():
            holder = self.lock_holder() or {}
            since = holder.get("started")
            when = (
                datetime.fromtimestamp(float(since), UTC).strftime(" since %H:%M:%S UTC")
                if isinstance(since, (int, float))
                else ""
            )
            raise RunLocked(
                f"run {self.id} is held by its {holder.get('owner', 'controller')} "
                f"(pid {holder.get('pid')} on {holder.get('host')}{when})",
                where=str(self.dir),
                hint="`cluster status` watches it; `cluster stop` ends it; `cluster supervise` "
                "takes over only once that process is gone",
            )
        lock = RunLock(self, owner)
        lock.beat()
        return lock


class RunLock:
    """Held by the one process that writes a run; `beat()` every HEARTBEAT_S keeps it alive
    (`held()` does it in the background, so preflight, pushes and starts hold the run too)."""

    def __init__(self, run: Run, owner: str) -> None:
        self.run = run
        self.owner = owner
        self.started = time.time()

    def beat(self) -> None:
        atomic_write_text(
            self.run.lock_path,
            json.dumps(
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "owner": self.owner,
                    "started": self.started,
                    "heartbeat": time.time(),
                }
            ),
        )

    def handover(self, owner: str) -> None:
        """The same process holds on under another name (the boot hands to its supervisor)."""
        self.owner = owner
        self.beat()

    @contextlib.asynccontextmanager
    async def held(self, on_stop: Callable[[], None] | None = None) -> AsyncIterator[RunLock]:
        """Beat every HEARTBEAT_S while the block runs, release at its end. A `cluster stop`
        request (stop-request.json) calls `on_stop` once, from the heartbeat."""
        asked = False

        async def heartbeat() -> None:
            nonlocal asked
            while True:
                # A request already there (made before the block began) is heard at once.
                if not asked and on_stop is not None and self.run.stop_requested():
                    asked = True
                    on_stop()
                await asyncio.sleep(HEARTBEAT_S)
                self.beat()

        task = asyncio.create_task(heartbeat())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.release()

    def release(self) -> None:
        holder = self.run.lock_holder()
        if holder and holder.get("pid") == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                self.run.lock_path.unlink()


class VerdictExists(RunStoreError):
    """A second verdict for a run that has a final one."""


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        return f"{where}: {err['msg']}" if where else str(err["msg"])
    return str(exc)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RunStoreError(f"cannot read {path.name}: {exc}", where=str(path.parent)) from exc
    if not isinstance(data, dict):
        raise RunStoreError(f"{path.name} is not a JSON object", where=str(path.parent))
    return data


RUN_FILES = ("manifest.json", "events.jsonl", "status.json", "verdict.json", "preflight.json")


def looks_like_run(path: Path) -> bool:
    """A folder `cluster` wrote a run into (or a copy of one), not any folder (`--run /etc`)."""
    if any((path / name).is_file() for name in RUN_FILES):
        return True
    try:
        return any(
            p.name.startswith("rank-") and p.name[5:].isdigit() and p.is_dir()
            for p in path.iterdir()
        )
    except OSError:
        return False


class RunStore:
    """All runs under one folder."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or default_runs_dir()).expanduser()

    def create(self, now: datetime | None = None) -> Run:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        for _ in range(5):
            run_id = new_run_id(now)
            path = self.root / run_id
            try:
                path.mkdir(mode=0o700)
            except FileExistsError:
                continue
            return Run(run_id, path)
        raise RunStoreError("could not allocate a unique run id", where=str(self.root))

    def open(self, ref: str | Path) -> Run:
        """A run by id (under this store) or by path (a run copied from elsewhere)."""
        path = Path(ref)
        if not path.is_dir():
            path = self.root / str(ref)
        if not path.is_dir():
            raise RunStoreError(
                f"no run {ref}",
                where=str(self.root),
                hint="`cluster runs` lists the runs; a copied run can be given by its path",
            )
        named_here = RUN_ID_RE.match(path.name) and path.resolve().parent == self.root.resolve()
        if not (named_here or looks_like_run(path)):
            raise RunStoreError(
                "not a run directory (no manifest.json, events.jsonl, status.json or rank-N/)",
                where=str(path),
                hint="`cluster runs` lists the runs; --logs FILE... reads loose log files",
            )
        return Run(path.name, path)

    def runs(self) -> list[Run]:
        """Every run, newest first (run ids sort by time)."""
        if not self.root.is_dir():
            return []
        found = [
            Run(p.name, p) for p in self.root.iterdir() if p.is_dir() and RUN_ID_RE.match(p.name)
        ]
        return sorted(found, key=lambda r: r.id, reverse=True)

    def latest(self) -> Run | None:
        runs = self.runs()
        return runs[0] if runs else None


def run_started_at(run: Run) -> float:
    """The run's creation time (epoch seconds), read from its id."""
    stamp = run.id.split("-")[0]
    return datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
