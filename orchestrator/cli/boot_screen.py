"""What a boot shows on the terminal: its steps, the live per-rank table, and the outcome.
Shared by `cluster boot` and `cluster supervise` (so neither command's module imports the
other's)."""

from __future__ import annotations

from rich.live import Live
from rich.text import Text

from orchestrator.cli.output import console, err_console, harmless, plain, styled
from orchestrator.models.run import Outcome
from orchestrator.postmortem.report import render_rich
from orchestrator.run.boot import BootResult
from orchestrator.supervisor.summary import PlainProgress
from orchestrator.supervisor.table import BootTable
from orchestrator.supervisor.view import BootView


class LiveUI:
    """Steps scroll above; the per-rank table refreshes in place (the same renderer as
    `cluster status --watch`), laid out for the terminal's width at each refresh."""

    def __init__(self, live: Live | None, *, wide: bool = False) -> None:
        self.live = live
        self.wide = wide
        self.steps: list[str] = []
        self.last: BootView | None = None
        self.printed_warnings = 0
        # Not a terminal (a log file, nohup, --detach): a plain progress line now and then.
        self.plain = PlainProgress() if live is None else None

    def progress(self, text: str) -> None:
        """Before the first table (preflight): one line that changes in place."""
        if self.live is not None and self.last is None:
            self.live.update(Text(text, no_wrap=True, overflow="ellipsis"))

    def step(self, name: str, detail: str = "") -> None:
        line = f"[bold]{name}[/] {detail}".rstrip()
        if self.live is not None:
            self.live.console.print(line)
        else:
            err_console.print(line)

    def view(self, view: BootView) -> None:
        self.last = view
        for w in view.warnings[self.printed_warnings :]:
            # A warning quotes log lines: plain text, never markup or a control sequence.
            text = Text.assemble(
                ("warning ", "yellow"),
                harmless(w.message),
                "\n  ",
                (f"→ {harmless(w.advice)}", "dim"),
            )
            (self.live.console if self.live else err_console).print(text)
        self.printed_warnings = len(view.warnings)
        if self.live is not None:
            self.live.update(BootTable(view, wide=self.wide))
        elif self.plain is not None and (line := self.plain.due(view)) is not None:
            err_console.print(line, markup=False, highlight=False, soft_wrap=True)


def print_outcome(result: BootResult, *, wide: bool = False) -> None:
    v = result.verdict
    run = result.run
    if result.last_view is not None:
        console.print(BootTable(result.last_view, wide=wide), soft_wrap=wide)
    if v.outcome is Outcome.READY:
        console.print(styled("bold green", "READY ", v.message), soft_wrap=True)
        if result.endpoint:
            console.print(plain(f"endpoint: {result.endpoint}/v1/chat/completions"))
            host_port = result.endpoint.removeprefix("http://")
            port = host_port.rsplit(":", 1)[1]
            console.print(f"from a laptop: ssh -L {port}:{host_port} <user>@<head>")
        console.print(plain(f"run directory: {run.dir}"), soft_wrap=True)
        return
    console.print(
        styled("bold red", f"{v.outcome.value if v.outcome else 'FAILED'} ", v.message),
        soft_wrap=True,
    )
    if v.advice:
        console.print(plain(f"  → {v.advice}"), soft_wrap=True)
    if result.diagnosis is not None:
        console.print(render_rich(result.diagnosis))
