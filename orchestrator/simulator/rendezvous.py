"""A real rendezvous over TCP, the collectives that follow it, and the interface checks before it.

Rank 0 listens on the dist-init address (SGLang `--dist-init-addr HEAD:PORT`, vLLM `--master-addr
HEAD --master-port PORT`), as torch's TCPStore server does on the head; every other rank connects
to it within the distributed timeout. The connection then carries the simulated collectives
(`sync`): each rank says it reached a phase, rank 0 answers `go` when all have. A closed socket is
how failure travels, as in the real stack: when a rank dies, its peers learn it from the kernel,
not from a timer.

Wire format: one JSON object per line. Client -> head: `{"op": "hello", "rank": r, "world": n}`,
`{"op": "sync", "phase": p}`. Head -> client: `{"op": "welcome"}` once all ranks joined,
`{"op": "go", "phase": p}` once all ranks reached p.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.simulator import dialects


class RendezvousError(Exception):
    """Joining failed; `lines` end the traceback the real engine prints."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        super().__init__(lines[-1])


class SyncTimeout(Exception):
    """Not every rank reached the phase in time."""

    def __init__(self, phase: str, waited_s: float) -> None:
        self.phase = phase
        self.waited_s = waited_s
        super().__init__(f"{phase}: not every rank arrived within {waited_s:.2f} s")


@dataclass(frozen=True)
class Peer:
    """The far end of a connection that closed."""

    rank: int | None
    addr: str
    port: int


class PeerLost(Exception):
    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        super().__init__(f"connection to {peer.addr}:{peer.port} closed")


