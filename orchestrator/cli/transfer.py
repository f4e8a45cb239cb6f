"""The per-node transfer bars that `image push` and `weights push` both draw: bytes received,
rate and ETA while a stream flows, then a state word. Its own module so that only the commands
that push pay for importing rich.progress."""

from __future__ import annotations

from typing import Self

from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from orchestrator.cli.output import err_console


class TransferDisplay:
    """A bar per name (a node, or "sent" for the source), made on first use."""

    def __init__(self) -> None:
        self.progress = Progress(
            TextColumn("{task.description:<18}"),
            BarColumn(bar_width=24),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[state]}"),
            console=err_console,
            transient=False,
        )
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> Self:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def task(self, name: str, total: int | None = None) -> TaskID:
        """The bar of `name`; `total` is used only when the bar is made."""
        if name not in self.tasks:
            self.tasks[name] = self.progress.add_task(name, total=total, state="")
        return self.tasks[name]
