"""Show a `Diagnosis`: rich for a terminal, Markdown for a ticket, JSON for a program.

All three say the same things in the same order: the verdict paragraph, the per-rank table
(last phase, exit code, OOMKilled, last line), what to change in the recipe, the matched
signatures with their meaning, remedy and evidence (file:line), and the merged timeline.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from orchestrator.postmortem.diagnose import render_change
from orchestrator.postmortem.model import Diagnosis, Evidence, TimelineEntry
from orchestrator.terminal import harmless

TIMELINE_SHOWN = 30  # entries shown for people (the JSON keeps up to 200)
LAST_LINE_CHARS = 100

_ROLE_STYLE = {
    "root-cause": "bold red",
    "same-cause": "red",
    "other-cause": "red",
    "cascade": "yellow",
    "ok": "green",
    "unknown": "dim",
}


def _title(d: Diagnosis) -> str:
    src = d.source
    what = f"run {src.run_id}" if src.kind == "run" and src.run_id else f"logs in {src.path}"
    extra = ", ".join(x for x in (src.recipe, src.engine, f"{len(d.ranks)} ranks") if x)
    return f"postmortem: {what} ({extra})"


def _rank_sure(d: Diagnosis) -> str:
    """The category's confidence is measured; the blame's (which rank) is said beside it when
    it is not high."""
    rc = d.root_cause
    return f" (rank: {rc.confidence})" if rc is not None and rc.confidence != "high" else ""


def _clip(text: str, limit: int) -> str:
    text = harmless(" ".join(text.split()))  # a log's ESC/OSC never reaches the terminal
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _exit(code: int | None, status: str | None) -> str:
    if code is not None:
        return str(code)
    return status or "—"


def _oom(value: bool | None) -> str:
    return "—" if value is None else ("yes" if value else "no")


def _timeline_window(entries: Sequence[TimelineEntry], d: Diagnosis) -> list[TimelineEntry]:
    """The entries around the failure (or the last ones of a healthy boot)."""
    if len(entries) <= TIMELINE_SHOWN:
        return list(entries)
    anchor = d.first_error.ts if d.first_error is not None else None
    if anchor is None:
        return list(entries[-TIMELINE_SHOWN:])
    idx = next((i for i, e in enumerate(entries) if e.ts is not None and e.ts >= anchor), 0)
    start = max(0, min(idx - TIMELINE_SHOWN // 3, len(entries) - TIMELINE_SHOWN))
    return list(entries[start : start + TIMELINE_SHOWN])


# -- rich -----------------------------------------------------------------------------------------


def render_rich(d: Diagnosis) -> RenderableType:
    parts: list[RenderableType] = []
    head = Text()
    head.append("category ", style="dim")
    head.append(d.category, style="bold")
    if d.closest is not None:
        head.append(f" (closest: {d.closest})")
    head.append("   outcome ", style="dim")
    head.append(d.outcome)
    if d.root_cause is not None:
        head.append("   first failing rank ", style="dim")
        head.append(str(d.root_cause.rank), style="bold red")
    if d.confidence is not None:
        head.append("   confidence ", style="dim")
        head.append(f"{d.confidence:.2f}{_rank_sure(d)}")
    elif d.root_cause is not None:
        head.append("   confidence ", style="dim")
        head.append(d.root_cause.confidence)
    named = Text()
    if d.named_by:
        named.append("named by ", style="dim")
        named.append(harmless(d.named_by))
    style = "green" if d.category == "ready" else "red"
    parts.append(
        Panel(
            Group(head, named, Text(""), Text(d.verdict)),
            title=escape(_title(d)),
            title_align="left",
            border_style=style,
        )
    )

    table = Table(title="ranks", title_justify="left", expand=False)
    for col, justify in (
        ("rank", "right"),
        ("node", "left"),
        ("role", "left"),
        ("last phase", "left"),
        ("exit", "right"),
        ("OOMKilled", "left"),
        ("last line", "left"),
    ):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for r in d.ranks:
        last = r.last_line
        last_text = ""
        if last is not None:
            last_text = (
                escape(_clip(last.text, LAST_LINE_CHARS)) + f"  [dim]{escape(last.where)}[/]"
            )
        table.add_row(
            str(r.rank),
            escape(r.node or ""),
            f"[{_ROLE_STYLE[r.role]}]{r.role}[/]",
            r.last_phase,
            _exit(r.exit_code, r.status),
            _oom(r.oom_killed),
            last_text,
        )
    parts.append(table)

    if d.recipe_changes:
        lines = Text()
        for i, ch in enumerate(d.recipe_changes):
            lines.append("\n" if i else "")
            lines.append("• ")
            lines.append(render_change(ch, recipe_known=d.source.kind == "run"), style="bold")
        parts.append(Panel(lines, title="what to change in the recipe", title_align="left"))

    for s in d.signatures:
        body = Text()
        body.append(f"{s.category}", style="bold")
        body.append(f" · {s.role} · ranks {', '.join(map(str, s.ranks))} · {s.count} match(es)\n")
        body.append(s.meaning + "\n", style="")
        body.append("remedy: ", style="bold")
        body.append(s.remedy + "\n")
        if s.changes:
            body.append("changes: ", style="bold")
            body.append("; ".join(s.changes) + "\n")
        for ev in s.evidence:
            body.append(f"  {ev.where}", style="cyan")
            body.append(f"  {_clip(ev.text, 160)}\n")
        body.append("sources: " + ", ".join(s.sources), style="dim")
        parts.append(Panel(body, title=escape(f"{s.id}: {s.title}"), title_align="left"))

    entries = _timeline_window(d.timeline, d)
    if entries:
        tl = Table(title="timeline (all ranks, merged)", title_justify="left")
        for col in ("time", "rank", "what", "where"):
            tl.add_column(col, overflow="fold")
        for e in entries:
            where = f"{e.file}:{e.line}" if e.file else ""
            tl.add_row(
                e.time or "—",
                "" if e.rank is None else str(e.rank),
                escape(harmless(e.what)),
                escape(harmless(where)),
            )
        parts.append(tl)
    if d.notes:
        parts.append(Text("notes:\n" + "\n".join(f"  - {n}" for n in d.notes), style="dim"))
    return Group(*parts)


# -- markdown --------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _ev_md(ev: Evidence) -> str:
    time = f" ({ev.time})" if ev.time else ""
    return f"- {_code(ev.where)}{time}: {_code(_clip(ev.text, 300))}"


def render_markdown(d: Diagnosis) -> str:
    out: list[str] = [f"# {_title(d)}", ""]
    facts = [f"**Category:** `{d.category}`"]
    if d.closest is not None:
        facts.append(f"**closest:** `{d.closest}`")
    facts.append(f"**outcome:** {d.outcome}")
    if d.root_cause is not None:
        facts.append(f"**first failing rank:** {d.root_cause.rank}")
    if d.confidence is not None:
        facts.append(f"**confidence:** {d.confidence:.2f}{_rank_sure(d)}")
    elif d.root_cause is not None:
        facts.append(f"**confidence:** {d.root_cause.confidence}")
    if d.named_by:
        facts.append(f"**named by:** {_cell(d.named_by)}")
    out += [" · ".join(facts), "", d.verdict, ""]

    out += ["## Ranks", "", "| rank | node | role | last phase | exit | OOMKilled | last line |"]
    out.append("|---:|---|---|---|---:|---|---|")
    for r in d.ranks:
        last = (
            f"{_code(_clip(r.last_line.text, LAST_LINE_CHARS))} ({r.last_line.where})"
            if r.last_line
            else ""
        )
        out.append(
            f"| {r.rank} | {_cell(r.node or '')} | {r.role} | {r.last_phase} | "
            f"{_exit(r.exit_code, r.status)} | {_oom(r.oom_killed)} | {_cell(last)} |"
        )
    out.append("")
    why = [f"- rank {r.rank}: {r.reason}" for r in d.ranks if r.role != "ok"]
    if why:
        out += [*why, ""]

    if d.recipe_changes:
        out += ["## What to change in the recipe", ""]
        known = d.source.kind == "run"
        out += [f"- {_code(render_change(ch, recipe_known=known))}" for ch in d.recipe_changes]
        out.append("")

    if d.signatures:
        out += ["## Matched signatures", ""]
        for s in d.signatures:
            ranks = ", ".join(map(str, s.ranks))
            out += [
                f"### `{s.id}`: {s.title}",
                "",
                f"`{s.category}` · {s.role} · ranks {ranks} · {s.count} match(es)",
                "",
                s.meaning,
                "",
                f"**Remedy:** {s.remedy}",
                "",
            ]
            if s.changes:
                out += ["**Changes:** " + "; ".join(_code(c) for c in s.changes), ""]
            out += ["Evidence:", ""] + [_ev_md(ev) for ev in s.evidence] + [""]
            out += ["Sources: " + ", ".join(s.sources), ""]

    entries = _timeline_window(d.timeline, d)
    if entries:
        out += ["## Timeline (all ranks, merged)", "", "| time | rank | what | where |"]
        out.append("|---|---:|---|---|")
        for e in entries:
            where = f"{e.file}:{e.line}" if e.file else ""
            rank = "" if e.rank is None else str(e.rank)
            out.append(f"| {e.time or '—'} | {rank} | {_cell(e.what)} | {_cell(where)} |")
        out.append("")
    if d.notes:
        out += ["## Notes", ""] + [f"- {n}" for n in d.notes] + [""]
    return "\n".join(out).rstrip() + "\n"