def _send(sock: socket.socket, message: Mapping[str, object]) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def _reset(sock: socket.socket) -> None:
    """End a connection now. `shutdown` first: `close` alone leaves the descriptor open while a
    reader thread's file object holds it, and the peer would never notice."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class Group:
    """This rank's membership in the simulated process group."""

    def __init__(self, rank: int, world: int, addr: str, port: int) -> None:
        self.rank = rank
        self.world = world
        self.addr = addr
        self.port = port
        self.lost = threading.Event()
        self.lost_peer: Peer | None = None
        self._cond = threading.Condition()
        self._arrived: dict[str, set[int]] = {}
        self._go: set[str] = set()
        self._welcome = False
        self._dropped = False
        self._closing = False
        self._listener: socket.socket | None = None
        self._clients: dict[int, socket.socket] = {}
        self._head: socket.socket | None = None

    # -- joining -------------------------------------------------------------------------------

    def join(self, timeout_s: float, shown_timeout_s: float) -> None:
        """Meet every rank, or raise RendezvousError with torch's text (`shown_timeout_s` is the
        configured value the engine would print; `timeout_s` the simulated wait)."""
        if self.world == 1:
            return
        if self.rank == 0:
            self._host(timeout_s, shown_timeout_s)
        else:
            self._connect(timeout_s, shown_timeout_s)

    def _host(self, timeout_s: float, shown_timeout_s: float) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((self.addr, self.port))
            listener.listen(64)
        except OSError as exc:
            listener.close()
            code = exc.errno or 0
            raise RendezvousError(
                [
                    dialects.dist_listen_failed(
                        self.port, errno.errorcode.get(code, "EUNKNOWN"), code, exc.strerror or ""
                    )
                ]
            ) from None
        self._listener = listener
        threading.Thread(target=self._accept_loop, name="rdzv-accept", daemon=True).start()
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self._clients) < self.world - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    joined = len(self._clients) + 1
                    self._closing = True
                    self._close_all()
                    raise RendezvousError(
                        [dialects.dist_store_timeout(shown_timeout_s, joined, self.world)]
                    )
                self._cond.wait(min(left, 0.5))
            clients = dict(self._clients)
        with contextlib.suppress(OSError):
            listener.close()
        for sock in clients.values():
            with contextlib.suppress(OSError):
                _send(sock, {"op": "welcome"})

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve_client, args=(conn,), daemon=True).start()

    def _serve_client(self, conn: socket.socket) -> None:
        try:
            peer_addr, peer_port = conn.getpeername()[:2]
        except OSError:
            conn.close()
            return
        reader = conn.makefile("rb")
        rank: int | None = None
        try:
            hello = json.loads(reader.readline() or b"{}")
            rank = hello.get("rank")
            if (
                hello.get("op") != "hello"
                or not isinstance(rank, int)
                or hello.get("world") != self.world
            ):
                conn.close()
                return
            with self._cond:
                if rank in self._clients or not 0 < rank < self.world:
                    conn.close()
                    return
                self._clients[rank] = conn
                self._cond.notify_all()
            for raw in reader:
                message = json.loads(raw)
                if message.get("op") == "sync":
                    with self._cond:
                        self._arrived.setdefault(str(message.get("phase")), set()).add(rank)
                        self._cond.notify_all()
        except (OSError, ValueError):
            pass
        self._lose(Peer(rank, str(peer_addr), int(peer_port)))

    def _connect(self, timeout_s: float, shown_timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        sock: socket.socket | None = None
        while sock is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RendezvousError(
                    [dialects.dist_client_timeout(self.addr, self.port, shown_timeout_s)]
                )
            try:
                sock = socket.create_connection((self.addr, self.port), timeout=min(left, 2.0))
            except OSError:
                sock = None
                time.sleep(min(0.1, max(left, 0)))
        sock.settimeout(None)
        self._head = sock
        try:
            _send(sock, {"op": "hello", "rank": self.rank, "world": self.world, "pid": os.getpid()})
        except OSError:
            raise RendezvousError([dialects.dist_recv_closed()]) from None
        threading.Thread(
            target=self._read_head, args=(sock,), name="rdzv-head", daemon=True
        ).start()
        # The head decides the rendezvous timeout; a client waits a little longer, so that the
        # head's DistStoreError (and the closed socket it leaves) is what ends a failed join.
        wait_until = time.monotonic() + timeout_s + 5.0
        with self._cond:
            while not self._welcome:
                if self.lost.is_set():
                    raise RendezvousError([dialects.dist_recv_closed()])
                left = wait_until - time.monotonic()
                if left <= 0:
                    raise RendezvousError(
                        [dialects.dist_client_timeout(self.addr, self.port, shown_timeout_s)]
                    )
                self._cond.wait(min(left, 0.5))

    def _read_head(self, sock: socket.socket) -> None:
        try:
            peer_addr, peer_port = sock.getpeername()[:2]
        except OSError:
            peer_addr, peer_port = self.addr, self.port
        try:
            for raw in sock.makefile("rb"):
                message = json.loads(raw)
                with self._cond:
                    if message.get("op") == "welcome":
                        self._welcome = True
                    elif message.get("op") == "go":
                        self._go.add(str(message.get("phase")))
                    self._cond.notify_all()
        except (OSError, ValueError):
            pass
        self._lose(Peer(0, str(peer_addr), int(peer_port)))

    def _lose(self, peer: Peer) -> None:
        with self._cond:
            if self._closing or self._dropped:
                return
            if self.lost_peer is None:
                self.lost_peer = peer
            self.lost.set()
            self._cond.notify_all()

    # -- collectives ----------------------------------------------------------------------------

    def sync(self, phase: str, timeout_s: float | None) -> None:
        """Wait until every rank reached `phase` (None: wait forever). PeerLost if a connection
        closes first, SyncTimeout when the time is up."""
        if self.world == 1:
            return
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if self.rank != 0:
            assert self._head is not None
            try:
                _send(self._head, {"op": "sync", "phase": phase})
            except OSError:
                self._lose(Peer(0, self.addr, self.port))
        with self._cond:
            if self.rank == 0:
                self._arrived.setdefault(phase, set()).add(0)
            while not self._complete(phase):
                if self.lost.is_set() and self.lost_peer is not None:
                    raise PeerLost(self.lost_peer)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise SyncTimeout(phase, timeout_s or 0.0)
                self._cond.wait(0.5 if left is None else min(left, 0.5))
            clients = dict(self._clients) if self.rank == 0 else {}
        for sock in clients.values():
            with contextlib.suppress(OSError):
                _send(sock, {"op": "go", "phase": phase})

    def _complete(self, phase: str) -> bool:
        if self.rank == 0:
            return len(self._arrived.get(phase, ())) >= self.world
        return phase in self._go

    def check(self) -> None:
        """Raise PeerLost if a connection closed."""
        if self.lost.is_set() and self.lost_peer is not None:
            raise PeerLost(self.lost_peer)

    # -- ending --------------------------------------------------------------------------------

    def drop(self) -> None:
        """The drop-peer fault: reset every connection of this rank, as a vanished node would."""
        with self._cond:
            self._dropped = True
        self._close_all()

    def close(self) -> None:
        with self._cond:
            self._closing = True
        self._close_all()

    def _close_all(self) -> None:
        socks = [s for s in (self._listener, self._head, *self._clients.values()) if s is not None]
        for sock in socks:
            _reset(sock)


# ---------------------------------------------------------------------------------------------
# Interfaces: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME must name interfaces this node has.

_SIOCGIFADDR = 0x8915


def interfaces() -> list[str]:
    """Network interfaces of this node (its network namespace), as the kernel lists them."""
    return [name for _, name in socket.if_nameindex()]


def has_address(name: str) -> bool:
    """Does `name` carry an IPv4 or IPv6 address (what Gloo and NCCL bind to)?"""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            return True
        except OSError:
            pass
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as f:
            return any(line.split()[-1] == name for line in f if line.split())
    except OSError:
        return False


def nccl_matches(spec: str, names: list[str]) -> list[str]:
    """NCCL_SOCKET_IFNAME semantics: comma-separated prefixes; `^` excludes; `=` exact names."""
    exclude = spec.startswith("^")
    body = spec[1:] if exclude else spec
    exact = body.startswith("=")
    body = body[1:] if exact else body
    wanted = [w.split(":")[0] for w in body.split(",") if w]

    def hit(name: str) -> bool:
        return any(name == w if exact else name.startswith(w) for w in wanted)

    return [n for n in names if hit(n) != exclude]


def gloo_interface_problem(env: Mapping[str, str]) -> str | None:
    """The Gloo error when GLOO_SOCKET_IFNAME names an interface without an address here."""
    value = env.get("GLOO_SOCKET_IFNAME")
    if not value:
        return None
    for name in value.split(","):
        if name and not has_address(name):
            return dialects.gloo_no_address(name)
    return None


def nccl_interface_problem(env: Mapping[str, str]) -> bool:
    """True when NCCL_SOCKET_IFNAME matches no interface with an address on this node."""
    value = env.get("NCCL_SOCKET_IFNAME")
    if not value:
        return False
    return not [n for n in nccl_matches(value, interfaces()) if has_address(n)]
