"""Pasted logs, tidied before matching: same lines, same line numbers, the noise gone.

Logs given with `--logs` were often copied from a terminal, a compose stack or an issue
tracker, which dress each line: colour codes (real ESC bytes, or the literal ` [36m`,
`^[[0;36m`, `#033[2m`, `\\x1b[...m` a tracker or syslog left behind, `<font color=...>`),
docker-compose's `service  | ` column, Ray's `(pid=123, ip=10.0.0.2)` / `(raylet)` prefix,
Markdown quoting (`> `, backticks around a line), a tracker's auto-links of file names and
addresses, line numbers from a pasted file, and hard wraps at a fixed width that cut a message
mid-word. Patterns are written against what the program printed, so the dressing comes off
first.

The line count never changes, so evidence still points at the pasted file's own lines: a
hard-wrapped message is joined onto its first line and its continuation lines are left empty.
The rank prefixes (`[rank3]:`, `(VllmWorker rank=3 pid=...)`, `TP3]`) stay: they say which rank
printed the line. Run-directory logs come from `docker logs` and are not tidied (they are
large and undressed).
"""

from __future__ import annotations

import re
from collections import Counter

# Colour codes: real, and as trackers and syslog leave them (the ESC byte gone or escaped).
_ANSI = re.compile(
    r"(?:\x1b|\^\[|#033|\\x1b|\\033|\\u001b|\\e)\[[0-9;?]*[A-Za-z]"  # ESC [ ... m
    r"|(?<![\w\]\[])\[(?:[0-9]{1,3};)*[0-9]{1,3}m"  # ` [36m`: the ESC byte stripped by a paste
    r"|</?font[^>]*>"
)
# A colour code that opens the line, with the blank a tracker left where the ESC byte was
# (` [36mvllm-1  | ...`): once it is gone the line starts where the program's text starts, so
# the compose and Ray prefixes behind it are found.
_LEAD_CODE = re.compile(r"^[ \t]*(?:(?:\x1b|\^\[|#033|\\x1b|\\033|\\u001b|\\e)?\[[0-9;?]*m|<font)")
# docker compose `name-1  | `, `name | ` (a word, spaces, a bar) at the start of a line.
_COMPOSE = re.compile(r"^[A-Za-z0-9][\w.-]*\s+\|(?: |$)")
# Ray's process prefix: `(pid=123)`, `(pid=123, ip=10.0.0.2)`, `(raylet)`, `(raylet, ip=...)`,
# `(RayWorkerWrapper pid=2202490)`, vLLM's `(APIServer pid=1)`; not `(VllmWorker rank=3 pid=...)`
# or `(Worker_TP3 pid=...)`: those name a rank.
_RAY = re.compile(
    r"^\((?:raylet|gcs_server|(?![A-Za-z_]*TP\d)[A-Za-z_]+ )?(?:pid=\d+)?(?:, ?ip=[\d.:]+)?\)\s?"
)
# A terminal pane's box: `│ text   │` (k9s, tmux panes, boxed tables)
_BOX = re.compile(r"^\s*[│┃║]\s?|\s*[│┃║]\s*$")
# Markdown the user typed: a quote, a line wrapped in backticks, a pasted file's line number.
_QUOTE = re.compile(r"^\s*(?:> ?)+")  # `> `, `>> `, `> > ` (a quote of a quote)
_BACKTICKS = re.compile(r"^\s*`{1,3}(.*?)`{1,3}\s*$")
_LINE_NO = re.compile(r"^\s{0,4}\d{1,5}(?:\s*[|│]\s|:\s(?=\S)|\t(?=\S))")  # `12 | `, `12: `, `12\t`
_QUOTED = re.compile(r'^\s*"(.*)"\s*$')
# A tracker's auto-link of text that looks like an address: `[net_ib.cc:101](http://net_ib.cc:101/)`,
# `[10.1.3.201](http://10.1.3.201/)` (a paste copied from the rendered page). The link goes when
# its text is its own address; a link the user wrote (`[docs](https://...)`) stays.
_AUTOLINK = re.compile(r"\[([^\[\]\s]+)\]\(https?://([^)\s]+)\)")


def _unlink(m: re.Match[str]) -> str:
    return m.group(1) if m.group(2).rstrip("/") == m.group(1) else m.group(0)


WRAP_MIN = 60  # a width under this is not a terminal's or a tracker's wrap
# A line that starts like a log record is a record of its own, never the tail of a wrapped one
# (log lines of one shape often share a length: that alone is not a wrap).
_RECORD_START = re.compile(
    r"^(?:\[|\(|\d{4}-\d\d-\d\d|\d\d-\d\d |[A-Z]{3,8}[ :]|[IWEF]\d{3,4} |Traceback|\s+File \"|"
    r"[\w.-]+:\d+:\d+ \[|\w[\w.-]* +\| |(?:error|warning|fatal|panic): "
    # a C function's name then its message (llama.cpp's and ggml's `alloc_tensor_range:
    # failed to allocate ...`, `llama_init_from_model: ...`): a record, not a wrap's tail
    r"|[a-z]+_[a-z0-9_]+: )"
)
WRAP_REPEATS = 2  # lines that must share the width before it is taken for a wrap


