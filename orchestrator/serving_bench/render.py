"""The bench's tables: one run's levels, and two runs side by side (`--compare`)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from orchestrator.models.bench import BenchReport, LevelResult, Stat


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def _stat(s: Stat, wide: bool) -> str:
    """mean/p50/p99 in ms (wide), else p50/p99."""
    if wide:
        return f"{ms(s.mean)}/{ms(s.p50)}/{ms(s.p99)}"
    return f"{ms(s.p50)}/{ms(s.p99)}"


def level_label(level: LevelResult) -> str:
    return f"d{level.depth} c{level.concurrency}"


# Below this many columns the latencies show p50/p99 only (the means stay in bench.json and
# --json): nine columns of mean/p50/p99 need ~115, and an 80-column terminal cut them to "100/1…".
WIDE_COLUMNS = 120


def render_report(report: BenchReport, width: int = WIDE_COLUMNS) -> Table:
    cfg = report.config
    wide = width >= WIDE_COLUMNS
    table = Table(
        title=f"{report.recipe} · run {report.run_id} · {report.model} · "
        f"pp{cfg.prompt_len}/tg{cfg.output_len} · seed {cfg.seed}",
        title_justify="left",
        caption="latencies in ms: " + ("mean/p50/p99" if wide else "p50/p99 (means: --json)"),
        caption_justify="left",
    )
    for col in ("depth", "conc", "tok/s", "req/s", "TTFT", "TPOT", "ITL", "E2E"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("err", justify="left", min_width=3)  # "n/N: last error", wrapped
    for lv in report.levels:
        errors = Text("0")
        if lv.errors:
            errors = Text(f"{lv.errors}/{lv.requests}: {lv.last_error}", style="red")
        table.add_row(
            str(lv.depth),
            str(lv.concurrency),
            f"{lv.output_tok_s:.1f}",
            f"{lv.req_s:.2f}",
            _stat(lv.ttft, wide),
            _stat(lv.tpot, wide),
            _stat(lv.itl, wide),
            _stat(lv.e2e, wide),
            errors,
        )
    return table


def cpu_line(report: BenchReport) -> str:
    """What the client itself cost at its highest concurrency level."""
    if not report.levels:
        return ""
    top = max(report.levels, key=lambda lv: (lv.concurrency, lv.depth))
    return (
        f"client CPU at c{top.concurrency} (d{top.depth}): {top.client_cpu_s:.2f} s over "
        f"{top.duration_s:.1f} s = {100 * top.client_cpu_share:.0f}% of one core"
    )


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == 0:
        return "-"
    return f"{b / a:.2f}x"


def render_compare(a: BenchReport, b: BenchReport) -> Table:
    """Levels both runs measured, A then B then B/A (output tok/s, TTFT p50, TPOT p50)."""
    table = Table(
        title=f"A = {a.recipe} · run {a.run_id}   B = {b.recipe} · run {b.run_id}",
        title_justify="left",
        caption="TTFT and TPOT: p50 in ms",
        caption_justify="left",
    )
    for col in (
        "level",
        "A tok/s",
        "B tok/s",
        "B/A",
        "A TTFT",
        "B TTFT",
        "A TPOT",
        "B TPOT",
        "B/A TPOT",
    ):
        table.add_column(col, justify="right")
    theirs = {(lv.depth, lv.concurrency): lv for lv in b.levels}
    for la in a.levels:
        lb = theirs.get((la.depth, la.concurrency))
        if lb is None:
            continue
        table.add_row(
            level_label(la),
            f"{la.output_tok_s:.1f}",
            f"{lb.output_tok_s:.1f}",
            _ratio(la.output_tok_s, lb.output_tok_s),
            ms(la.ttft.p50),
            ms(lb.ttft.p50),
            ms(la.tpot.p50),
            ms(lb.tpot.p50),
            _ratio(la.tpot.p50, lb.tpot.p50),
        )
    return table
