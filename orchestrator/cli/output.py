"""Shared output helpers for the CLI: rich for people, one JSON document for machines."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.text import Text

from orchestrator.redact import redact

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


# C0 controls but tab, DEL and C1: ESC starts CSI/OSC sequences (colours, titles, hyperlinks,
# clipboard writes), BEL rings, CR rewrites the line. A log line or a file name from a node is
# not ours to let drive the operator's terminal; the preserved files keep every byte.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def harmless(text: str) -> str:
    """`text` with every terminal control character shown as a visible `\\xNN` escape."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def plain(text: object) -> Text:
    """User or node text for a table cell or a print: never markup, never a control sequence."""
    return Text(harmless(str(text)))


def styled(style: str, lead: str, text: object) -> Text:
    """`lead` in `style`, then user text as `plain` (e.g. a red "error:" before a path)."""
    return Text.assemble((lead, style), harmless(str(text)))