# Typographic quotes a word processor or a forum put in place of the program's own
_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})


def tidy_line(line: str) -> str:
    """One line without colour codes, compose/Ray columns, quoting or pasted line numbers."""
    text = line
    # a line that opened with a colour code: the blanks left where ESC bytes were go too
    lead_code = False
    if "[" in line or "<font" in line:
        text = _ANSI.sub("", line)
        lead_code = text != line and _LEAD_CODE.match(line) is not None
        if lead_code:
            text = text.lstrip(" \t")
    if not text.isascii():
        text = text.translate(_QUOTES)
    if "](http" in text:
        text = _AUTOLINK.sub(_unlink, text)
    if "│" in text or "┃" in text or "║" in text:
        text = _BOX.sub("", text)
    # each prefix only where it can be (a literal test first: most lines of a big paste have
    # none of them, and a regex call per prefix per line was most of the tidying's time)
    if text.lstrip()[:1] == ">":
        text = _QUOTE.sub("", text, count=1)
    if "|" in text:
        text = _COMPOSE.sub("", text, count=1)
    if text[:1] == "(":
        text = _RAY.sub("", text, count=1)
    if lead_code:
        text = text.lstrip(" \t")
    if "`" in text and (m := _BACKTICKS.match(text)):
        text = m.group(1)
    if '"' in text and (m := _QUOTED.match(text)) and '"' not in m.group(1):
        text = m.group(1)
    if any(c.isdigit() for c in text[:5]):
        text = _LINE_NO.sub("", text, count=1)
    return text


def _wrap_width(lines: list[str]) -> int | None:
    """The width a paste was hard-wrapped at: the longest length several lines share, else the
    length of the longest line when it was cut mid-word (a paste with one long message wraps
    once; no line of a hard-wrapped paste is longer than its width)."""
    # distinct shapes only: a record printed twice (a repeated INFO line), or one template
    # printed with other numbers of the same width (Triton's "Timeout 28: Found 1 live
    # models" then "Timeout 27: Found 0 ..."), shares its length with itself, which says
    # nothing about a wrap
    # (masking keeps a line's length, so only the lines long enough to set a width are masked)
    shapes = {_DIGITS.sub("0", line) for line in lines if len(line) >= WRAP_MIN}
    counts = Counter(len(line) for line in shapes)
    widths = [w for w, n in counts.items() if n >= WRAP_REPEATS]
    if widths:
        return max(widths)
    if not counts:
        return None
    longest = max(counts)
    for i, line in enumerate(lines[:-1]):
        tail = lines[i + 1]
        if (
            len(line) == longest
            and _CUT_WORD.search(line)
            and _TAIL_START.match(tail)
            and not _RECORD_START.match(tail)
        ):
            return longest
    return None


# A line cut inside a word ends in a letter or digit, and its tail starts with a lower-case
# letter (`...on the devi` / `ce`): what a fixed-width wrap does and a log line seldom does.
_CUT_WORD = re.compile(r"[A-Za-z0-9]$")
_DIGITS = re.compile(r"[0-9]")
_TAIL_START = re.compile(r"^[a-z]")


# `...: No such file or directory: ` and the value (a quoted path) alone on the next line: a
# paste wrapped the message where it printed its value.
_CUT_VALUE = re.compile(r":\s*$")
_VALUE_START = re.compile(r"^\s*[\"'/]")


def _join_cut_values(raw: list[str], out: list[str]) -> None:
    for i in range(len(out) - 1):
        head, nxt = out[i], out[i + 1]
        if not (head and nxt and _CUT_VALUE.search(head) and _VALUE_START.match(nxt)):
            continue
        if "Error" in head or "Exception" in head:
            out[i] = head.rstrip() + " " + nxt.strip()
            out[i + 1] = ""


def tidy_text(text: str) -> str:
    """Every line tidied; hard wraps joined onto their first line. Same number of lines."""
    raw = text.split("\n")
    width = _wrap_width([line.rstrip("\r") for line in raw])
    out = [tidy_line(line) for line in raw]
    if width is None:
        _join_cut_values(raw, out)
        return "\n".join(out)
    _join_cut_values(raw, out)
    i = 0
    while i < len(raw):
        head = i
        # a line cut at exactly the wrap width continues on the next one
        while (
            i + 1 < len(raw)
            and len(raw[i].rstrip("\r")) == width
            and raw[i + 1].strip()
            and not _RECORD_START.match(out[i + 1])
        ):
            out[head] += out[i + 1]
            out[i + 1] = ""
            i += 1
        i += 1
    return "\n".join(out)
