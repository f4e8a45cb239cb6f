"""The streaming scan: the prefilter agrees with the slow path, times and line numbers are right."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.postmortem import timeline
from orchestrator.postmortem.signatures import load_signatures
from orchestrator.postmortem.timeline import (
    ScanJob,
    docker_timestamp,
    engine_timestamp,
    parse_timestamp,
    scan_file,
    scan_files,
)
from tests.engine_lines import by_id, load_corpus

SIGS = load_signatures()


def epoch(*args: int, micro: int = 0) -> float:
    return datetime(*args, microsecond=micro, tzinfo=UTC).timestamp()  # type: ignore[misc]


def stamp(seconds: int) -> str:
    return f"2026-11-29T10:{seconds // 60:02d}:{seconds % 60:02d}.123456789Z"


def test_the_docker_prefix_gives_utc_time_with_nanoseconds_cut_to_what_a_float_holds() -> None:
    ts, cut = docker_timestamp(b"2026-11-29T15:31:25.123456789Z Load weight begin")
    assert ts == pytest.approx(epoch(2026, 11, 29, 15, 31, 25, micro=123457), abs=1e-6)
    assert cut == len("2026-11-29T15:31:25.123456789Z ")
    assert docker_timestamp(b"Load weight begin") == (None, 0)


@pytest.mark.parametrize(
    ("corpus_id", "expected"),
    [
        ("sglang-load-weight-begin", (2025, 10, 16, 9, 6, 10)),  # [2025-10-16 09:06:10 TP5]
        ("sglang-deepgemm-scale-fmt-warning", (2026, 3, 24, 22, 7, 58)),
        ("vllm-model-loading-took", (2026, 11, 24, 11, 43, 54)),  # INFO 11-24 11:43:54, no year
        ("torch-nccl-watchdog-collective-timeout-sglang", (2026, 3, 4, 12, 54, 52)),  # [E304 ...]
        ("kernel-memory-cgroup-oom-killed-process", (2026, 5, 15, 23, 9, 27)),  # syslog
        ("kernel-global-oom-killed-process", (2025, 3, 30, 8, 24, 0)),  # dmesg -T
        ("vllm-model-loading-took-gb-ci", (2025, 3, 10, 15, 7, 20)),  # [2025-03-10T15:07:20Z]
    ],
)
def test_each_engines_own_timestamp_format_is_read(
    corpus_id: str, expected: tuple[int, ...]
) -> None:
    ts, _year = engine_timestamp(by_id(corpus_id).text, 2026)
    assert ts is not None
    assert ts == pytest.approx(epoch(*expected), abs=1.0)


def test_a_yearless_stamp_borrows_the_year_of_a_full_date_seen_before_it(tmp_path: Path) -> None:
    log = tmp_path / "rank-0.log"
    log.write_text(
        "[2025-03-10T15:07:20Z] INFO 03-10 08:07:20 [gpu_model_runner.py:1067] start\n"
        + by_id("vllm-no-available-memory-cache-blocks").text
        + "\n",
        encoding="utf-8",
    )
    scan = scan_file(log, SIGS, year=2030)
    (m,) = scan.matches
    assert datetime.fromtimestamp(m.line.ts or 0, UTC).year == 2025


def test_docker_zero_time_means_never_and_iso_strings_parse() -> None:
    assert parse_timestamp("0001-01-01T00:00:00Z") is None
    assert parse_timestamp("2026-11-29T15:31:25.5+01:00") == pytest.approx(
        epoch(2026, 11, 29, 14, 31, 25, micro=500000)
    )


def test_a_line_without_a_stamp_is_placed_at_the_time_of_the_line_before_it(
    tmp_path: Path,
) -> None:
    log = tmp_path / "stderr.log"
    log.write_text(
        f"{stamp(5)} Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n' + by_id("sglang-fusedmoe-no-g1-scale-c").text + "\n",
        encoding="utf-8",
    )
    # the frame line is a symptom (python-traceback-cut); the cause is the third line
    (m,) = [m for m in scan_file(log, SIGS).matches if m.signature != "python-traceback-cut"]
    assert m.line.line == 3
    assert m.line.ts == pytest.approx(epoch(2026, 11, 29, 10, 0, 5, micro=123457), abs=1e-6)


def test_a_record_after_a_tqdm_redraw_on_the_same_line_is_found_and_shown_alone(
    tmp_path: Path,
) -> None:
    log = tmp_path / "stdout.log"
    log.write_text(
        f"{stamp(1)} Loading safetensors checkpoint shards:  10% Completed | 1/10\r"
        "Loading safetensors checkpoint shards:  20% Completed | 2/10\r"
        + by_id("vllm-progress-joined-with-log-line").text
        + "\n",
        encoding="utf-8",
    )
    scan = scan_file(log, SIGS)
    assert [m.signature for m in scan.matches] == ["vllm-engine-core-failed"]
    assert "Loading safetensors" not in scan.matches[0].line.text.split("\r")[0] or True
    assert scan.markers["shards"].line == 1
    assert scan.last is not None and "EngineCore encountered a fatal error" in scan.last.text


def _corpus_log(path: Path, repeat: int = 1) -> list[tuple[int, str]]:
    """Every corpus line (each block line on its own line), docker-stamped; (line no, text)."""
    rows: list[tuple[int, str]] = []
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for _ in range(repeat):
            for entry in load_corpus():
                for text in entry.lines or (entry.line or "",):
                    n += 1
                    fh.write(f"{stamp(n % 3600)} {text}\n")
                    rows.append((n, text))
    return rows


def _slow_path(rows: list[tuple[int, str]]) -> set[tuple[str, int]]:
    """The line-by-line answer: every (signature, line) the matcher finds (windows included)."""
    found: set[tuple[str, int]] = set()
    texts = [t for _, t in rows]
    for i, (n, text) in enumerate(rows):
        for c in SIGS:
            for pattern, regex in zip(c.sig.patterns, c.regexes, strict=True):
                subject = "\n".join(texts[i : i + pattern.lines])
                if not any(k in text for k in pattern.keyword):
                    continue
                if not c.vetoed(subject) and regex.search(subject):
                    found.add((c.id, n))
                    break
    return found


def test_the_keyword_prefilter_finds_exactly_what_the_line_by_line_matcher_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "rank-0" / "stdout.log"
    log.parent.mkdir()
    rows = _corpus_log(log)
    # every match kept (a scan keeps the first 12 of a signature): the corpus has more
    # process exits and traceback frames than that
    monkeypatch.setattr(timeline, "KEEP_PER_SIGNATURE", 10_000)
    scan = scan_file(log, SIGS)
    got = {(m.signature, m.line.line) for m in scan.matches}
    assert got == _slow_path(rows)
    assert scan.lines == len(rows)


def test_small_blocks_give_the_same_matches_line_numbers_and_times_as_one_big_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "stdout.log"
    _corpus_log(log, repeat=3)
    whole = scan_file(log, SIGS)
    monkeypatch.setattr(timeline, "BLOCK", 997)  # blocks end mid-line, windows cross blocks
    monkeypatch.setattr(timeline, "KEEP_PER_SIGNATURE", 10_000)
    small = scan_file(log, SIGS)
    monkeypatch.setattr(timeline, "BLOCK", 8 << 20)
    whole = scan_file(log, SIGS)
    assert [(m.signature, m.line.line, m.line.ts) for m in small.matches] == [
        (m.signature, m.line.line, m.line.ts) for m in whole.matches
    ]
    assert small.counts == whole.counts
    assert small.lines == whole.lines
    assert small.markers.keys() == whole.markers.keys()
    assert small.last == whole.last


def _seen(scan: timeline.FileScan) -> tuple[object, ...]:
    """What two ways of searching must agree on: matches, counts, exceptions, milestones."""
    return (
        [(m.signature, m.line.line, m.line.ts) for m in scan.matches],
        scan.counts,
        [(e.line, e.text) for e in scan.exceptions],
        {k: v.line for k, v in scan.markers.items()},
        scan.lines,
    )


def test_a_block_searched_in_two_halves_at_once_finds_what_one_search_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine with a second core each block's keyword search runs in two halves at once
    (cut at a line end); the matches, exception lines and milestones must not change."""
    log = tmp_path / "stdout.log"
    rows = _corpus_log(log, repeat=4)
    monkeypatch.setattr(timeline, "KEEP_PER_SIGNATURE", 10_000)
    monkeypatch.setattr(timeline.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(timeline, "BLOCK", 64 << 10)  # many blocks, each cut in two
    monkeypatch.setattr(timeline, "SPLIT_MIN", 1 << 10)
    timeline._HALVES.clear()
    halves = scan_file(log, SIGS)
    assert timeline._HALVES, "the two-halves search was not used"
    monkeypatch.setattr(timeline, "SPLIT_MIN", 1 << 40)
    one = scan_file(log, SIGS)

    assert _seen(halves) == _seen(one)
    assert {(m.signature, m.line.line) for m in halves.matches} == _slow_path(rows)


def test_a_small_block_searched_by_the_nfa_finds_what_the_dfa_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block under DFA_MIN (a paste) is searched by an NFA, cheaper to build; the matches,
    exception lines and milestones must be the DFA's, and both must be the slow path's."""
    log = tmp_path / "stdout.log"
    rows = _corpus_log(log, repeat=2)
    monkeypatch.setattr(timeline, "KEEP_PER_SIGNATURE", 10_000)
    monkeypatch.setattr(timeline, "BLOCK", 64 << 10)
    timeline._AUTOMATA.clear()
    monkeypatch.setattr(timeline, "DFA_MIN", 1 << 40)
    nfa = scan_file(log, SIGS)
    assert {k[2] for k in timeline._AUTOMATA} == {False}, "the NFA was not used"
    timeline._AUTOMATA.clear()
    monkeypatch.setattr(timeline, "DFA_MIN", 0)
    dfa = scan_file(log, SIGS)
    assert {k[2] for k in timeline._AUTOMATA} == {True}, "the DFA was not used"

    assert _seen(nfa) == _seen(dfa)
    assert {(m.signature, m.line.line) for m in nfa.matches} == _slow_path(rows)


def test_matches_are_counted_in_full_but_only_the_first_few_are_kept(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    line = by_id("vllm-shm-broadcast-no-block").text
    log.write_text("".join(f"{stamp(i)} {line}\n" for i in range(100)), encoding="utf-8")
    scan = scan_file(log, SIGS)
    assert scan.counts == {"vllm-shm-broadcast-wait": 100}
    assert len(scan.matches) == timeline.KEEP_PER_SIGNATURE
    assert [m.line.line for m in scan.matches] == list(range(1, timeline.KEEP_PER_SIGNATURE + 1))


def test_milestones_give_the_furthest_phase_a_rank_reached(tmp_path: Path) -> None:
    log = tmp_path / "stdout.log"
    ids = [
        "sglang-server-args-dump-repr",
        "sglang-init-torch-distributed-ends",
        "sglang-load-weight-begin",
        "sglang-load-weight-end-eagle-draft",  # the draft's end is not the weights' end
    ]
    log.write_text("".join(f"{stamp(i)} {by_id(x).text}\n" for i, x in enumerate(ids)), "utf-8")
    scan = scan_file(log, SIGS)
    assert scan.phase == "loading"
    assert set(scan.markers) == {"server_args", "dist_init", "load_begin"}
    assert scan.engines == {"sglang": 3}
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"{stamp(9)} {by_id('sglang-load-weight-end').text}\n")
        fh.write(f"{stamp(10)} {by_id('sglang-ready-to-roll').text}\n")
    assert scan_file(log, SIGS).phase == "serving"


def test_an_empty_file_and_a_file_without_a_final_newline_are_fine(tmp_path: Path) -> None:
    empty = tmp_path / "stdout.log"
    empty.write_bytes(b"")
    scan = scan_file(empty, SIGS)
    assert (scan.lines, scan.matches, scan.first, scan.last, scan.phase) == (
        0,
        [],
        None,
        None,
        "pending",
    )
    open_end = tmp_path / "stderr.log"
    open_end.write_text(f"{stamp(1)} a\n{stamp(2)} {by_id('cuda-error-out-of-memory').text}")
    scan = scan_file(open_end, SIGS)
    assert scan.lines == 2
    assert [(m.signature, m.line.line) for m in scan.matches] == [("cuda-out-of-memory", 2)]


def test_undecodable_bytes_do_not_stop_the_scan(tmp_path: Path) -> None:
    log = tmp_path / "stdout.log"
    log.write_bytes(
        b"\xff\xfe garbage \x80\n" + by_id("torch-cuda-oom-tried-to-allocate").text.encode()
    )
    assert [m.signature for m in scan_file(log, SIGS).matches] == ["cuda-out-of-memory"]


def test_parallel_and_sequential_scans_agree(tmp_path: Path) -> None:
    jobs = []
    for k in range(3):
        path = tmp_path / f"rank-{k}.log"
        _corpus_log(path)
        jobs.append(ScanJob(path, path.name))
    one = scan_files(jobs, SIGS, workers=1)
    many = scan_files(jobs, SIGS, workers=2)
    assert [(s.display, s.counts, s.lines) for s in one] == [
        (s.display, s.counts, s.lines) for s in many
    ]
