"""Small network helpers: link names, and whether a socket or port answers."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from .processes import _run


def _link_names() -> list[str]:
    proc = _run(["ip", "-j", "link"], check=False)
    try:
        return [x["ifname"] for x in json.loads(proc.stdout or "[]")]
    except json.JSONDecodeError:
        return []


def _unix_answer(path: Path, timeout: float, request: bytes = b"") -> bytes | None:
    """Connect to the Unix socket at `path`, send `request` (if any) and return the first bytes
    back (b"" when nothing was asked); None when the socket is absent or does not answer."""
    if not path.exists():
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(str(path))
            if not request:
                return b""
            s.sendall(request)
            return s.recv(64)
        except OSError:
            return None


def _unix_connects(path: Path) -> bool:
    return _unix_answer(path, 1.0) is not None


def _docker_ping(path: Path) -> bool:
    data = _unix_answer(path, 2.0, b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
    return data is not None and data.startswith(b"HTTP/1.") and b" 200 " in data


def _tcp_connects(addr: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=timeout):
            return True
    except OSError:
        return False


def _ssh_banner(addr: str, port: int, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def tcp_probe(addr: str, port: int, timeout: float = 3.0) -> str:
    """'open', 'refused' or 'timeout' (or 'unreachable') for one TCP connect."""
    try:
        with socket.create_connection((addr, port), timeout=timeout):
            return "open"
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "timeout"
    except OSError:
        return "unreachable"
