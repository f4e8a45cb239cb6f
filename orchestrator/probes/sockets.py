"""`cat /proc/net/tcp /proc/net/tcp6`: which TCP ports a node listens on.

The head must have its rendezvous port (torch.distributed's store) and its serve port free, or
rank 0 dies at bind ("address already in use") while the other seven wait for it. `/proc/net`
is read rather than `ss`: it needs nothing installed, no privileges, and it shows the network
namespace of the reader, so it is right on the testbed's namespaces too.

Addresses are hex in the kernel's byte order (little-endian words on arm64 and x86_64); state
`0A` is LISTEN. A kernel without IPv6 has no `tcp6`: `cat` then exits 1 after printing `tcp`,
which is still an answer.
"""

from __future__ import annotations

import ipaddress

from orchestrator.models.base import StrictModel
from orchestrator.probes.base import Probe, excerpt, fail

NAME = "listening"
LISTEN = "0A"


class ListeningSocket(StrictModel):
    address: str
    port: int

    @property
    def wildcard(self) -> bool:
        return self.address in ("0.0.0.0", "::")  # noqa: S104 (a listener, not a bind)


def _address(hexaddr: str) -> str:
    raw = bytes.fromhex(hexaddr)
    # The kernel prints each 32-bit word in host order: reverse the bytes of every word.
    swapped = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(swapped) == 4:
        return str(ipaddress.IPv4Address(swapped))
    address = ipaddress.IPv6Address(swapped)
    mapped = address.ipv4_mapped
    return str(mapped) if mapped is not None else str(address)


def parse_proc_net_tcp(stdout: str) -> tuple[ListeningSocket, ...]:
    """Lines of /proc/net/tcp{,6} -> the listening sockets (address, port), deduplicated."""
    found: list[ListeningSocket] = []
    for number, raw in enumerate(stdout.splitlines(), start=1):
        words = raw.split()
        if not words or words[0] == "sl":
            continue
        if len(words) < 4 or ":" not in words[1]:
            raise fail(NAME, f"line {number} is not a /proc/net/tcp entry: {excerpt(raw)!r}")
        if words[3] != LISTEN:
            continue
        hexaddr, _, hexport = words[1].partition(":")
        try:
            sock = ListeningSocket(address=_address(hexaddr), port=int(hexport, 16))
        except ValueError as exc:
            raise fail(NAME, f"line {number}: bad address {words[1]!r}") from exc
        if sock not in found:
            found.append(sock)
    return tuple(found)


def holders(sockets: tuple[ListeningSocket, ...], address: str, port: int) -> list[ListeningSocket]:
    """The listeners that make `address:port` unavailable: the same port, on it or a wildcard."""
    return [s for s in sockets if s.port == port and (s.wildcard or s.address == address)]


def _no_tcp6(
    exit_status: int | None, stdout: str, stderr: str
) -> tuple[ListeningSocket, ...] | None:
    if exit_status == 1 and "tcp6" in stderr and stdout.strip():
        return parse_proc_net_tcp(stdout)
    return None


LISTENING: Probe[tuple[ListeningSocket, ...]] = Probe(
    name=NAME,
    argv=("cat", "/proc/net/tcp", "/proc/net/tcp6"),
    parse=parse_proc_net_tcp,
    on_failure=_no_tcp6,
)
