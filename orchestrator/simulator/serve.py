"""Rank 0's OpenAI-compatible HTTP server: /health, /v1/models, /v1/chat/completions,
/v1/completions, with Server-Sent Events when a request asks for `"stream": true`.

Answers are a deterministic toy: the same prompt always gets the same words back, so tests and
rehearsals can compare outputs. stdlib only (http.server), one thread per connection, idle when
nobody asks.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN_DELAY_S = 0.005  # between streamed tokens: enough to see a stream, cheap on CPU


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


def toy_answer(engine: str, served: str, prompt: str) -> list[str]:
    """The reply's words: fixed text, the prompt's size and a digest of it (deterministic)."""
    digest = hashlib.sha256(prompt.encode()).hexdigest()[:8]
    text = (
        f"This is the {engine} simulator serving {served}. Your prompt had "
        f"{len(prompt.split())} words (digest {digest}). The cluster booted and answers."
    )
    return text.split(" ")


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
        while not self.state.released.wait(1.0):
            pass
        while self.state.hung.is_set():  # a hang-at=ready fault: the request never returns
            time.sleep(1.0)
        chat = path == "/v1/chat/completions"
        prompt = _prompt_of_chat(body) if chat else str(body.get("prompt") or "")
        words = toy_answer(self.state.engine, self.state.served_model_name, prompt)
        limit = body.get("max_tokens") or body.get("max_completion_tokens")
        finish = "stop"
        if isinstance(limit, int) and 0 < limit < len(words):
            words, finish = words[:limit], "length"
        ident = ("chatcmpl-" if chat else "cmpl-") + hashlib.sha256(raw).hexdigest()[:24]
        model = str(body.get("model") or self.state.served_model_name)
        usage = {
            "prompt_tokens": len(prompt.split()),
            "completion_tokens": len(words),
            "total_tokens": len(prompt.split()) + len(words),
        }
        if body.get("stream"):
            self._stream(ident, model, chat, words, finish)
            return
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

    def _stream(self, ident: str, model: str, chat: bool, words: list[str], finish: str) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        kind = "chat.completion.chunk" if chat else "text_completion"

        def event(choice: dict[str, Any]) -> None:
            chunk = {
                "id": ident,
                "object": kind,
                "created": int(time.time()),
                "model": model,
                "choices": [choice],
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
            for i, word in enumerate(words):
                piece = word if i == 0 else " " + word
                if chat:
                    event({"index": 0, "delta": {"content": piece}, "finish_reason": None})
                else:
                    event({"index": 0, "text": piece, "logprobs": None, "finish_reason": None})
                time.sleep(TOKEN_DELAY_S)
            if chat:
                event({"index": 0, "delta": {}, "finish_reason": finish})
            else:
                event({"index": 0, "text": "", "logprobs": None, "finish_reason": finish})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:
            return
        self._done(200)


def start_server(host: str, port: int, state: ServeState) -> ThreadingHTTPServer:
    """Bind and serve in a daemon thread; OSError if the address is taken."""
    handler = type("Handler", (_Handler,), {"state": state})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
