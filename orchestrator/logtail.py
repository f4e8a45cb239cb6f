"""The last lines of a rank's log, as a person at 3 a.m. needs them.

A raw tail is often useless: torch and the engines print C++ backtraces (`frame #0: c10::Error...`,
one line per frame, 20 to 40 of them) after or around the one line that says what went wrong, so
the last 15 lines can be all frames. `readable_tail` folds every run of frames into one line that
counts them, then takes the tail, and keeps the line that matters (`keep`) even if it scrolled off.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

# c10's backtrace lines: "frame #12: c10d::TCPStore::... + 0x1a (0x7f... in /.../libtorch_cpu.so)".
# Also the bare glibc form "#3  0x00007f... in foo () from /lib/..." that gdb-style dumps print.
_FRAME = re.compile(r"^\s*(?:frame #\d+:|#\d+\s+0x[0-9a-f]+ in )")


def is_frame(line: str) -> bool:
    # The cheap test first: this runs once per log line while following eight ranks.
    return ("frame #" in line or "0x" in line) and _FRAME.match(line) is not None


def fold_frames(lines: Sequence[str]) -> list[str]:
    """Every run of backtrace frames becomes one line: `[... 26 C++ stack frames ...]`."""
    out: list[str] = []
    run = 0
    for line in lines:
        if is_frame(line):
            run += 1
            continue
        if run:
            out.append(_folded(run))
            run = 0
        out.append(line)
    if run:
        out.append(_folded(run))
    return out


def readable_tail(
    lines: Sequence[str], n: int = 15, *, keep: Callable[[str], bool] | None = None
) -> tuple[str, ...]:
    """The last `n` lines with frames folded; the last line matching `keep` is always in them."""
    folded = fold_frames(lines)
    tail = folded[-n:] if n > 0 else []
    if keep is None or any(keep(line) for line in tail):
        return tuple(tail)
    kept = next((line for line in reversed(folded) if keep(line)), None)
    if kept is None:
        return tuple(tail)
    # The line that says what failed comes first, then what followed it.
    return (kept, "[...]", *tail[-(n - 2) :]) if n > 2 else (kept,)


def append_line(tail: tuple[str, ...], line: str, n: int) -> tuple[str, ...]:
    """`tail` plus `line`, at most `n` long, frames folded as they arrive (a live follow)."""
    if is_frame(line):
        if tail and (m := _FOLDED.fullmatch(tail[-1])):
            return (*tail[:-1], _folded(int(m.group(1)) + 1))
        line = _folded(1)
    return (*tail[-(n - 1) :], line) if n > 1 else (line,)


def extend_tail(tail: tuple[str, ...], lines: Sequence[str], n: int) -> tuple[str, ...]:
    """`append_line` for each of `lines`, reading only the lines that can still be in the tail.

    A follower hands on ~100 lines at a time at serving volume; the tail keeps `n`. Walking back
    from the end, a run of frames counts as one entry; the fold starts where `n` entries begin
    (or from `tail` itself when the batch has fewer)."""
    i, entries, frames = len(lines), 0, False
    while i > 0 and entries < n:
        i -= 1
        if is_frame(lines[i]):
            frames = True
            while i > 0 and is_frame(lines[i - 1]):
                i -= 1
        entries += 1
    if not frames and n > 0:
        # No frame to fold (nearly every batch): the tail is a slice, not n tuples built one
        # line at a time. A line that is not a frame never merges with what came before it.
        return (*tail, *lines)[-n:] if i == 0 else tuple(lines[i:])
    out = tail if i == 0 else ()
    for line in lines[i:]:
        out = append_line(out, line, n)
    return out


_FOLDED = re.compile(r"\[\.\.\. (\d+) C\+\+ stack frames? \.\.\.\]")


def _folded(count: int) -> str:
    return f"[... {count} C++ stack frame{'s' if count != 1 else ''} ...]"
