"""structlog, configured once: a console renderer for people, JSON lines for machines.

Logs go to stderr so that `--json` documents on stdout stay clean. Logs are for people;
events (the run store's events.jsonl) are for the program.

structlog is imported by the first module that logs (`get_logger`), not by every command:
`cluster postmortem` and `cluster status` log nothing, and the import was ~40 ms of their
start-up. `configure_logging` keeps the choice and applies it when structlog arrives.
"""

from __future__ import annotations

import logging
import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from orchestrator.redact import redact

if TYPE_CHECKING:
    from structlog.typing import EventDict


class LogFormat(StrEnum):
    console = "console"
    json = "json"


def _stderr_logger(*_args: object) -> Any:
    # Whatever sys.stderr is now (not the one at configure time): a redirected or captured
    # stderr that was closed since must never swallow, or crash, a later log line.
    import structlog

    return structlog.PrintLogger(file=sys.stderr)


def _redact_event(_logger: object, _name: str, event: EventDict) -> EventDict:
    """Secrets never reach a log line: the run store's redaction, applied to every field."""
    return dict(redact(event))


_chosen: tuple[LogFormat, bool] | None = None  # what configure_logging was asked for
_applied = False


def configure_logging(fmt: LogFormat = LogFormat.console, *, verbose: bool = False) -> None:
    global _chosen, _applied
    _chosen, _applied = (fmt, verbose), False
    # asyncssh logs every channel at INFO; keep it quiet unless asked.
    logging.getLogger("asyncssh").setLevel(logging.DEBUG if verbose else logging.WARNING)
    if "structlog" in sys.modules:  # a module that logs is already loaded: apply it now
        _apply()


def _apply() -> None:
    global _applied
    import structlog

    if _chosen is None or _applied:
        return
    fmt, verbose = _chosen
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
    _applied = True


def get_logger(name: str) -> Any:
    """A structlog logger, configured as `configure_logging` chose (structlog's defaults when
    nothing chose yet, as in a library call or a test)."""
    import structlog

    _apply()
    return structlog.get_logger(name)
