"""Read rank logs as a stream: find signature matches and boot milestones, with line and time.

A log is read in blocks cut at line ends, never whole. In each block, one Aho-Corasick search
over the bytes (Rust, GIL released; two halves at once where there is a second core) finds
every signature keyword, exception keyword and milestone still unseen, and only the lines
holding one are decoded and given to the regexes. Each milestone is looked for only until its
first occurrence. So the cost is one automaton pass per block plus work proportional to the
candidate lines, not a Python loop over every line.

Times: `docker logs --timestamps` puts an RFC 3339 UTC stamp with nanoseconds before every line
(the run directory's shape). Raw logs (`--logs`) carry the engines' own stamps: SGLang
`[2026-03-24 22:12:00 TP3]`, vLLM `INFO 11-24 11:43:54` (no year), torch/glog
`[E304 12:54:52.122900428 ...]` (no year), syslog `May 15 23:09:27`, ISO with a space or `T`.
Yearless stamps take the year of the nearest full date seen before them (or the run's). A
line with no stamp takes the time of the last stamped line before it ("placed by order").
Times without a zone are taken as UTC (containers run in UTC).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import ahocorasick_rs

from orchestrator.dialects.base import Marker
from orchestrator.dialects.base import Milestone as M
from orchestrator.dialects.reader import PHASE_MARKERS
from orchestrator.dialects.timestamps import docker_timestamp, engine_timestamp, parse_timestamp
from orchestrator.postmortem.families import KEYWORDS as EXCEPTION_KEYWORDS
from orchestrator.postmortem.families import exception_of
from orchestrator.postmortem.model import PHASES
from orchestrator.postmortem.signatures import SignatureSet
from orchestrator.postmortem.stated import KEYWORDS as STATED_KEYWORDS
from orchestrator.postmortem.stated import states_failure
from orchestrator.postmortem.tidy import tidy_text

__all__ = [
    "MARKERS",
    "FileScan",
    "Line",
    "Match",
    "ScanJob",
    "docker_timestamp",
    "engine_timestamp",
    "parse_timestamp",
    "scan_file",
    "scan_files",
]

BLOCK = 8 << 20  # bytes read at a time
MAX_LINE = 64 << 20  # a "line" longer than this is cut (a binary file, not a log)
KEEP_PER_SIGNATURE = 12  # matches kept per signature and file (all are counted)
KEEP_EXCEPTIONS = 16  # exception lines kept per file: the last ones (the traceback fallback)
KEEP_STATED = 8  # lines stating a failure kept per file: the last ones (stated.py)
BACK_LINES = 64  # how far back a stampless line looks for a time
TEXT_CAP = 2000  # characters of a line kept as evidence
TIDY_MAX = 64 << 20  # a pasted log is tidied in memory up to this size; bigger ones as they are

# The boot milestones are the engines' dialect tables (`orchestrator.dialects`), the same rows
# the supervisor folds; each row still unseen costs a substring pass per block.
MARKERS: tuple[Marker, ...] = PHASE_MARKERS

# -- scan results ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    file: str
    line: int
    text: str
    ts: float | None


@dataclass(frozen=True)
class Match:
    signature: str
    line: Line


@dataclass
class FileScan:
    """What one file said: matches (the first few per signature), milestones, its edges."""

    path: str
    display: str
    size: int = 0
    lines: int = 0
    matches: list[Match] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    markers: dict[str, Line] = field(default_factory=dict)
    engines: dict[str, int] = field(default_factory=dict)
    first: Line | None = None
    last: Line | None = None
    exceptions: list[Line] = field(default_factory=list)  # the last few `Cls: message` lines
    stated: list[Line] = field(default_factory=list)  # the last few lines stating a failure
    frames: list[str] = field(default_factory=list)  # for each, the traceback's file paths

    @property
    def phase(self) -> str:
        best = "starting" if self.lines else "pending"
        for m in MARKERS:
            phase = m.phase
            if phase is None or m.milestone.value not in self.markers:
                continue
            if PHASES.index(phase.value) > PHASES.index(best):
                best = phase.value
        return best


# -- the scan --------------------------------------------------------------------------------------


def _blocks(fh: BinaryIO, block: int) -> Iterator[tuple[bytes, bytes]]:
    """(chunk, the chunk after it) with every chunk ending at a line end (the last may not)."""
    carry = b""
    prev: bytes | None = None
    while True:
        data = fh.read(block)
        if not data:
            break
        buf = carry + data if carry else data
        cut = buf.rfind(b"\n") + 1
        if cut == 0 and len(buf) < MAX_LINE:
            carry = buf
            continue
        if cut == 0:
            cut = len(buf)
        chunk, carry = buf[:cut], buf[cut:]
        if prev is not None:
            yield prev, chunk
        prev = chunk
    if carry:
        if prev is not None:
            yield prev, carry
        prev = carry
    if prev is not None:
        yield prev, b""


def _segment(text: str, pos: int) -> str:
    """The \\r-separated piece of `text` holding `pos` (tqdm redraws share a line)."""
    start = text.rfind("\r", 0, pos) + 1
    end = text.find("\r", pos)
    piece = text[start:] if end < 0 else text[start:end]
    piece = piece.strip()
    return piece if len(piece) <= TEXT_CAP else piece[:TEXT_CAP] + "…"


class _State:
    __slots__ = ("display", "last_ts", "line_base", "year")

    def __init__(self, display: str, year: int | None) -> None:
        self.display = display
        self.year = year
        self.last_ts: float | None = None  # the last time seen before the current chunk
        self.line_base = 1  # the line number of the current chunk's first line


def _line_time(chunk: bytes, ls: int, le: int, state: _State) -> tuple[float | None, str]:
    """(time, text without docker stamp) of the line at chunk[ls:le]."""
    raw = chunk[ls:le]
    ts, cut = docker_timestamp(raw)
    text = raw[cut:].decode("utf-8", "replace").rstrip("\r")
    if ts is None:
        ts, year = engine_timestamp(text, state.year)
        if year is not None:
            state.year = year
    return ts, text


def _time_before(chunk: bytes, ls: int, state: _State) -> float | None:
    """The time of the nearest stamped line before chunk offset `ls` ("placed by order")."""
    end = ls - 1
    for _ in range(BACK_LINES):
        if end < 0:
            break
        start = chunk.rfind(b"\n", 0, end) + 1
        ts, _text = _line_time(chunk, start, end, state)
        if ts is not None:
            return ts
        end = start - 1
    return state.last_ts


def _window(chunk: bytes, following: bytes, le: int, count: int) -> list[str]:
    """The `count` lines after chunk offset `le` (the end of a line), docker stamps removed."""
    out: list[str] = []
    src, pos = chunk, le + 1
    while len(out) < count:
        if pos >= len(src):
            if src is following:
                break
            src, pos = following, 0
            continue
        end = src.find(b"\n", pos)
        end = len(src) if end < 0 else end
        raw = src[pos:end]
        _ts, cut = docker_timestamp(raw)
        out.append(raw[cut:].decode("utf-8", "replace").rstrip("\r"))
        pos = end + 1
    return out


def scan_file(
    path: Path,
    sigs: SignatureSet,
    *,
    display: str | None = None,
    year: int | None = None,
    tidy: bool = False,
) -> FileScan:
    """Scan one log file (streaming) for signatures and milestones.

    `tidy`: a pasted log (`--logs`) is tidied first (`tidy.py`: colour codes, compose and Ray
    columns, quoting, hard wraps), in memory, when it is small enough to be a paste."""
    if tidy and path.stat().st_size <= TIDY_MAX:
        text = tidy_text(path.read_bytes().decode("utf-8", "replace"))
        with io.BytesIO(text.encode("utf-8")) as fh:
            return _scan(fh, str(path), sigs, display=display, year=year)
    with path.open("rb") as fh:
        return _scan(fh, str(path), sigs, display=display, year=year)


def _scan(
    fh: BinaryIO, path: str, sigs: SignatureSet, *, display: str | None, year: int | None
) -> FileScan:
    shown = display or path
    result = FileScan(path=path, display=shown)
    state = _State(shown, year)
    wanted = list(MARKERS)
    compiled = sigs.compiled
    keywords = sigs.keywords
    for chunk, following in _blocks(fh, BLOCK):
        result.size += len(chunk)
        find = chunk.find
        rfind = chunk.rfind
        # 1. one Aho-Corasick pass finds every keyword of every signature, the exception
        # keywords and the milestones still unseen; lines are grouped by their start
        candidates: dict[int, tuple[int, list[tuple[int, int]]]] = {}
        exc_found: dict[int, int] = {}
        stated_found: dict[int, int] = {}
        marker_at: dict[int, list[int]] = {}
        auto, word_tags = _automaton(sigs, tuple(wanted), dfa=len(chunk) >= DFA_MIN)
        for word, i in _keyword_hits(auto, chunk):
            for kind, idx in word_tags[word]:
                if kind == _MARKER:
                    seen = marker_at.setdefault(idx, [])
                    if len(seen) < MARKER_TRIES:
                        seen.append(i)
                    continue
                ls = rfind(b"\n", 0, i) + 1
                le = find(b"\n", i)
                if le < 0:
                    le = len(chunk)
                if kind == _EXCEPTION:
                    exc_found[ls] = le
                    continue
                if kind == _STATED:
                    stated_found[ls] = le
                    continue
                slot = candidates.get(ls)
                if slot is None:
                    candidates[ls] = (le, list(keywords[idx].targets))
                else:
                    slot[1].extend(keywords[idx].targets)
        # 1b. exception lines (`Cls: message`, `raise Cls(`): the traceback fallback's input
        exc_lines = _last_lines(chunk, exc_found, KEEP_EXCEPTIONS, _raises)
        stated_lines = _last_lines(chunk, stated_found, KEEP_STATED, states_failure)
        # 2. milestones still unseen: the first occurrence whose regex agrees, by table order
        found_markers: list[tuple[int, int, Marker]] = []
        if wanted:
            still: list[Marker] = []
            seen_names: set[str] = set()
            for mi, marker in enumerate(wanted):
                name = marker.milestone.value
                if name in result.markers or name in seen_names:
                    continue
                hit = _first_marker(chunk, marker, marker_at.get(mi, []))
                if hit is None:
                    still.append(marker)
                    continue
                found_markers.append((*hit, marker))
                seen_names.add(name)
            wanted = still
        if found_markers and not any(n in result.markers for n in ENGINE_STARTS):
            found_markers, wanted = _serving_after_start(chunk, found_markers, result, wanted)
        # 3. line numbers for the candidates, in one forward count
        starts = sorted(
            set(candidates)
            | {ls for ls, _, _ in found_markers}
            | {ls for ls, _ in exc_lines}
            | {ls for ls, _ in stated_lines}
        )
        numbers: dict[int, int] = {}
        n, pos = state.line_base, 0
        for ls in starts:
            n += chunk.count(b"\n", pos, ls)
            pos = ls
            numbers[ls] = n
        # 4. run the regexes on candidate lines (the block's first line first: a full
        # date there gives yearless stamps below their year)
        head = _edge(chunk, state, first=True)
        if result.first is None:
            result.first = head
        for ls in sorted(candidates):
            le, targets = candidates[ls]
            ts, text = _placed(chunk, ls, le, state)
            done: set[int] = set()
            windows: dict[int, str] = {}
            for si, pi in targets:
                if si in done:
                    continue
                c = compiled[si]
                pattern = c.sig.patterns[pi]
                subject = text
                if pattern.lines > 1:
                    subject = windows.get(pattern.lines, "")
                    if not subject:
                        more = _window(chunk, following, le, pattern.lines - 1)
                        subject = "\n".join([text, *more])
                        windows[pattern.lines] = subject
                if c.vetoed(subject):
                    continue
                m = c.regexes[pi].search(subject)
                if m is None:
                    continue
                done.add(si)
                sig_id = c.sig.id
                count = result.counts.get(sig_id, 0) + 1
                result.counts[sig_id] = count
                if count <= KEEP_PER_SIGNATURE:
                    start = min(m.start(), len(text))
                    line = Line(shown, numbers[ls], _segment(text, start), ts)
                    result.matches.append(Match(sig_id, line))
        for ls, le, marker in found_markers:
            ts, text = _placed(chunk, ls, le, state)
            pos_kw = text.find(marker.keyword)
            line = Line(shown, numbers[ls], _segment(text, max(pos_kw, 0)), ts)
            if marker.milestone.value not in result.markers:
                result.markers[marker.milestone.value] = line
            if marker.engine:
                result.engines[marker.engine] = result.engines.get(marker.engine, 0) + 1
        for ls, le in exc_lines:
            ts, text = _placed(chunk, ls, le, state)
            result.exceptions.append(Line(shown, numbers[ls], _segment(text, 0), ts))
            result.frames.append(_frames_before(chunk, ls))
        del result.exceptions[:-KEEP_EXCEPTIONS]
        del result.frames[:-KEEP_EXCEPTIONS]
        for ls, le in stated_lines:
            ts, text = _placed(chunk, ls, le, state)
            result.stated.append(Line(shown, numbers[ls], _segment(text, 0), ts))
        del result.stated[:-KEEP_STATED]
        # 5. the file's edges, and the time carried into the next chunk
        newlines = chunk.count(b"\n")
        ends_open = not chunk.endswith(b"\n")
        last = _edge(chunk, state, first=False)
        if last is not None:
            result.last = last
            if last.ts is not None:
                state.last_ts = last.ts
        state.line_base += newlines
        result.lines = state.line_base - 1 + (1 if ends_open and chunk else 0)
    result.matches.sort(key=lambda mt: (mt.line.ts is None, mt.line.ts or 0.0, mt.line.line))
    _a_web_ui_is_not_a_model(result)
    return result


# A web UI's Gradio URL says the UI is up, with or without a model in it (text-generation-webui
# starts with none loaded): its ready line (`needs_a_model` in the dialect) says `ready` only in
# a file that also shows a model loading, loaded or answering (the thirty-seventh set's UI with
# no model was read as serving; the rulebook's rule 6).
_A_MODEL = (M.shards, M.load_begin, M.load_end, M.warmup, M.traffic)  # StrEnum: the keys


def _a_web_ui_is_not_a_model(result: FileScan) -> None:
    ready = result.markers.get(M.ready)
    if ready is None or any(name in result.markers for name in _A_MODEL):
        return
    if any(m.needs_a_model and m.says(ready.text) for m in MARKERS):
        del result.markers[M.ready]


def _placed(chunk: bytes, ls: int, le: int, state: _State) -> tuple[float | None, str]:
    """A line's time and text; a line without a stamp takes the last stamped line's time."""
    ts, text = _line_time(chunk, ls, le, state)
    return (_time_before(chunk, ls, state) if ts is None else ts), text


def _raises(text: str) -> bool:
    return exception_of(text) is not None


def _last_lines(
    chunk: bytes, found: dict[int, int], keep: int, says: Callable[[str], bool]
) -> list[tuple[int, int]]:
    """(start, end) of the last `keep` lines among `found` (start -> end) whose text `says`
    holds for: the exception lines, the lines stating a failure."""
    out: list[tuple[int, int]] = []
    for ls in sorted(found, reverse=True):
        if says(chunk[ls : found[ls]].decode("utf-8", "replace")):
            out.append((ls, found[ls]))
            if len(out) >= keep:
                break
    return out[::-1]


_FRAME = re.compile(rb'File "([^"]+)"')
FRAME_LINES = 40  # how far back an exception's traceback frames are looked for


def _frames_before(chunk: bytes, ls: int) -> str:
    """The file paths of the traceback frames just above the line at `ls` (space-separated):
    where the exception was raised tells its family when the message does not (an assert in
    a fused-MoE kernel says nothing of MoE)."""
    start = ls
    for _ in range(FRAME_LINES):
        if start <= 0:
            break
        start = chunk.rfind(b"\n", 0, start - 1) + 1
    paths = _FRAME.findall(chunk, start, ls)
    return " ".join(p.decode("utf-8", "replace") for p in paths[-8:])


def _first_marker(chunk: bytes, marker: Marker, at: list[int]) -> tuple[int, int] | None:
    """The first line holding `marker`'s keyword at one of `at` whose regex agrees; past the
    first MARKER_TRIES occurrences, a plain search on (a milestone is wanted only once)."""
    positions: Iterable[int] = at
    if len(at) >= MARKER_TRIES:
        positions = _occurrences(chunk, marker.keyword.encode(), at[0])
    return _first_agreeing(chunk, marker, positions)


# The milestones that say an engine is starting: a serving line before the first of them is
# not that engine's. A shard bar counts: a controller's uvicorn up before its model worker's
# `Loading checkpoint shards: 0/7` said `ready` for a model still loading (the fourteenth set).
# NCCL's set-up does not: a serving rollout engine opens a communicator when its trainer asks
# (TRL's and ms-swift's /init_communicator; the tenth and thirty-sixth sets), after its 200s.
ENGINE_STARTS = frozenset({"server_args", "load_begin", "shards"})
# Ray's set-up by an engine's executor counts too (not NCCL's, above): a wrapper's uvicorn up,
# then "Started a local Ray instance" and the workers' CUDA graphs said `ready` for a vLLM that
# had not loaded (the fifty-third set's u-0005, a KnowLM server; it died of an OOM after).
RAY_STARTS = frozenset({"Connected to Ray cluster", "Started a local Ray instance"})


def _starts_an_engine(marker: Marker) -> bool:
    return marker.milestone.value in ENGINE_STARTS or marker.keyword in RAY_STARTS


SERVING = frozenset(m.milestone.value for m in MARKERS if m.phase and m.phase.value == "serving")


def _serving_after_start(
    chunk: bytes, found: list[tuple[int, int, Marker]], result: FileScan, wanted: list[Marker]
) -> tuple[list[tuple[int, int, Marker]], list[Marker]]:
    """The first block where an engine starts: a serving line before that start is set aside
    and looked for again after it (and in later blocks). A wrapper's own HTTP front end
    (uvicorn's "Application startup complete" on the wrapper's port) is up before the engine
    under it starts; its lines said `ready` for an engine still initializing (issue 29)."""
    start = min((ls for ls, _, m in found if _starts_an_engine(m)), default=None)
    if start is None:
        return found, wanted
    redo = {name for name in SERVING if result.markers.pop(name, None) is not None}
    kept = []
    for ls, le, m in found:
        if m.milestone.value in SERVING and ls < start:
            redo.add(m.milestone.value)
        else:
            kept.append((ls, le, m))
    unseen: set[str] = set()
    for name in sorted(redo):
        for row in (m for m in MARKERS if m.milestone.value == name):  # table order
            hit = _first_agreeing(chunk, row, _occurrences(chunk, row.keyword.encode(), start))
            if hit is not None:
                kept.append((*hit, row))
                break
        else:
            unseen.add(name)
    still = {id(m) for m in wanted}
    return kept, [m for m in MARKERS if id(m) in still or m.milestone.value in unseen]


def _first_agreeing(
    chunk: bytes, marker: Marker, positions: Iterable[int]
) -> tuple[int, int] | None:
    for i in positions:
        ls = chunk.rfind(b"\n", 0, i) + 1
        le = chunk.find(b"\n", i)
        le = len(chunk) if le < 0 else le
        if marker.says(chunk[ls:le].decode("utf-8", "replace")):
            return ls, le
    return None


def _occurrences(chunk: bytes, needle: bytes, start: int) -> Iterator[int]:
    i = chunk.find(needle, start)
    while i >= 0:
        yield i
        i = chunk.find(needle, i + 1)


# -- the prefilter: one automaton for every keyword ------------------------------------------------

_SIGNATURE, _EXCEPTION, _MARKER, _STATED = 0, 1, 2, 3
MARKER_TRIES = 64  # occurrences of a milestone's keyword kept per block before a plain search
# (kind, index) pairs of each distinct keyword: a keyword may serve several signatures.
WordTags = tuple[tuple[tuple[int, int], ...], ...]
DFA_MIN = 1 << 20  # a smaller block is searched by an NFA (see `_automaton`)
# Keyed by the set's id; the value holds the set itself, so while it is cached its id cannot be
# reused by a new set (an id alone was: a later set was served an earlier set's automaton).
_AUTOMATA: dict[
    tuple[int, tuple[Marker, ...], bool],
    tuple[SignatureSet, ahocorasick_rs.BytesAhoCorasick, WordTags],
] = {}


def _automaton(
    sigs: SignatureSet, wanted: tuple[Marker, ...], *, dfa: bool = True
) -> tuple[ahocorasick_rs.BytesAhoCorasick, WordTags]:
    """Aho-Corasick over the signatures' keywords, the exception keywords and the milestones
    still wanted (ahocorasick_rs, the Rust `aho-corasick` crate, over bytes: one pass per block,
    whatever the number of keywords, with no decoding). Built once per set of wanted
    milestones (they only ever shrink); a DFA for a big block, because the build (10-30 ms)
    is paid a few times per file and the search is the scan's whole cost; an NFA (built in
    ~4 ms) for a block under `DFA_MIN`, where the build is most of a paste's scan."""
    key = (id(sigs), wanted, dfa)
    cached = _AUTOMATA.get(key)
    if cached is not None and cached[0] is sigs:
        return cached[1], cached[2]
    tags: dict[bytes, list[tuple[int, int]]] = {}
    for idx, entry in enumerate(sigs.keywords):
        tags.setdefault(entry.keyword, []).append((_SIGNATURE, idx))
    for kw in EXCEPTION_KEYWORDS:
        tags.setdefault(kw, []).append((_EXCEPTION, 0))
    for kw in STATED_KEYWORDS:
        tags.setdefault(kw, []).append((_STATED, 0))
    for idx, marker in enumerate(wanted):
        tags.setdefault(marker.keyword.encode("utf-8"), []).append((_MARKER, idx))
    auto = ahocorasick_rs.BytesAhoCorasick(
        list(tags),
        implementation=(
            ahocorasick_rs.Implementation.DFA
            if dfa
            else ahocorasick_rs.Implementation.ContiguousNFA
        ),
    )
    word_tags: WordTags = tuple(tuple(v) for v in tags.values())
    if len(_AUTOMATA) > 256:
        _AUTOMATA.clear()
    _AUTOMATA[key] = (sigs, auto, word_tags)
    return auto, word_tags


