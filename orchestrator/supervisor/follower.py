"""Follow one rank's output into the run directory, raw, before any parsing.

`rank-<k>/stdout.log` and `stderr.log` receive the lines exactly as the node's runtime prints
them (`docker logs --timestamps`). A lost stream reconnects with `--since` the last timestamp
kept and drops what it already has, so resuming leaves no gap and no duplicate. At the end,
`reconcile()` compares the preserved copy with the node's whole log: bytes that had to be
repaired are counted and reported (they should be 0), never silently papered over.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from orchestrator.dialects.timestamps import line_timestamp_ns
from orchestrator.errors import ClusterError
from orchestrator.logging import get_logger
from orchestrator.runtime.base import STREAMS, RankSpec, Runtime

log = get_logger(__name__)

# (rank, stream, texts): a batch of lines as they arrived, each without its trailing newline.
OnLines = Callable[[int, str, list[str]], None]
OnTrouble = Callable[[int, str], None]  # (rank, reason) when the stream breaks
BACKOFF_S = (0.5, 1.0, 2.0, 4.0)
CUT_MARK = b"[cluster] log cut:"


def split_lines(data: bytes) -> list[bytes]:
    """Lines ending in \n, kept with it (bytes.splitlines would also cut at tqdm's \r)."""
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


@dataclass
class _Cursor:
    """Where a stream's preserved copy ends: the last timestamp, and the lines kept at it."""

    last_ns: int = 0
    at_last: set[bytes] = field(default_factory=set)
    bytes_kept: int = 0
    lines_kept: int = 0
    reopened: bool = True  # the stream was just (re)opened: its first lines may repeat

    def _kept(self, raw: bytes) -> bool:
        ns = line_timestamp_ns(raw)
        return ns < self.last_ns or (ns == self.last_ns and raw in self.at_last)

    def admit(self, raws: list[bytes]) -> list[bytes]:
        """The lines of a batch not already kept, and the cursor moved past them.

        Only a stream (re)opened with `--since` repeats lines, and then as its first ones
        (`--since` is inclusive): the repeats are a prefix, found by timestamp. The rest is new
        whatever its stamps say, so a node clock stepping back loses nothing. Only the batch's
        last stamp (and the lines that share it) is then read: at serving volume a batch is
        ~100 lines, and parsing every stamp was a sizeable share of following them."""
        skip = 0
        while self.reopened and skip < len(raws) and self._kept(raws[skip]):
            skip += 1
        new = raws[skip:] if skip else raws
        if not new:
            return new
        self.reopened = False
        last = line_timestamp_ns(new[-1])
        same = {new[-1]}
        for raw in reversed(new[:-1]):
            if line_timestamp_ns(raw) != last:
                break
            same.add(raw)
        if last == self.last_ns:
            self.at_last |= same
        else:
            self.last_ns, self.at_last = last, same
        return new


@dataclass(eq=False)
class Follower:
    runtime: Runtime
    spec: RankSpec
    dir: Path  # the rank's folder in the run directory
    on_lines: OnLines
    on_trouble: OnTrouble | None = None
    # Per stream, the most bytes the preserved copy keeps (the serving watch sets it: a rank
    # that serves for a week must not fill the controller's disk). Beyond it the file keeps its
    # head and its newest tail, with a line saying what was cut between them.
    bound: int | None = None
    cursors: dict[str, _Cursor] = field(init=False)
    reconnects: int = field(default=0, init=False)
    repaired_bytes: int = field(default=0, init=False)
    # Printed after following stopped, added at reconciliation:
    tail_bytes: int = field(default=0, init=False)
    cut_bytes: int = field(default=0, init=False)  # dropped from the middle to keep `bound`
    _files: dict[str, BinaryIO] = field(init=False)

    def __post_init__(self) -> None:
        self.cursors = {s: _Cursor() for s in STREAMS}
        # Unbuffered: a line is on disk the moment it is accepted, so a controller killed mid-boot
        # loses nothing it had received (and status/postmortem see it at once).
        self._files = {s: (self.dir / f"{s}.log").open("ab", buffering=0) for s in STREAMS}
        self._resume_from_disk()

    def _resume_from_disk(self) -> None:
        """After a controller restart, pick up where the preserved copy ends (reattach)."""
        for stream in STREAMS:
            path = self.dir / f"{stream}.log"
            cursor = self.cursors[stream]
            if not path.exists():
                continue
            data = path.read_bytes()
            cursor.bytes_kept = len(data)
            if (at := data.find(CUT_MARK)) >= 0:  # a bounded copy: its cuts so far
                words = data[at + len(CUT_MARK) :].split(maxsplit=1)
                if words and words[0].isdigit():
                    self.cut_bytes = max(self.cut_bytes, int(words[0]))
            lines = split_lines(data)
            cursor.lines_kept = len(lines)
            cursor.admit(lines)

    def since(self) -> str | None:
        """The earliest last-kept timestamp among streams that have one (`--since` is inclusive)."""
        from datetime import UTC, datetime

        kept = [c.last_ns for c in self.cursors.values() if c.last_ns]
        if not kept:
            return None
        ns = min(kept)
        secs, frac = divmod(ns, 1_000_000_000)
        return datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"

    def accept(self, stream: str, raws: list[bytes]) -> int:
        """Keep the lines not already kept (one write), hand them on; how many were new."""
        cursor = self.cursors[stream]
        new = cursor.admit(raws)
        if not new:
            return 0
        data = b"".join(new)
        self._files[stream].write(data)
        cursor.bytes_kept += len(data)
        cursor.lines_kept += len(new)
        # One decode for the batch: every line ends in \n, so no character spans two lines.
        texts = data.decode("utf-8", errors="replace").split("\n")
        texts.pop()  # after the last \n
        self.on_lines(self.spec.rank, stream, texts)
        if self.bound is not None and cursor.bytes_kept > self.bound:
            self._cut(stream)
        return len(new)

    def _cut(self, stream: str) -> None:
        """Keep the first half of `bound` and the newest quarter, whole lines, and a marker
        line between them; one rewrite per quarter of `bound` appended (amortised)."""
        assert self.bound is not None
        path = self.dir / f"{stream}.log"
        data = path.read_bytes()
        head = data[: self.bound // 2]
        head = head[: head.rfind(b"\n") + 1]
        tail = data[-(self.bound // 4) :]
        tail = tail[tail.find(b"\n") + 1 :]
        middle = data[len(head) : len(data) - len(tail)]
        if not middle:
            return
        if middle.startswith(CUT_MARK):  # the previous cut's marker: replaced, not counted
            middle = middle[middle.find(b"\n") + 1 :]
        lines = middle.count(b"\n")
        self.cut_bytes += len(middle)
        marker = (
            CUT_MARK
            + (
                f" {self.cut_bytes} bytes in all ({lines} lines this time) cut here to keep this "
                f"file under {self.bound} bytes: the head and the newest tail are kept\n"
            ).encode()
        )
        tmp = path.with_name(f".{path.name}.cut")
        tmp.write_bytes(head + marker + tail)
        self._files[stream].close()
        tmp.replace(path)
        self._files[stream] = path.open("ab", buffering=0)
        self.cursors[stream].bytes_kept = len(head) + len(marker) + len(tail)

    async def run(self, stop: asyncio.Event) -> None:
        """Follow until the rank's output ends, reconnecting on errors; or until `stop`."""
        attempt = 0
        while not stop.is_set():
            try:
                for cursor in self.cursors.values():
                    cursor.reopened = True
                async with contextlib.aclosing(
                    self.runtime.follow(self.spec, self.since())
                ) as batches:
                    async for stream, raws in batches:
                        self.accept(stream, raws)
                        attempt = 0
                        if stop.is_set():
                            break
                state = await self.runtime.state(self.spec)
                if not state.running:
                    return
                # `docker logs -f` can end while the container lives (daemon restart): resume.
            except ClusterError as exc:
                self.reconnects += 1
                if self.on_trouble:
                    self.on_trouble(self.spec.rank, exc.line())
                log.info("follower reconnecting", rank=self.spec.rank, error=exc.line())
            delay = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
            attempt += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    async def reconcile(self) -> int:
        """Compare the preserved copy with the node's whole log; repair and count the gap.

        A missing line stamped at or before the newest line followed (either stream: one
        `docker logs -f` carries both) is a gap: repaired and counted. Lines stamped after it
        were printed once following had stopped (a rank that goes on after a verdict): they
        are added too, and counted apart (`tail_bytes`), as they are no loss. A copy cut to
        its bound is not compared (its middle is gone on purpose): follow.json says so."""
        if self.cut_bytes:
            self.write_bookkeeping(unreconciled=f"bounded copy: {self.cut_bytes} bytes cut")
            return 0
        full = await self.runtime.full_logs(self.spec)
        followed_to = max(c.last_ns for c in self.cursors.values())
        repaired = 0
        for stream in STREAMS:
            path = self.dir / f"{stream}.log"
            preserved = path.read_bytes() if path.exists() else b""
            have: dict[bytes, int] = {}
            for line in split_lines(preserved):
                have[line] = have.get(line, 0) + 1
            missing = tail = 0
            for line in split_lines(full[stream]):
                if have.get(line, 0) > 0:
                    have[line] -= 1
                elif line_timestamp_ns(line) > followed_to:
                    tail += len(line)
                else:
                    missing += len(line)
            if missing or tail:
                self._files[stream].close()
                path.write_bytes(full[stream])
                self._files[stream] = path.open("ab", buffering=0)
                self.cursors[stream].bytes_kept = len(full[stream])
                self.cursors[stream].lines_kept = len(split_lines(full[stream]))
            repaired += missing
            self.tail_bytes += tail
        self.repaired_bytes += repaired
        self.write_bookkeeping()
        return repaired

    def write_bookkeeping(self, unreconciled: str | None = None) -> None:
        """follow.json; `unreconciled` says why the copy could not be compared at the end."""
        record: dict[str, object] = {
            "reconnects": self.reconnects,
            "repaired_bytes": self.repaired_bytes,
            "tail_bytes": self.tail_bytes,
            "cut_bytes": self.cut_bytes,
            "bytes_kept": {s: c.bytes_kept for s, c in self.cursors.items()},
            "lines_kept": {s: c.lines_kept for s, c in self.cursors.items()},
            "reconciled": unreconciled is None,
        }
        if unreconciled is not None:
            record["unreconciled"] = unreconciled
        (self.dir / "follow.json").write_text(json.dumps(record, indent=2))

    def close(self) -> None:
        for fh in self._files.values():
            fh.close()
