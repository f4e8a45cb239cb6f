"""One streamed chat completion over httpx, timed chunk by chunk; every failure is a line.

The body is what `sglang.bench_serving` sends an OpenAI chat endpoint: `stream`, `max_tokens`,
`ignore_eos` (both engines accept it as an extra sampling parameter, so every request yields
exactly `max_tokens`), temperature 0, and `stream_options.include_usage` so the server's own
token counts come back in a last chunk. A connection refused, a timeout, a non-200 status, a line
that is not SSE JSON, or a stream that ends before `[DONE]` fails the request with one line;
nothing here raises.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from orchestrator.serving_bench.stats import RequestResult

CHAT_PATH = "/v1/chat/completions"
_SHOWN = 160  # characters of a bad body or line kept in an error
TRANSCRIPT_CAP = 64 * 1024  # characters of raw response a transcript keeps


def keep(transcript: list[str] | None, text: str) -> None:
    """Add `text` to a transcript (the smoke request's raw exchange), up to TRANSCRIPT_CAP."""
    if transcript is None:
        return
    room = TRANSCRIPT_CAP - sum(len(t) for t in transcript)
    if room > 0:
        transcript.append(text if len(text) <= room else text[:room] + "\n[... cut]")


def chat_body(
    model: str, prompt: str, max_tokens: int, *, ignore_eos: bool = True
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if ignore_eos:
        body["ignore_eos"] = True
    return body


class StreamError(Exception):
    """The stream broke its contract; the message is the request's error line."""


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "…"


def _describe(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return f"timed out after {timeout_s:g} s"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect: {_short(str(exc)) or type(exc).__name__}"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        return f"connection broken: {_short(str(exc)) or type(exc).__name__}"
    if isinstance(exc, StreamError):
        return str(exc)
    return f"{type(exc).__name__}: {_short(str(exc))}"


def _chunk(line: str) -> dict[str, Any] | None:
    """A `data:` line's JSON object; None for `[DONE]`; StreamError for anything else."""
    payload = line[len("data:") :].strip()
    if payload == "[DONE]":
        return None
    try:
        chunk = json.loads(payload)
    except ValueError:
        raise StreamError(f"malformed stream: not JSON: {_short(payload)!r}") from None
    if not isinstance(chunk, dict):
        raise StreamError(f"malformed stream: not an object: {_short(payload)!r}")
    if "error" in chunk or chunk.get("object") == "error":
        detail = chunk.get("error", chunk)
        message = detail.get("message", detail) if isinstance(detail, dict) else detail
        raise StreamError(f"the server reported an error mid-stream: {_short(str(message))}")
    return chunk


# A reasoning model's thinking streams in its own delta field: `reasoning` in vLLM (since
# vllm#27752; `reasoning_content` was removed by vllm#33402), `reasoning_content` in SGLang.
# Those are output tokens too: TTFT is the first of either, and an answer that is all thinking
# (tg128 of a reasoning model) is not empty. Seed 002's vLLM lane runs --reasoning-parser.
_REASONING = ("reasoning", "reasoning_content")


def _content(chunk: dict[str, Any]) -> tuple[str, str]:
    """(answer text, reasoning text) a chunk carries."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices:
        return "", ""
    first = choices[0]
    if not isinstance(first, dict):
        raise StreamError(f"malformed stream: a choice is not an object: {_short(str(first))!r}")
    delta = first.get("delta")
    if not isinstance(delta, dict):  # /v1/completions' shape
        text = first.get("text")
        return (text if isinstance(text, str) else ""), ""
    text = delta.get("content")
    thought = next((t for k in _REASONING if isinstance(t := delta.get(k), str) and t), "")
    return (text if isinstance(text, str) else ""), thought


async def _read(
    response: httpx.Response, result: RequestResult, transcript: list[str] | None
) -> None:
    keep(transcript, f"-> HTTP {response.status_code}")
    if response.status_code != 200:
        body = (await response.aread()).decode(errors="replace")
        keep(transcript, body)
        raise StreamError(f"HTTP {response.status_code}: {_short(body) or '(empty body)'}")
    pieces: list[str] = []
    thoughts: list[str] = []
    done = False
    async for line in response.aiter_lines():
        keep(transcript, line)
        if not line.strip() or line.startswith(":"):
            continue  # keep-alives and SSE comments
        if not line.startswith("data:"):
            raise StreamError(f"malformed stream: not an SSE data line: {_short(line)!r}")
        chunk = _chunk(line)
        if chunk is None:
            done = True
            break
        now = time.monotonic()
        result.model = result.model or str(chunk.get("model") or "")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            if isinstance(usage.get("completion_tokens"), int):
                result.output_tokens = usage["completion_tokens"]
            if isinstance(usage.get("prompt_tokens"), int):
                result.prompt_tokens = usage["prompt_tokens"]
        text, thought = _content(chunk)
        if text or thought:
            if result.ttft_s is None:
                result.ttft_s = now - result.started
            result.chunk_times.append(now)
            pieces.append(text)
            thoughts.append(thought)
    if not done:
        raise StreamError("stream ended before [DONE]")
    result.text = "".join(pieces)
    result.reasoning = "".join(thoughts)
    if not result.chunk_times:
        raise StreamError("empty answer: the stream carried no content")
    if not result.output_tokens:  # no usage chunk: one token per content chunk
        result.output_tokens = len(result.chunk_times)


async def stream_chat(
    client: httpx.AsyncClient,
    base_url: str,
    body: dict[str, Any],
    timeout_s: float,
    transcript: list[str] | None = None,
) -> RequestResult:
    """POST `body` to the chat endpoint and time it; the result carries any error as a line.
    A `transcript` list collects the raw response (status line, then every line received)."""
    keep(transcript, f"POST {CHAT_PATH} {json.dumps(body)}")
    result = RequestResult(started=time.monotonic(), ended=0.0)
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream(
                "POST", base_url.rstrip("/") + CHAT_PATH, json=body, timeout=timeout_s
            ) as response:
                await _read(response, result, transcript)
    except (httpx.HTTPError, StreamError, TimeoutError, OSError, ValueError) as exc:
        result.error = _describe(exc, timeout_s)
        keep(transcript, f"[{result.error}]")
    result.ended = time.monotonic()
    return result
