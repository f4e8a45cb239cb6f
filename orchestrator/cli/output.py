"""Shared output helpers for the CLI: rich for people, one JSON document for machines."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.text import Text

from orchestrator.redact import redact
from orchestrator.terminal import harmless

__all__ = [
    "console",
    "err_console",
    "harmless",
    "plain",
    "print_columns",
    "print_json",
    "styled",
]

# Rich assumes 80 columns when output is not a terminal (CI logs, pipes); tables then fold.
# A wider default keeps a row per node on one line in logs; $COLUMNS still wins.
_WIDTH = None if sys.stdout.isatty() or "COLUMNS" in os.environ else 160
console = Console(highlight=False, width=_WIDTH)
err_console = Console(stderr=True, highlight=False, width=_WIDTH)


def live_terminal() -> bool:
    """A table redrawn in place needs a terminal that can move its cursor: not a pipe or a
    file (plain progress lines there), not TERM=dumb."""
    return console.is_terminal and not console.is_dumb_terminal


def print_json(payload: Any) -> None:
    """Print one JSON document on stdout (models are dumped in JSON mode), secrets redacted."""
    if isinstance(payload, BaseModel):
        payload = payload.model_dump(mode="json")
    elif isinstance(payload, list):
        payload = [p.model_dump(mode="json") if isinstance(p, BaseModel) else p for p in payload]
    sys.stdout.write(json.dumps(redact(payload), indent=2, sort_keys=False, default=str) + "\n")


def plain(text: object) -> Text:
    """User or node text for a table cell or a print: never markup, never a control sequence."""
    return Text(harmless(str(text)))


def styled(style: str, lead: str, text: object) -> Text:
    """`lead` in `style`, then user text as `plain` (e.g. a red "error:" before a path)."""
    return Text.assemble((lead, style), harmless(str(text)))


RICH_TABLE_MAX_ROWS = 200
"""Past this many rows a table is printed as aligned plain columns: rich lays out a 10,000-row
table in ~14 s (every cell measured and wrapped), plain columns in 0.1 s."""


def print_columns(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Rows as left-aligned columns under a header: for tables too long for rich's layout."""
    cells = [[harmless(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    out = [harmless(title), "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    out.extend("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells)
    sys.stdout.write("\n".join(line.rstrip() for line in out) + "\n")
