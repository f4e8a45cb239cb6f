"""Every time form a rank log carries, parsed in one place.

`docker logs --timestamps` (and the process runtime, which writes the same shape) put an RFC
3339 stamp with nanoseconds first on every line. Raw logs carry the engines' own stamps: SGLang
`[2026-03-24 22:12:00 TP3]`, vLLM `INFO 11-24 11:43:54` (no year), torch/glog
`[E304 12:54:52.122900428 ...]` (no year), syslog `May 15 23:09:27`, `dmesg -T`
`[Sun Mar 30 08:24:00 2025]`, ISO with a space or `T`. Times without a zone are UTC
(containers run in UTC).

Imports nothing from the project: the runtime, the followers and `status` read times without
importing the supervisor.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime

# -- the docker prefix, as text (the supervisor's per-line path) ---------------------------------

DOCKER_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) ")
# The same stamp after a newline: a pattern that starts with a literal lets `re` jump from one
# newline to the next, where `^` under MULTILINE tests every position (2x the batch's cost).
_DOCKER_TS_AFTER_NL = re.compile("\n" + DOCKER_TS.pattern[1:])


def strip_timestamp(line: str) -> tuple[str | None, str]:
    """Split off the leading Docker timestamp, if any: (timestamp or None, engine text)."""
    m = DOCKER_TS.match(line)
    if m:
        return m.group(1), line[m.end() :]
    return None, line


def strip_timestamps(lines: str) -> str:
    """`strip_timestamp` on every line of a \\n-joined batch, in one pass."""
    return _DOCKER_TS_AFTER_NL.sub("\n", "\n" + lines)[1:]


# -- RFC 3339 as integer nanoseconds (ordering lines across ranks) -------------------------------

_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")
_RFC3339_LEADING = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d) ")


@functools.lru_cache(maxsize=4096)
def _epoch_s(second: str, zone: str) -> int:
    """Whole seconds since the epoch; cached, as thousands of lines a second share one."""
    return int(datetime.fromisoformat(second + ("+00:00" if zone == "Z" else zone)).timestamp())


def timestamp_ns(ts: str) -> int:
    """An RFC 3339 timestamp as integer nanoseconds since the epoch, for ordering.

    String comparison is not enough: RFC3339Nano trims trailing zeros (".1234Z" vs ".12345Z").
    """
    m = _RFC3339.match(ts)
    if not m:
        return 0
    frac = (m.group(2) or "").ljust(9, "0")[:9]
    return _epoch_s(m.group(1), m.group(3)) * 1_000_000_000 + int(frac)


def line_timestamp_ns(line: bytes | str) -> int:
    """The leading Docker timestamp of a raw line in nanoseconds; 0 when it has none."""
    raw = line.encode() if isinstance(line, str) else line
    m = _RFC3339_LEADING.match(raw)
    if not m:
        return 0
    frac = (m.group(2) or b"").ljust(9, b"0")[:9]
    return _epoch_s(m.group(1).decode(), m.group(3).decode()) * 1_000_000_000 + int(frac)


# -- epoch seconds (the postmortem's timeline) ---------------------------------------------------

_DOCKER_TS_BYTES = re.compile(
    rb"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) "
)
_ISO = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?"
)
_VLLM = re.compile(r"(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
_GLOG = re.compile(r"\[[IWEF](\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?")
_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
    )
}
_SYSLOG = re.compile(
    r"^(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (\d\d):(\d\d):(\d\d)"
)
_CTIME = re.compile(
    r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
    r" +(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})\]"
)
_HEAD = 160  # engine stamps sit at the start of a line (after a process prefix at most)


def _epoch(
    y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str | bytes | None, zone: str | None
) -> float | None:
    try:
        base = datetime(y, mo, d, h, mi, s, tzinfo=UTC).timestamp()
    except ValueError:
        return None
    if frac:
        base += int(frac) / 10 ** len(frac)
    if zone and zone not in ("Z", "z"):
        sign = -1 if zone[0] == "+" else 1
        digits = zone[1:].replace(":", "")
        base += sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)
    return base


def docker_timestamp(line: bytes) -> tuple[float | None, int]:
    """(epoch, length of the prefix) for a `docker logs --timestamps` line, else (None, 0)."""
    m = _DOCKER_TS_BYTES.match(line)
    if not m:
        return None, 0
    g = m.groups()
    ts = _epoch(
        int(g[0]), int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]), g[6], g[7].decode()
    )
    return ts, m.end()


def parse_timestamp(value: str) -> float | None:
    """An ISO-8601 / RFC 3339 string (docker's nanoseconds included) as epoch seconds."""
    m = _ISO.match(value.strip())
    if not m:
        return None
    g = m.groups()
    if g[0] == "0001":  # docker's zero time: never finished / never started
        return None
    return _epoch(int(g[0]), int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]), g[6], g[7])


def engine_timestamp(text: str, year: int | None) -> tuple[float | None, int | None]:
    """The engine's own stamp near the start of `text`: (epoch, year it implies) or (None, None).

    A full date also returns its year, so later yearless stamps in the file can borrow it.
    """
    head = text[:_HEAD]
    if m := _ISO.search(head):
        g = m.groups()
        y = int(g[0])
        return _epoch(y, int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]), g[6], g[7]), y
    if m := _CTIME.match(head):
        y = int(m.group(6))
        ts = _epoch(
            y, _MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)), int(m.group(4)),
            int(m.group(5)), None, None,
        )  # fmt: skip
        return ts, y
    fallback = year or datetime.now(UTC).year
    if m := _VLLM.search(head):
        mo, d, h, mi, s = (int(x) for x in m.groups())
        return _epoch(fallback, mo, d, h, mi, s, None, None), None
    if m := _GLOG.search(head):
        g = m.groups()
        ts = _epoch(fallback, int(g[0]), int(g[1]), int(g[2]), int(g[3]), int(g[4]), g[5], None)
        return ts, None
    if m := _SYSLOG.match(head):
        ts = _epoch(
            fallback, _MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)), int(m.group(4)),
            int(m.group(5)), None, None,
        )  # fmt: skip
        return ts, None
    return None, None
