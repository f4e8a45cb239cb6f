"""A real TCP reachability test over the fabric: a temporary listener on the head, a connect from
every node.

Both sides are `python3 -c` with a constant script and the values as argv. python3 is on every
DGX Spark (DGX OS is Ubuntu 24.04, whose netplan, the tool that configures the fabric ports, is
itself a python3 program) and on the testbed (the host's Debian python3). The alternatives fall
short: bash's `/dev/tcp` cannot listen and cannot choose the source address, and netcat is not
installed on a stock Spark (busybox nc neither).

* The listener binds the head's *fabric* address and the rendezvous port (binding is itself the
  check that the port is free: `bind-failed 98 Address already in use`), prints its PID, accepts
  until it has seen the expected number of connections or its time is up, and prints each peer.
  It waits for the client to close first, so no TIME_WAIT is left on the head's port for the
  engine to trip on. Closing the SSH channel does not stop a remote process (sshd ignores
  signal requests from older clients and servers), so the controller stops it by that PID as
  soon as every connect has answered: the port is free again before preflight returns.
* The connector binds the node's own fabric address as the source, so the SYN leaves through the
  fabric interface, not the management port or a default route that may be Wi-Fi, and prints one
  line: `connected MS LOCAL`, `timeout MS`, or `error MS ERRNO NAME MESSAGE`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.probes.base import Probe, excerpt, fail

NAME_CONNECT = "tcp_connect"
NAME_LISTEN = "tcp_listen"

LISTENER = """import os, socket, sys, time
addr, port, want, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind((addr, port))
    s.listen(128)
except OSError as e:
    print("bind-failed", e.errno, e.strerror, flush=True)
    sys.exit(0)
print("listening", addr, port, os.getpid(), flush=True)
s.settimeout(0.2)
deadline = time.monotonic() + limit
seen = 0
while seen < want and time.monotonic() < deadline:
    try:
        c, peer = s.accept()
    except socket.timeout:
        continue
    print("accepted", peer[0], peer[1], flush=True)
    c.settimeout(2.0)
    try:
        c.recv(1)
    except OSError:
        pass
    c.close()
    seen += 1
print("done", seen, flush=True)
"""

CONNECTOR = """import errno, socket, sys, time
src, dst, port, limit = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(limit)
t0 = time.monotonic()
ms = lambda: int((time.monotonic() - t0) * 1000)
try:
    if src != "-":
        s.bind((src, 0))
    s.connect((dst, port))
except socket.timeout:
    print("timeout", ms(), flush=True)
except OSError as e:
    name = errno.errorcode.get(e.errno or 0, "?")
    print("error", ms(), e.errno, name, e.strerror, flush=True)
else:
    print("connected", ms(), s.getsockname()[0], flush=True)
finally:
    s.close()
"""

Outcome = Literal["connected", "timeout", "refused", "unreachable", "error"]
_UNREACHABLE = {"ENETUNREACH", "EHOSTUNREACH", "EADDRNOTAVAIL", "ENETDOWN", "EHOSTDOWN"}


class ConnectResult(StrictModel):
    """One connect from a node to the head's rendezvous port."""

    outcome: Outcome
    elapsed_ms: int = Field(ge=0)
    local: str | None = Field(default=None, description="the source address used")
    errno_name: str | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "connected"


def parse_connect(stdout: str) -> ConnectResult:
    """The connector's one line -> `ConnectResult`."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    words = line.split(" ", 4)
    try:
        if words[0] == "connected" and len(words) == 3:
            return ConnectResult(outcome="connected", elapsed_ms=int(words[1]), local=words[2])
        if words[0] == "timeout" and len(words) == 2:
            return ConnectResult(outcome="timeout", elapsed_ms=int(words[1]), message="timed out")
        if words[0] == "error" and len(words) >= 4:
            name = words[3]
            outcome: Outcome = (
                "refused"
                if name == "ECONNREFUSED"
                else "unreachable"
                if name in _UNREACHABLE
                else "error"
            )
            return ConnectResult(
                outcome=outcome,
                elapsed_ms=int(words[1]),
                errno_name=name,
                message=words[4] if len(words) == 5 else name,
            )
    except ValueError:
        pass
    raise fail(NAME_CONNECT, f"not a connector result: {excerpt(stdout)!r}")


class ListenerReport(StrictModel):
    """What the head's temporary listener saw."""

    listening: bool
    pid: int | None = Field(default=None, description="the listener's PID on the head")
    bind_error: str | None = Field(default=None, description="e.g. `98 Address already in use`")
    accepted_from: tuple[str, ...] = ()
    finished: bool = False


def parse_listener(stdout: str) -> ListenerReport:
    """The listener's lines -> `ListenerReport` (also for a partial output)."""
    listening = False
    pid: int | None = None
    bind_error: str | None = None
    accepted: list[str] = []
    finished = False
    for number, raw in enumerate(stdout.splitlines(), start=1):
        words = raw.split()
        if not words:
            continue
        if words[0] == "listening":
            listening = True
            if len(words) >= 4 and words[3].isdigit():
                pid = int(words[3])
        elif words[0] == "bind-failed":
            bind_error = " ".join(words[1:])
        elif words[0] == "accepted" and len(words) >= 2:
            accepted.append(words[1])
        elif words[0] == "done":
            finished = True
        else:
            raise fail(NAME_LISTEN, f"line {number}: unexpected {excerpt(raw)!r}")
    return ListenerReport(
        listening=listening,
        pid=pid,
        bind_error=bind_error,
        accepted_from=tuple(accepted),
        finished=finished,
    )


def listener_argv(address: str, port: int, expected: int, limit_s: float) -> tuple[str, ...]:
    return ("python3", "-c", LISTENER, address, str(port), str(expected), f"{limit_s:g}")


def connect_probe(
    source: str | None, address: str, port: int, limit_s: float
) -> Probe[ConnectResult]:
    return Probe(
        name=NAME_CONNECT,
        argv=("python3", "-c", CONNECTOR, source or "-", address, str(port), f"{limit_s:g}"),
        parse=parse_connect,
    )
