"""The per-rank table laid out for one terminal width: a pure layout and a rich renderable.

An operator reads this in a laptop terminal, a tmux split or a phone's SSH client, so the table
adapts to the width instead of letting rich squeeze every column into "lo…" and "0.06 G…":

- columns are chosen by priority (`COLUMNS`, most important first); a column that does not fit
  is dropped whole and the footer names it. A cell is never cut, so a number or a phase word
  on screen is always whole (`wide=True` shows every column and lets the terminal wrap);
- node names lose their common prefix (and a common domain suffix), never letters to an "…";
- a rank's last log line goes on its own line under the table, only for the ranks that matter
  (failing, unreachable, warned about, the slowest), cut at the width;
- one summary line above the table always fits (`summary.fitted_summary`).

`BootTable` computes the layout when rich renders it, at the width rich offers then, so a Live
display (`cluster boot`, `cluster status --watch`) follows a terminal resize on its next
refresh. Every cell goes through `cell()`: rich `Text`, never markup, so a log line's brackets
are shown as they are.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from orchestrator.supervisor.summary import fitted_summary, slowest
from orchestrator.supervisor.view import MB, BootView, GiB, RankRow, duration_text
from orchestrator.terminal import harmless
from orchestrator.wording import ranks_text

SEP = "  "  # between two columns
BAR = 8  # cells of the per-rank load bar
MAX_NOTES = 4  # last lines under the table: a 24-line terminal still shows every rank
Justify = Literal["left", "right"]


def cell(text: str, style: str = "") -> Text:
    """The one way text becomes a table cell: plain `Text` (user text is never markup), its
    control characters shown as `\\xNN` (a log line never drives the terminal)."""
    return Text(harmless(text), style=style, no_wrap=True, end="")


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    justify: Justify
    render: Callable[[RankRow, Names, bool], Text]
    # Room for a typical value ("12m05s", "16.0 MB/s") before it arrives, so columns do not
    # come and go between two refreshes as a "-" turns into a number.
    min_width: int = 0


@dataclass(frozen=True)
class Names:
    """Node names with their common prefix and suffix taken off, and the header that says so."""

    short: dict[str, str]
    header: str


def shorten_nodes(names: Sequence[str]) -> Names:
    """`sim-node0..7` -> `0..7` under the header `sim-node*`; `spark-01.lab` -> `01` under
    `spark-*.lab`. A prefix never ends inside a number or a word, and no name becomes empty."""
    distinct = sorted(set(names))
    if len(distinct) < 2:
        return Names({n: n for n in distinct}, "node")
    prefix = _common_prefix(distinct)
    while prefix and (
        prefix[-1].isdigit() or (prefix[-1].isalpha() and _cuts_word(distinct, len(prefix)))
    ):
        prefix = prefix[:-1]
    if prefix in distinct:
        prefix = ""  # `gpu` and `gpu-2`: the first would be left empty
    rests = [n[len(prefix) :] for n in distinct]
    suffix = _common_prefix([r[::-1] for r in rests])[::-1]
    suffix = suffix[suffix.find(".") :] if "." in suffix else ""
    if any(not r[: len(r) - len(suffix)] for r in rests):
        suffix = ""
    if not prefix and not suffix:
        return Names({n: n for n in distinct}, "node")
    short = {n: n[len(prefix) : len(n) - len(suffix)] for n in distinct}
    return Names(short, f"{prefix}*{suffix}")


def _common_prefix(names: Sequence[str]) -> str:
    """Character by character (names are not paths)."""
    first, last = min(names), max(names)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


def _cuts_word(names: Sequence[str], at: int) -> bool:
    """True when some name goes on with a letter at `at`: the prefix would split a word."""
    return any(len(n) > at and n[at].isalpha() for n in names)


# -- cells ----------------------------------------------------------------------------------

_PHASE_STYLE = {
    "serving": "green",
    "warming": "green",
    "loaded": "green",
    "loading": "cyan",
    "exited": "red",
    "unreachable": "red",
}


def _phase(r: RankRow, names: Names, uni: bool) -> Text:
    text = str(r.phase)
    if r.exit_code is not None or r.oom_killed:
        text += f" ({'OOMKilled' if r.oom_killed else r.exit_code})"
    elif r.slow:  # answering late: its readings on this row are stale
        return cell(f"{text} (slow)", "yellow")
    return cell(text, _PHASE_STYLE.get(r.phase, ""))


def _load(r: RankRow, names: Names, uni: bool) -> Text:
    if r.serving:
        return cell(r.serving, "green")
    if r.progress_pct is None:
        return cell("-")
    filled = max(0, min(BAR, round(r.progress_pct / 100 * BAR)))
    full, empty = ("█", "░") if uni else ("#", ".")
    text = Text(no_wrap=True, end="")
    text.append(full * filled, style="cyan")
    text.append(empty * (BAR - filled), style="dim")
    text.append(f" {r.progress_pct:3.0f}%")
    return text


def _rate(r: RankRow, names: Names, uni: bool) -> Text:
    if not r.rate_bps or r.phase != "loading":  # once loaded, the last rate means nothing
        return cell("-")
    mbps = r.rate_bps / MB
    return cell(f"{mbps:.1f} MB/s" if mbps < 10 else f"{mbps:.0f} MB/s")


def _gib(n: int | None) -> Text:
    return cell("-" if n is None else f"{n / GiB:.1f} GiB")


def _slack(r: RankRow, names: Names, uni: bool) -> Text:
    s = r.barrier_slack_s
    if s is not None and s < 0:
        return cell(f"-{duration_text(-s)}", "bold red")
    return cell(duration_text(s))


COLUMNS: tuple[Column, ...] = (
    # Most important first: the order columns are kept in as the terminal narrows.
    Column("rank", "rank", "right", lambda r, n, u: cell(str(r.rank))),
    Column("phase", "phase", "left", _phase, len("loading")),
    Column("load", "load", "left", _load, BAR + len(" 100%")),
    Column(
        "eta",
        "ETA",
        "right",
        lambda r, n, u: cell(duration_text(r.eta_s) if r.phase == "loading" else "-"),
        len("12m05s"),
    ),
    Column("rate", "rate", "right", _rate, len("16.0 MB/s")),
    Column("node", "node", "left", lambda r, n, u: cell(n.short.get(r.node, r.node))),
    Column("avail", "MemAvail", "right", lambda r, n, u: _gib(r.mem_available), len("123.4 GiB")),
    Column("slack", "slack", "right", _slack, len("-1m05s")),
    Column(
        "read",
        "read",
        "right",
        lambda r, n, u: cell(f"{r.bytes_read / GiB:.2f} GiB" if r.bytes_read else "-"),
        len("12.34 GiB"),
    ),
    Column("free", "MemFree", "right", lambda r, n, u: _gib(r.mem_free), len("123.4 GiB")),
    Column("cached", "Cached", "right", lambda r, n, u: _gib(r.cached), len("123.4 GiB")),
    Column("quiet", "quiet", "right", lambda r, n, u: cell(duration_text(r.signal_age_s))),
)
PRIORITY = tuple(c.key for c in COLUMNS)
# Left to right on screen: the node next to its rank, memory and slack after the load.
DISPLAY = ("rank", "node", "phase", "load", "eta", "rate", "avail", "slack", *PRIORITY[8:])


@dataclass(frozen=True)
class Layout:
    """What fits in `width`: the lines to print and, for tests, the choice behind them."""

    width: int | None
    shown: tuple[str, ...]  # column keys on screen, in priority order
    hidden: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]  # per rank, the shown columns' plain text (display order)
    lines: tuple[Text, ...]


def lay_out(view: BootView, width: int | None, *, unicode: bool = True) -> Layout:
    """The table for `width` columns (None: every column, however wide)."""
    names = shorten_nodes([r.node for r in view.ranks])
    rendered = {c.key: (c, [c.render(r, names, unicode) for r in view.ranks]) for c in COLUMNS}
    header_of = {c.key: (names.header if c.key == "node" else c.header) for c in COLUMNS}
    widths = {
        k: max([c.min_width, len(header_of[k])] + [t.cell_len for t in texts])
        for k, (c, texts) in rendered.items()
    }
    shown: list[str] = []
    used = 0
    for key in PRIORITY:
        need = widths[key] + (len(SEP) if shown else 0)
        if width is not None and used + need > width:
            break  # this one and every less important one: dropped whole
        shown.append(key)
        used += need
    hidden = tuple(k for k in PRIORITY if k not in shown)
    order = [k for k in DISPLAY if k in shown]

    def line(parts: Sequence[tuple[str, Text]]) -> Text:
        out = Text(no_wrap=True, end="")
        for i, (key, text) in enumerate(parts):
            if i:
                out.append(SEP)
            pad = " " * (widths[key] - text.cell_len)
            if rendered[key][0].justify == "right":
                out.append(pad)
                out.append_text(text)
            else:
                out.append_text(text)
                if i < len(parts) - 1:  # no trailing spaces
                    out.append(pad)
        return out

    header = line([(k, cell(header_of[k], "bold")) for k in order])
    rule = cell("─" * used if unicode else "-" * used, "dim")
    rows = [line([(k, rendered[k][1][i]) for k in order]) for i in range(len(view.ranks))]
    lines = [_fit(cell(f"{view.recipe} · run {view.run_id}{_source(view)}", "dim"), width)]
    lines.append(_fit(fitted_summary(view, width), width))
    lines += [_fit(line, width) for line in serving_lines(view)]
    lines += [header, rule, *rows]
    lines += [_fit(n, width) for n in notes(view)]
    if hidden and width is not None:
        dropped = ", ".join(header_of[k] for k in hidden)
        footer = f"not shown at {width} columns: {dropped} (--wide shows all)"
        # Prose, so it wraps (at commas and spaces) rather than lose the names at the end.
        lines += [cell(part, "dim") for part in textwrap.wrap(footer, max(width, 1))]
    cells = tuple(tuple(rendered[k][1][i].plain for k in order) for i in range(len(view.ranks)))
    return Layout(width, tuple(shown), hidden, cells, tuple(lines))


def _source(view: BootView) -> str:
    return " · derived live from the nodes" if view.source == "live" else ""


def _fit(text: Text, width: int | None) -> Text:
    """A line of prose (not a cell): cut at the width with an ellipsis."""
    text.no_wrap = True
    text.end = ""
    if width is not None and text.cell_len > width:
        text.truncate(width, overflow="ellipsis")
    return text


def _seconds(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s"


def serving_lines(view: BootView) -> list[Text]:
    """After READY, while the serving watch runs: uptime, the canary's last latency and its
    p50/p99 over the hour, tokens/s, running/waiting requests; then the last incident (or a
    restart waiting, with why). Nothing before READY."""
    sv = view.serving
    if sv is None:
        return []
    parts = [f"serving {duration_text(sv.uptime_s)}"]
    if sv.attempt:
        parts[0] += f" (attempt {sv.attempt})"
    if sv.canary_failing_s is not None:
        why = f": {sv.canary_error}" if sv.canary_error else ""
        parts.append(f"canary failing {duration_text(sv.canary_failing_s)}{why}")
    else:
        parts.append(
            f"canary {_seconds(sv.canary_last_s)} "
            f"(p50 {_seconds(sv.canary_p50_s)}, p99 {_seconds(sv.canary_p99_s)})"
        )
    if sv.tokens_per_s is not None:
        parts.append(f"{sv.tokens_per_s:.1f} tok/s")
    if sv.running is not None and sv.waiting is not None:
        parts.append(f"{sv.running:.0f} running, {sv.waiting:.0f} waiting")
    if sv.health_ok is False:
        parts.append("/health failing")
    style = "yellow" if sv.canary_failing_s is not None or sv.health_ok is False else "green"
    out = [cell(" · ".join(parts), style)]
    if sv.restart_wait:
        out.append(cell(f"restart waits: {sv.restart_wait}", "yellow"))
    if sv.last_incident:
        count = f" (of {sv.incidents})" if sv.incidents > 1 else ""
        out.append(cell(f"last incident{count}: {sv.last_incident}", "red"))
    else:
        out.append(cell("no incident since READY", "dim"))
    return out


def notes(view: BootView) -> list[Text]:
    """`rank K: <last line>` for the ranks that matter: failing or unreachable first, then the
    slowest loader, then those a watcher warned about; at most MAX_NOTES, and a line naming
    the ranks left out."""
    if view.serving is not None:  # the serving watch's view: every rank's last line
        return _serving_notes(view)
    warned = {w.rank for w in view.warnings if w.rank is not None}
    if view.verdict is not None and view.verdict.rank is not None:
        warned.add(view.verdict.rank)
    slow = slowest(view.ranks)
    failed = [r for r in view.ranks if r.oom_killed or r.exit_code not in (None, 0)]
    picked = [(r, "red") for r in view.ranks if r in failed or r.unreachable]
    if slow is not None:
        picked.append((slow, "cyan"))
    picked += [(r, "yellow") for r in view.ranks if r.rank in warned]
    wanted: list[tuple[RankRow, str]] = []
    for r, style in picked:  # each rank once, in the first (most important) role it has
        if (r.unreachable or r.last_line) and all(r.rank != w.rank for w, _ in wanted):
            wanted.append((r, style))
    out = []
    for r, style in wanted[:MAX_NOTES]:
        text = Text(no_wrap=True, end="")
        text.append(f"rank {r.rank}: ", style=style)
        text.append_text(cell(" ".join((r.unreachable or r.last_line).split())))
        out.append(text)
    if rest := sorted(r.rank for r, _ in wanted[MAX_NOTES:]):
        also = f"also {ranks_text(rest)}: `cluster logs --rank K` shows a rank's lines"
        out.append(cell(also, "dim"))
    return out


def _serving_notes(view: BootView) -> list[Text]:
    """While serving, every rank's last line (8 ranks: the title, the summary, two serving
    lines, the table and these fit a 24-line terminal); a rank that died or is unreachable in
    red, one a watcher warned about in yellow."""
    warned = {w.rank for w in view.warnings if w.rank is not None}
    out = []
    for r in view.ranks:
        if not (r.unreachable or r.last_line):
            continue
        bad = r.unreachable or r.oom_killed or r.exit_code not in (None, 0)
        style = "red" if bad else "yellow" if r.rank in warned else "dim"
        text = Text(no_wrap=True, end="")
        text.append(f"rank {r.rank}: ", style=style)
        text.append_text(cell(" ".join((r.unreachable or r.last_line).split())))
        out.append(text)
    return out


class BootTable:
    """A renderable laid out at render time: the width rich offers now (a resize included)."""

    def __init__(self, view: BootView, *, wide: bool = False) -> None:
        self.view = view
        self.wide = wide

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        unicode = options.encoding.lower().startswith("utf")
        layout = lay_out(self.view, None if self.wide else options.max_width, unicode=unicode)
        yield from _with_newlines(layout.lines, wrap=self.wide)


def _with_newlines(lines: Sequence[Text], *, wrap: bool) -> Iterator[Text]:
    for text in lines:
        text.end = "\n"
        text.no_wrap = not wrap
        yield text
