"""The serving watch's three questions to the head, over plain HTTP from the controller: its
readiness path, one tiny real request (the canary), and the engine's own /metrics.

Blocking (urllib, as `runtime.specs.probe_ready`): the watch runs `ask_head` in a thread every
`canary_every_s`, so it costs nothing between asks and needs no client library at start-up.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from orchestrator.supervisor.serving import CanaryResult, EngineReading, parse_engine_metrics

HEALTH_TIMEOUT_S = 5.0
METRICS_TIMEOUT_S = 5.0
CANARY_PROMPT = "Say OK."


def _get(url: str, timeout: float) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 — http to our head
        return int(resp.status), resp.read()


def canary_request(base: str, model: str, max_tokens: int, timeout: float) -> float:
    """Seconds one completion of `max_tokens` took; raises OSError/ValueError on no answer."""
    body = json.dumps(
        {"model": model, "prompt": CANARY_PROMPT, "max_tokens": max_tokens, "temperature": 0}
    ).encode()
    req = urllib.request.Request(  # noqa: S310 — http to our head
        f"{base}/v1/completions", data=body, headers={"content-type": "application/json"}
    )
    started = time.monotonic()
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
        payload = json.loads(resp.read() or b"{}")
    if not isinstance(payload, dict) or not payload.get("choices"):
        raise ValueError(f"no choices in the answer: {str(payload)[:120]}")
    return time.monotonic() - started


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError) or "timed out" in str(exc):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"[:200]


def ask_head(
    base: str,
    ready_url: str,
    model: str,
    engine: str,
    *,
    max_tokens: int,
    timeout_s: float,
    now: float,
    with_canary: bool = True,
) -> tuple[CanaryResult | None, EngineReading | None]:
    """/health, then the canary (when due), then /metrics. `now`: the watch's clock at the
    start (the result's ts)."""
    try:
        status, _ = _get(ready_url, HEALTH_TIMEOUT_S)
        health_ok = 200 <= status < 300
    except (urllib.error.URLError, OSError, ValueError):
        health_ok = False
    canary: CanaryResult | None = None
    if with_canary:
        try:
            latency = canary_request(base, model, max_tokens, timeout_s)
            canary = CanaryResult(now, latency, health_ok)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            canary = CanaryResult(now, None, health_ok, _why(exc))
    reading: EngineReading | None = None
    try:
        _status, text = _get(f"{base}/metrics", METRICS_TIMEOUT_S)
        reading = parse_engine_metrics(text.decode(errors="replace"), engine, time.time())
    except (urllib.error.URLError, OSError, ValueError):
        reading = None
    return canary, reading
