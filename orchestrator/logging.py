"""structlog, configured once: a console renderer for people, JSON lines for machines.

Logs go to stderr so that `--json` documents on stdout stay clean. Logs are for people;
events (the run store's events.jsonl) are for the program.
"""

from __future__ import annotations

import logging
import sys
from enum import StrEnum

import structlog
from structlog.typing import EventDict

from orchestrator.redact import redact


class LogFormat(StrEnum):
    console = "console"
    json = "json"


def _stderr_logger(*_args: object) -> structlog.PrintLogger:
    # Whatever sys.stderr is now (not the one at configure time): a redirected or captured
    # stderr that was closed since must never swallow, or crash, a later log line.
    return structlog.PrintLogger(file=sys.stderr)


def _redact_event(_logger: object, _name: str, event: EventDict) -> EventDict:
    """Secrets never reach a log line: the run store's redaction, applied to every field."""
    return dict(redact(event))


def configure_logging(fmt: LogFormat = LogFormat.console, *, verbose: bool = False) -> None:
    level = logging.DEBUG if verbose else logging.WARNING
    renderer: structlog.types.Processor
    if fmt is LogFormat.json:
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact_event,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
    # asyncssh logs every channel at INFO; keep it quiet unless asked.
    logging.getLogger("asyncssh").setLevel(logging.DEBUG if verbose else logging.WARNING)
