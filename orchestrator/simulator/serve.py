"""Rank 0's OpenAI-compatible HTTP server: /health, /v1/models, /v1/chat/completions,
/v1/completions, with Server-Sent Events when a request asks for `"stream": true`.

Answers are a deterministic toy: the same prompt always gets the same words back, so tests and
rehearsals can compare outputs. stdlib only (http.server), one thread per connection, idle when
nobody asks.

Timing imitates an engine at configurable rates (`ServeRates`, from the rank's environment), so
`cluster bench` measures something it can be checked against: one word is one token; a
request's prefill takes prompt_tokens / prefill rate and holds the server's one prefill lane (a
second request's first token waits for the first's prefill, as the engines' prefill batches
share the GPU); its first token comes out of the prefill, and every further token follows at the
decode rate, each request at its own pace (no decode contention between requests: an idealised
batch). Token times are kept on an absolute schedule, so a late wake-up is not carried forward.
`ignore_eos` (SGLang's and vLLM's sampling parameter, which `sglang.bench_serving` sets) makes
the answer exactly `max_tokens` long.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ENV_PREFILL_RATE = "CLUSTER_SIM_PREFILL_RATE"  # prompt tokens per second, the server's
ENV_DECODE_RATE = "CLUSTER_SIM_DECODE_RATE"  # output tokens per second, per request
# Seed 002's Mistral Large 4 on eight Sparks: pp2048 at ~900-1,300 tok/s, tg at c1 24.8 (vLLM)
# to 31.9 (SGLang) tok/s. Rates are not time-scaled (tokens and seconds would both be).
DEFAULT_PREFILL_RATE = 1000.0
DEFAULT_DECODE_RATE = 32.0


@dataclass(frozen=True)
class ServeRates:
    prefill: float = DEFAULT_PREFILL_RATE  # tokens/s
    decode: float = DEFAULT_DECODE_RATE  # tokens/s


def serve_rates(env: Mapping[str, str]) -> ServeRates:
    """The rates the environment asks for; a value that is not a positive number is ignored
    (the simulator imitates engines, which never refuse to serve over a tuning knob)."""

    def rate(name: str, default: float) -> float:
        try:
            value = float(env.get(name, ""))
        except ValueError:
            return default
        return value if value > 0 else default

    return ServeRates(
        prefill=rate(ENV_PREFILL_RATE, DEFAULT_PREFILL_RATE),
        decode=rate(ENV_DECODE_RATE, DEFAULT_DECODE_RATE),
    )


@dataclass
class ServeState:
    engine: str
    served_model_name: str
    model_path: str
    max_len: int
    access_log: Callable[[str, int, str, str, int], None]
    ready: threading.Event = field(default_factory=threading.Event)
    hung: threading.Event = field(default_factory=threading.Event)
    first_request: threading.Event = field(default_factory=threading.Event)
    # Cleared while a fault at `ready` decides what the first request meets (see runner.py).
    released: threading.Event = field(default_factory=threading.Event)
    created: int = field(default_factory=lambda: int(time.time()))
    rates: ServeRates = field(default_factory=ServeRates)
    prefill_lane: threading.Lock = field(default_factory=threading.Lock)
    # What /metrics reports, in the engine's own names (`metrics_text`); under `counts`.
    counts: threading.Lock = field(default_factory=threading.Lock)
    running: int = 0  # requests between their prefill and their last token
    waiting: int = 0  # requests queued for the prefill lane
    generated: int = 0  # output tokens sent, since the start
    extra_delay: float = 0.0  # a slow-serve fault: seconds added to each request

    def count(self, **delta: int) -> None:
        with self.counts:
            for name, d in delta.items():
                setattr(self, name, getattr(self, name) + d)


# The engines' own metric names (each engine's Prometheus collector):
# SGLang python/sglang/srt/metrics/collector.py (https://github.com/sgl-project/sglang/blob/main/
# python/sglang/srt/metrics/collector.py): gauges sglang:num_running_reqs, sglang:num_queue_reqs,
# counter sglang:generation_tokens_total, labelled with model_name.
# vLLM vllm/v1/metrics/loggers.py (https://github.com/vllm-project/vllm/blob/main/vllm/v1/
# metrics/loggers.py): gauges vllm:num_requests_running, vllm:num_requests_waiting, counter
# vllm:generation_tokens_total, labelled with model_name (and engine).
_METRIC_NAMES = {
    "sglang": (
        ("sglang:num_running_reqs", "gauge", "The number of running requests."),
        ("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue."),
        ("sglang:generation_tokens_total", "counter", "Number of generation tokens processed."),
    ),
    "vllm": (
        ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches."),
        ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed."),
        ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed."),
    ),
}


def metrics_text(s: ServeState) -> str:
    """The /metrics exposition: the three series the serving watch reads, as the engine
    names them (a counter's TYPE line names it without `_total`, as prometheus_client does)."""
    with s.counts:
        values = (s.running, s.waiting, s.generated)
    out: list[str] = []
    for (name, kind, doc), value in zip(_METRIC_NAMES[s.engine], values, strict=True):
        family = name.removesuffix("_total") if kind == "counter" else name
        out += [
            f"# HELP {family} {doc}",
            f"# TYPE {family} {kind}",
            f'{name}{{model_name="{s.served_model_name}"}} {float(value)}',
        ]
    return "\n".join(out) + "\n"


def toy_answer(engine: str, served: str, prompt: str) -> list[str]:
    """The reply's words: fixed text, the prompt's size and a digest of it (deterministic)."""
    digest = hashlib.sha256(prompt.encode()).hexdigest()[:8]
    text = (
        f"This is the {engine} simulator serving {served}. Your prompt had "
        f"{len(prompt.split())} words (digest {digest}). The cluster booted and answers."
    )
    return text.split(" ")


def answer_words(words: list[str], limit: object, ignore_eos: bool) -> tuple[list[str], str]:
    """The words to send and the finish reason: the toy answer cut at `limit` ("length"), or
    with `ignore_eos` repeated up to exactly `limit` words, as an engine that never stops."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        return words, "stop"
    if ignore_eos:
        return list(itertools.islice(itertools.cycle(words), limit)), "length"
    if limit < len(words):
        return words[:limit], "length"
    return words, "stop"


def _prompt_of_chat(body: dict[str, Any]) -> str:
    parts: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [str(p.get("text", "")) for p in content if isinstance(p, dict)]
    return "\n".join(parts)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    state: ServeState  # set on the subclass made by `start_server`

    def log_message(self, format: str, *args: Any) -> None:
        return  # the access line is written by `_done`, in the engine's own format

    def _done(self, status: int) -> None:
        host, port = self.client_address[:2]
        self.state.access_log(str(host), int(port), self.command, self.path, status)

    def _json(self, status: int, payload: object) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self._done(status)

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path in ("/health", "/health_generate", "/ping"):
            status = 200 if self.state.ready.is_set() else 503
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()
            self._done(status)
        elif path == "/v1/models":
            s = self.state
            self._json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": s.served_model_name,
                            "object": "model",
                            "created": s.created,
                            "owned_by": s.engine,
                            "root": s.model_path,
                            "max_model_len": s.max_len,
                        }
                    ],
                },
            )
        elif path == "/metrics":
            body = metrics_text(self.state).encode()
            self.send_response(200)
            self.send_header("content-type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self._done(200)
        elif path == "/get_model_info":
            self._json(200, {"model_path": self.state.model_path, "is_generation": True})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if path not in ("/v1/chat/completions", "/v1/completions"):
            self._json(404, {"detail": "Not Found"})
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not an object")
        except ValueError as exc:
            self._json(400, {"object": "error", "message": f"invalid JSON: {exc}", "code": 400})
            return
        if not self.state.ready.is_set():
            self._json(503, {"object": "error", "message": "server is starting", "code": 503})
            return
        self.state.first_request.set()
        self.state.count(waiting=1)
        try:
            while not self.state.released.wait(1.0):
                pass
        finally:
            self.state.count(waiting=-1, running=1)
        try:
            self._generate(path, raw, body)
        finally:
            self.state.count(running=-1)

    def _generate(self, path: str, raw: bytes, body: dict[str, Any]) -> None:
        # a hang-at=ready or hang-at=serving fault: the request never returns, no token comes
        while self.state.hung.is_set():
            time.sleep(1.0)
        if self.state.extra_delay:
            time.sleep(self.state.extra_delay)
        chat = path == "/v1/chat/completions"
        prompt = _prompt_of_chat(body) if chat else str(body.get("prompt") or "")
        limit = body.get("max_tokens") or body.get("max_completion_tokens")
        words, finish = answer_words(
            toy_answer(self.state.engine, self.state.served_model_name, prompt),
            limit,
            bool(body.get("ignore_eos")),
        )
        ident = ("chatcmpl-" if chat else "cmpl-") + hashlib.sha256(raw).hexdigest()[:24]
        model = str(body.get("model") or self.state.served_model_name)
        prompt_tokens = len(prompt.split())
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(words),
            "total_tokens": prompt_tokens + len(words),
        }
        self._prefill(prompt_tokens)
        if body.get("stream"):
            options = body.get("stream_options")
            with_usage = isinstance(options, dict) and bool(options.get("include_usage"))
            self._stream(ident, model, chat, words, finish, usage if with_usage else None)
            return
        _pace(time.monotonic(), len(words) - 1, self.state.rates.decode)
        self.state.count(generated=len(words))
        text = " ".join(words)
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        self._json(
            200,
            {
                "id": ident,
                "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()),
                "model": model,
                "choices": [choice],
                "usage": usage,
            },
        )

    def _prefill(self, prompt_tokens: int) -> None:
        """Hold the server's one prefill lane for prompt_tokens / prefill rate."""
        with self.state.prefill_lane:
            time.sleep(prompt_tokens / self.state.rates.prefill)

    def _stream(
        self,
        ident: str,
        model: str,
        chat: bool,
        words: list[str],
        finish: str,
        usage: dict[str, int] | None,
    ) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        kind = "chat.completion.chunk" if chat else "text_completion"

        def event(choice: dict[str, Any] | None, **extra: object) -> None:
            chunk = {
                "id": ident,
                "object": kind,
                "created": int(time.time()),
                "model": model,
                "choices": [] if choice is None else [choice],
                **extra,
            }
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()

        try:
            if chat:
                event(
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "finish_reason": None,
                    }
                )
            first = time.monotonic()  # the first token comes out of the prefill
            for i, word in enumerate(words):
                _pace(first, i, self.state.rates.decode)
                piece = word if i == 0 else " " + word
                self.state.count(generated=1)
                if chat:
                    event({"index": 0, "delta": {"content": piece}, "finish_reason": None})
                else:
                    event({"index": 0, "text": piece, "logprobs": None, "finish_reason": None})
            if chat:
                event({"index": 0, "delta": {}, "finish_reason": finish})
            else:
                event({"index": 0, "text": "", "logprobs": None, "finish_reason": finish})
            if usage is not None:  # OpenAI's stream_options.include_usage: a last, choiceless chunk
                event(None, usage=usage)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:
            return
        self._done(200)


def _pace(first: float, index: int, rate: float) -> None:
    """Sleep until token `index` is due: `first` + index / rate (monotonic clock)."""
    delay = first + index / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)


class _Server(ThreadingHTTPServer):
    # socketserver's listen backlog is 5: a bench opening 32 connections at once had some
    # reset (httpx ReadError). uvicorn, which both engines serve with, listens with 2048.
    request_queue_size = 2048


def start_server(host: str, port: int, state: ServeState) -> ThreadingHTTPServer:
    """Bind and serve in a daemon thread; OSError if the address is taken."""
    handler = type("Handler", (_Handler,), {"state": state})
    server = _Server((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
