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


def _unix_connects(path: Path) -> bool:
    if not path.exists():
        return False
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _docker_ping(path: Path) -> bool:
    if not path.exists():
        return False
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(str(path))
        s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
        data = s.recv(64)
        return data.startswith(b"HTTP/1.") and b" 200 " in data
    except OSError:
        return False
    finally:
        s.close()


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
