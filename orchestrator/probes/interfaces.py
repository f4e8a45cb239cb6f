"""`ip -j addr` / `ip -j link`: a node's network interfaces, as the node itself reports them.

Interface names differ per host (a cable in the other CX-7 port renames the fabric port), so
every per-rank NCCL/Gloo variable is derived from this probe on that host, never from the head's
names (sparkrun#135), and never from the default route, which may be Wi-Fi (sparkrun PR #219).

Two kinds of "up" are kept apart, because they fail differently:

* administratively up: `UP` in `flags` (someone ran `ip link set X up`);
* carrier: `LOWER_UP` in `flags` and `operstate` `UP`. With the cable out or the peer down the
  port stays admin-up but shows `NO-CARRIER` and an operstate of `DOWN` (a NIC) or
  `LOWERLAYERDOWN` (a veth whose peer is down; captured in the `veth-peer-down` fixtures).

Older iproute2 releases print `{}` for entries a filter skipped; those are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.probes.base import Probe, excerpt, fail, parse_json

NAME_ADDR = "ip_addr"
NAME_LINK = "ip_link"


class Interface(StrictModel):
    """One network interface: its link state and (for `ip addr`) its addresses with prefix."""

    name: str = Field(min_length=1, description="ifname, e.g. enp1s0f1np1")
    index: int = Field(ge=0, description="ifindex")
    mtu: int = Field(ge=0)
    operstate: str = Field(description="kernel operstate: UP, DOWN, LOWERLAYERDOWN, UNKNOWN, ...")
    flags: tuple[str, ...] = Field(description="link flags: UP (admin), LOWER_UP (carrier), ...")
    mac: str | None = Field(default=None, description="link-layer address; None for L3 tunnels")
    link_type: str | None = Field(default=None, description="ether, loopback, none, ...")
    peer: str | None = Field(default=None, description="veth peer or parent link, when named")
    ipv4: tuple[str, ...] = Field(default=(), description='"198.18.1.10/24", in kernel order')
    ipv6: tuple[str, ...] = Field(default=(), description='"fe80::1/64", in kernel order')

    @property
    def admin_up(self) -> bool:
        """Set up by an administrator (`UP` flag), whatever the cable says."""
        return "UP" in self.flags

    @property
    def lower_up(self) -> bool:
        """The physical layer has carrier (`LOWER_UP` flag)."""
        return "LOWER_UP" in self.flags

    @property
    def no_carrier(self) -> bool:
        """Admin-up but no carrier: cable out, or the peer port down."""
        return "NO-CARRIER" in self.flags

    @property
    def usable(self) -> bool:
        """Admin-up with carrier: traffic can flow (loopback reports operstate UNKNOWN)."""
        return self.admin_up and self.lower_up and self.operstate in ("UP", "UNKNOWN")


def find_interface(interfaces: Iterable[Interface], name: str) -> Interface | None:
    """The interface called `name`, or None: a missing fabric port is an answer, not an error."""
    return next((iface for iface in interfaces if iface.name == name), None)


@dataclass(frozen=True)
class FabricFault:
    """Why a node's fabric interface cannot carry NCCL/Gloo: `code` names the check."""

    code: Literal["fabric-iface-missing", "fabric-iface-down", "fabric-iface-no-address"]
    what: str


def fabric_faults(node: str, name: str, interfaces: Sequence[Interface]) -> tuple[FabricFault, ...]:
    """The one rule for a fabric interface, used by `inventory check`, preflight and the
    rendezvous plan: it exists, it is admin-up with carrier (`usable`), it has an IPv4 address.
    Empty when all holds."""
    iface = find_interface(interfaces, name)
    if iface is None:
        return (
            FabricFault(
                "fabric-iface-missing",
                f"fabric interface {name} does not exist on {node}: NCCL_SOCKET_IFNAME and "
                "GLOO_SOCKET_IFNAME would name an interface that is not there",
            ),
        )
    faults = []
    if not iface.usable:
        cause = (
            "administratively down"
            if not iface.admin_up
            else "no carrier (cable out or peer port down)"
            if iface.no_carrier or not iface.lower_up
            else f"state {iface.operstate}"
        )
        faults.append(
            FabricFault("fabric-iface-down", f"fabric link {name} on {node} is down: {cause}")
        )
    if not iface.ipv4:
        faults.append(
            FabricFault(
                "fabric-iface-no-address", f"fabric interface {name} on {node} has no IPv4 address"
            )
        )
    return tuple(faults)


def _interfaces(stdout: str, probe: str) -> list[Interface]:
    document = parse_json(probe, stdout)
    if not isinstance(document, list):
        raise fail(probe, f"expected a JSON list of interfaces, got {type(document).__name__}")
    found: list[Interface] = []
    for position, entry in enumerate(document):
        if not isinstance(entry, dict):
            raise fail(probe, f"entry {position} is not an object: {excerpt(repr(entry))!r}")
        if not entry:  # older iproute2 prints {} for filtered-out links
            continue
        found.append(_interface(entry, position, probe))
    return found


def _interface(entry: dict[str, Any], position: int, probe: str) -> Interface:
    name = entry.get("ifname")
    try:
        ipv4: list[str] = []
        ipv6: list[str] = []
        for addr in entry.get("addr_info", []):
            if not addr:  # iproute2 prints {} for an address a filter skipped
                continue
            cidr = f"{addr['local']}/{int(addr['prefixlen'])}"
            if addr.get("family") == "inet":
                ipv4.append(cidr)
            elif addr.get("family") == "inet6":
                ipv6.append(cidr)
        return Interface(
            name=entry["ifname"],
            index=entry["ifindex"],
            mtu=entry["mtu"],
            operstate=entry["operstate"],
            flags=tuple(entry["flags"]),
            mac=entry.get("address"),
            link_type=entry.get("link_type"),
            peer=entry.get("link"),
            ipv4=tuple(ipv4),
            ipv6=tuple(ipv6),
        )
    except KeyError as exc:
        problem = f"has no {exc.args[0]!r}"
        cause: Exception = exc
    except (TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        problem = f"is malformed ({excerpt(str(exc), 120)})"
        cause = exc
    which = f"interface {name!r}" if name else f"entry {position}"
    raise fail(probe, f"{which} {problem}: {excerpt(json.dumps(entry))!r}") from cause


def parse_ip_addr(stdout: str) -> list[Interface]:
    """`ip -j addr show` -> interfaces with their IPv4/IPv6 addresses (prefix included)."""
    return _interfaces(stdout, NAME_ADDR)


def parse_ip_link(stdout: str) -> list[Interface]:
    """`ip -j link show` -> interfaces (link state only: no addresses)."""
    return _interfaces(stdout, NAME_LINK)


IP_ADDR: Probe[list[Interface]] = Probe(
    name=NAME_ADDR, argv=("ip", "-j", "addr", "show"), parse=parse_ip_addr
)
IP_LINK: Probe[list[Interface]] = Probe(
    name=NAME_LINK, argv=("ip", "-j", "link", "show"), parse=parse_ip_link
)