# A block is searched in two halves at once when there is a second core: the Rust search
# releases the GIL, and it is most of the scan's time on a healthy log (no keyword
# contains a line end, so cutting at one loses no match). The helper thread belongs to the
# process that made it: a forked scan process (`scan_files`) makes its own.
SPLIT_MIN = 1 << 20
_HALVES: dict[int, ThreadPoolExecutor] = {}


def _second_half_pool() -> ThreadPoolExecutor | None:
    if (os.cpu_count() or 1) < 2:
        return None
    pid = os.getpid()
    pool = _HALVES.get(pid)
    if pool is None:
        _HALVES.clear()
        pool = _HALVES[pid] = ThreadPoolExecutor(1, thread_name_prefix="postmortem-scan")
    return pool


def _keyword_hits(auto: ahocorasick_rs.BytesAhoCorasick, chunk: bytes) -> Iterator[tuple[int, int]]:
    """(keyword index, byte offset) of every keyword occurrence in the block, in order."""
    mid = chunk.find(b"\n", len(chunk) // 2) + 1 if len(chunk) >= SPLIT_MIN else 0
    pool = _second_half_pool() if mid > 0 else None
    if pool is None:
        for word, start, _end in auto.find_matches_as_indexes(chunk, overlapping=True):
            yield word, start
        return
    view = memoryview(chunk)
    later = pool.submit(auto.find_matches_as_indexes, view[mid:], overlapping=True)
    for word, start, _end in auto.find_matches_as_indexes(view[:mid], overlapping=True):
        yield word, start
    for word, start, _end in later.result():
        yield word, start + mid


def _edge(chunk: bytes, state: _State, *, first: bool) -> Line | None:
    """The first (or last) non-empty line of a chunk, with its number and time."""
    if first:
        pos, number = 0, state.line_base
        while pos < len(chunk):
            end = chunk.find(b"\n", pos)
            end = len(chunk) if end < 0 else end
            ts, text = _line_time(chunk, pos, end, state)
            if text.strip():
                return Line(state.display, number, _segment(text, 0), ts)
            pos, number = end + 1, number + 1
            if number - state.line_base > BACK_LINES:
                break
        return None
    end = len(chunk) - 1 if chunk.endswith(b"\n") else len(chunk)
    number = state.line_base + chunk.count(b"\n", 0, max(end, 0))
    for _ in range(BACK_LINES):
        if end < 0:
            break
        start = chunk.rfind(b"\n", 0, end) + 1
        ts, text = _line_time(chunk, start, end, state)
        if text.strip():
            # the last tqdm redraw of the line is what the rank showed last
            shown = text.strip().split("\r")[-1].strip() or text.strip()
            if ts is None:
                ts = _time_before(chunk, start, state)
            return Line(state.display, number, _segment(shown, 0), ts)
        end, number = start - 1, number - 1
    return None


# -- many files ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScanJob:
    path: Path
    display: str
    year: int | None = None
    tidy: bool = False  # a pasted log (`--logs`): tidy it before matching


def _run(job: ScanJob, sigs: SignatureSet) -> FileScan:
    return scan_file(job.path, sigs, display=job.display, year=job.year, tidy=job.tidy)


PARALLEL_BYTES = 64 << 20  # below this, one process is quicker than starting others


def scan_files(
    jobs: Sequence[ScanJob], sigs: SignatureSet, *, workers: int | None = None
) -> list[FileScan]:
    """Scan several files; big runs in parallel processes (one file each), results in order."""
    total = sum(j.path.stat().st_size for j in jobs if j.path.exists())
    if workers is None:
        workers = min(len(jobs), os.cpu_count() or 1) if total >= PARALLEL_BYTES else 1
    if workers <= 1 or len(jobs) <= 1:
        return [_run(j, sigs) for j in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_run, jobs, [sigs] * len(jobs)))
