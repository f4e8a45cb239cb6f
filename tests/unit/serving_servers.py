"""Real HTTP servers on loopback for the bench's unit tests: the simulator's own server (in
this process, at rates the test sets), and the bad endpoints a bench must survive."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from orchestrator.serving_bench.smoke import SMOKE_PROMPT
from orchestrator.simulator.serve import ServeRates, ServeState, start_server

MODEL = "mistral-large-4"


@contextmanager
def sim_server(
    prefill: float = 20_000.0, decode: float = 400.0, *, ready: bool = True
) -> Iterator[tuple[str, ServeState]]:
    state = ServeState(
        engine="sglang",
        served_model_name=MODEL,
        model_path="/models/x",
        max_len=32768,
        access_log=lambda *_: None,
        rates=ServeRates(prefill=prefill, decode=decode),
    )
    state.released.set()
    if ready:
        state.ready.set()
    server = start_server("127.0.0.1", 0, state)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()


def refused_url() -> str:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class _Bad(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "garbage"

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_GET(self) -> None:  # /health and /v1/models answer; only the completions misbehave
        body = json.dumps({"object": "list", "data": [{"id": MODEL}]}).encode()
        if self.path != "/v1/models":
            body = b""
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        request = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.mode not in ("http500", "reasoning") and SMOKE_PROMPT.encode() in request:
            self._good_stream()  # the smoke passes, so the sweep meets the fault
            return
        if self.mode == "slow":
            time.sleep(5)
            return
        if self.mode == "http500":
            body = b'{"object":"error","message":"CUDA error: an illegal memory access"}'
            self.send_response(500)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        if self.mode == "garbage":
            self.wfile.write(b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n')
            self.wfile.write(b"data: \x89PNG not json at all\n\n")
        elif self.mode == "reasoning":  # vLLM with --reasoning-parser: thinking, then nothing
            for piece in ("Let", " me", " think"):
                chunk = {"model": MODEL, "choices": [{"delta": {"reasoning": piece}}]}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
                time.sleep(0.05)
            usage = {
                "model": MODEL,
                "choices": [],
                "usage": {"prompt_tokens": 9, "completion_tokens": 3},
            }
            self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        elif self.mode == "truncated":
            self.wfile.write(b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n')
        self.wfile.flush()
        self.close_connection = True

    def _good_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        chunk = {"model": MODEL, "choices": [{"delta": {"content": "I am ready."}}]}
        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n")
        self.close_connection = True


@contextmanager
def bad_server(mode: str) -> Iterator[str]:
    handler = type("Bad", (_Bad,), {"mode": mode})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
