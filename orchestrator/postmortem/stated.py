"""Lines that state a failure, whatever printed them: the evidence that *something* failed.

A log in which no signature, exception or exit code names a failure may still say one in plain
words: `ERROR Model actor is out of memory.`, `level=error msg="llama runner process has
terminated"`, `panic: ...`, `Segmentation fault (core dumped)`. Without this the postmortem
answered such a log "no failure found", which sends the on-call engineer to wait for a boot
that is already dead; with it the answer is "failed, cause not named" with the line to read
(`outcome: failed-unknown`), and the second opinion reads the line's words.

A line's own level decides first: a line printed at ERROR/FATAL/CRITICAL (or `level=error`,
glog's `E1204`, `"levelname": "ERROR"`) states a failure; one printed at DEBUG/INFO/WARNING
does not, whatever its words (engines log "failed to import X, falling back" at WARNING on
healthy boots). A line without a visible level states one when it says so in words (failed,
out of memory, segmentation fault, core dumped, aborted, a non-zero exit code or status).
FastChat's `| ERROR | stderr |` (its logger's label for everything a worker writes to stderr,
progress bars included) is not a level.
"""

from __future__ import annotations

import re

# The scan's prefilter (case-sensitive bytes, one automaton pass): a line holding none of
# these is never decoded for this purpose.
KEYWORDS: tuple[bytes, ...] = (
    b"ERROR",
    b"FATAL",
    b"CRITICAL",
    b"PANIC",
    b"panic:",
    b"level=error",
    b"level=fatal",
    b'"level":"error"',
    b'"level": "error"',
    b"[error]",
    b"[fatal]",
    b"Error:",
    b"error:",
    b"failed",
    b"Failed",
    b"FAILED",
    b"out of memory",
    b"Out of memory",
    b"Segmentation fault",
    b"core dumped",
    b"Aborted",
    b"*** SIG",
    b"ggml_abort+0x",
    b"exit code",
    b"exit status",
    b"Exit code",
    b"Exit status",
    b"exited with",
    b"ould not",
    b"ouldn't",
    b"annot ",
    b"nable to",
    b"unhealthy",
    b"health check",
)

_NOT_A_LEVEL = re.compile(r"\|\s*ERROR\s*\|\s*stderr\s*\|")
_ERROR_LEVEL = re.compile(
    r"\b(?:ERROR|FATAL|CRITICAL|PANIC)\b"
    r"|\blevel=(?:error|fatal|panic)\b"
    r'|"level(?:name)?":\s*"(?:error|ERROR|fatal|FATAL|CRITICAL|critical)"'
    r"|\[(?:error|fatal)\]"
    r"|(?:^|[\s:])\[?E\d{3,4} \d\d:"  # glog, and torch's "[rank1]:[E122 20:05:19..."
    r"|^panic: "
)
_QUIET_LEVEL = re.compile(
    r"\b(?:DEBUG|INFO|WARNING|WARN|NOTICE|TRACE)\b"
    r"|\blevel=(?:debug|info|warn|warning|trace)\b"
    r'|"level(?:name)?":\s*"(?:debug|info|warn|warning|DEBUG|INFO|WARNING)"'
    r"|(?:^|[\s:])\[?[IWD]\d{3,4} \d\d:"
    r"|\[[IWD](?::|\])"  # onnxruntime's [W:onnxruntime:...], docker model runner's [W]
    r"|\b[A-Z][A-Za-z]*Warning\b"  # RuntimeWarning: Failed to read commit hash
    r"|\b[Ww]arning:"  # ollama's "routes.go:716: Warning: ... nvidia-smi command failed"
)
# A health check failing happens only while a server serves: such a line is a failure wherever it
# stands, even before the engine's own serving lines (an engine prints its throughput on while
# its supervisor gives up on it).
_SERVING_HEALTH_FAILED = (
    r"\b(?:marking it |marked |is |became |as )unhealthy\b"
    r"|\b[Hh]ealth ?check (?:failed|timed out)|\b[Dd]idn't receive health check response"
)
_HEALTH = re.compile(_SERVING_HEALTH_FAILED)
_SAYS_FAILED = re.compile(
    r"\b(?:[Ff]ailed|FAILED|[Oo]ut of memory|Segmentation fault|core dumped|Aborted)\b"
    r"|\b[Ee]xit(?:ed with)? (?:code|status)[:= ]*-?[1-9]"
    r"|(?:^|\s)(?:[Ee]rror|[Ff]atal):\s+\S"
    r"|\b(?:[Cc]ould(?:n't| not)|[Cc]annot|[Uu]nable to)\b"
    # a fatal signal's handler (abseil's and glog's: "*** SIGBUS received at time=...",
    # "*** SIGSEGV (@0x0) received by PID 7"; the forty-second set's raylet)
    r"|\*\*\* SIG[A-Z]+ (?:received|\(@)"
    # ggml's abort handler printing its backtrace ("libggml-base.so(ggml_abort+0x152)[0x...]"):
    # the process aborted, even when the paste lost the message before it (the forty-sixth set,
    # llama-server after it served)
    r"|\(ggml_abort\+0x[0-9a-f]+\)"
    # a server's health check failing (a serving replica marked unhealthy, "health check failed",
    # "health check timed out"; the fifty-first set's e-0005, Ray Serve)
    r"|" + _SERVING_HEALTH_FAILED
)
# Words that say nothing failed: counters at zero, conditionals, a test suite's summary, and
# SGLang's scheduler retracting a request when its KV pool is full ("Decode out of memory
# happened. #retracted_reqs: 1, ...": logger.info in scheduler.py, printed without its level; the
# request is requeued and the server serves on; the forty-fifth set, b-0005).
_NOTHING_FAILED = re.compile(
    r"\b0 failed\b|\bfailed[=:]\s*0\b|\bif (?:it |this |that )?fail|\bon failure\b"
    r"|\bfailed_?requests?\W+0\b"
    r"|\b[Dd]ecode out of memory happened[.,] #retracted_reqs"
)


def states_failure(text: str) -> bool:
    """Whether the line says that something failed (see the module's docstring)."""
    text = _NOT_A_LEVEL.sub("|", text)
    if _ERROR_LEVEL.search(text):
        return not _NOTHING_FAILED.search(text)
    if _QUIET_LEVEL.search(text):
        return False
    return bool(_SAYS_FAILED.search(text)) and not _NOTHING_FAILED.search(text)


def says_health_check_failed(text: str) -> bool:
    """Whether a line already found to state a failure (`states_failure`) says that a serving
    health check failed (see `_SERVING_HEALTH_FAILED`)."""
    return _HEALTH.search(text) is not None
