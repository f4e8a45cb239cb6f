"""Shared output helpers for the CLI: rich for people, one JSON document for machines."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.text import Text

from orchestrator.redact import redact
from orchestrator.terminal import harmless

__all__ = ["console", "err_console", "harmless", "plain", "print_json", "styled"]

# Rich assumes 80 columns when output is not a terminal (CI logs, pipes); tables then fold.
# A wider default keeps a row per node on one line in logs; $COLUMNS still wins.
_WIDTH = None if sys.stdout.isatty() or "COLUMNS" in os.environ else 160
console = Console(highlight=False, width=_WIDTH)
err_console = Console(stderr=True, highlight=False, width=_WIDTH)


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
