"""RDMA (RoCE) devices from sysfs: which HCAs exist, their port state, netdev and RoCEv2 GID index.

A DGX Spark's ConnectX-7 shows each QSFP port as two "twin" netdevs and two RoCE devices
(`rocep1s0f1` -> `enp1s0f1np1`, `roceP2p1s0f1` -> `enP2p1s0f1np1`, one per PCIe Gen5 x4 half);
full bandwidth needs both twins in `NCCL_IB_HCA`. NCCL over RoCE also needs the GID index of the
RoCEv2 entry that carries the port's IPv4 address (`NCCL_IB_GID_INDEX`): 3 is common, 5 is seen
when IPv6 addresses take the earlier slots. sparkrun's `ib_detect.sh` reads the same files (it
asks `show_gids` first, then sysfs `gid_attrs/types`, then guesses 3); we read sysfs only, so
nothing beyond coreutils and grep must be installed on the node.

The command is one constant shell script (no value is interpolated): `grep -H` prints every
readable attribute as `PATH:VALUE`, relative to `/sys/class/infiniband`:

    rocep1s0f1/ports/1/state:4: ACTIVE
    rocep1s0f1/ports/1/gid_attrs/types/3:RoCE v2
    rocep1s0f1/ports/1/gid_attrs/ndevs/3:enp1s0f1np1
    rocep1s0f1/ports/1/gids/3:0000:0000:0000:0000:0000:ffff:c0a8:640a
    net:rocep1s0f1/device/net/enp1s0f1np1
    dev:/dev/infiniband

All-zero GIDs (unused table slots, 256 per port) are filtered on the node; `types` of an unused
slot cannot be read (EINVAL) and `grep -s` skips it. No `/sys/class/infiniband` at all (the
testbed, a machine without RDMA) prints nothing but the `/dev/infiniband` line when that exists,
and is an answer: no devices, so NCCL uses sockets and `NCCL_IB_*` stay unset.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.probes.base import Probe, excerpt, fail

NAME = "rdma"

SCRIPT = r"""[ -d /dev/infiniband ] && echo dev:/dev/infiniband
cd /sys/class/infiniband 2>/dev/null || exit 0
grep -s -H . */ports/*/state */ports/*/phys_state */ports/*/link_layer \
  */ports/*/gid_attrs/types/* */ports/*/gid_attrs/ndevs/*
grep -s -H -v -x 0000:0000:0000:0000:0000:0000:0000:0000 */ports/*/gids/*
for f in */device/net/*; do [ -e "$f" ] && echo "net:$f"; done
exit 0
"""

ROCE_V2 = "RoCE v2"
_ATTR = re.compile(
    r"^(?P<dev>[^/]+)/ports/(?P<port>\d+)/"
    r"(?:(?P<key>state|phys_state|link_layer)|gid_attrs/(?P<attr>types|ndevs)/(?P<i>\d+)"
    r"|gids/(?P<gi>\d+))$"
)
_NET = re.compile(r"^(?P<dev>[^/]+)/device/net/(?P<iface>[^/]+)$")


class RdmaGid(StrictModel):
    """One populated GID table entry of a port."""

    index: int = Field(ge=0)
    gid: str = Field(description="as sysfs prints it: eight groups of four hex digits")
    type: str | None = Field(default=None, description='"RoCE v2" or "IB/RoCE v1"')
    ndev: str | None = Field(default=None, description="the netdev this GID belongs to")

    @property
    def ipv4(self) -> str | None:
        """The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`), else None."""
        try:
            address = ipaddress.IPv6Address(self.gid)
        except ValueError:
            return None
        mapped = address.ipv4_mapped
        return str(mapped) if mapped is not None else None

    @property
    def rocev2(self) -> bool:
        return self.type == ROCE_V2


class RdmaPort(StrictModel):
    port: int = Field(ge=1)
    state: str | None = Field(
        default=None, description="ACTIVE, DOWN, INIT, ... (sysfs `4: ACTIVE`)"
    )
    phys_state: str | None = Field(default=None, description="LinkUp, Disabled, Polling, ...")
    link_layer: str | None = Field(default=None, description="Ethernet (RoCE) or InfiniBand")
    gids: tuple[RdmaGid, ...] = ()

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"


class RdmaDevice(StrictModel):
    """One RDMA device (HCA), e.g. `rocep1s0f1`, with the netdev(s) it drives."""

    name: str = Field(min_length=1)
    netdevs: tuple[str, ...] = ()
    ports: tuple[RdmaPort, ...] = ()

    def port(self, number: int = 1) -> RdmaPort | None:
        return next((p for p in self.ports if p.port == number), None)

    @property
    def active(self) -> bool:
        """Port 1 is ACTIVE (a Spark's RoCE devices have one port each)."""
        port = self.port(1)
        return port is not None and port.active

    def rocev2_gid_index(self, ipv4: str | None = None, port: int = 1) -> int | None:
        """The GID index NCCL should use on `port`: the RoCEv2 entry carrying `ipv4` when given
        and present, else the first RoCEv2 entry with an IPv4 address, else the first RoCEv2."""
        found = self.port(port)
        if found is None:
            return None
        v2 = [g for g in found.gids if g.rocev2]
        if ipv4 is not None:
            exact = [g for g in v2 if g.ipv4 == ipv4]
            if exact:
                return exact[0].index
        with_v4 = [g for g in v2 if g.ipv4 is not None]
        if with_v4:
            return with_v4[0].index
        return v2[0].index if v2 else None


class RdmaInfo(StrictModel):
    """The RDMA devices of one node; empty when it has none (then NCCL uses sockets)."""

    devices: tuple[RdmaDevice, ...] = ()
    dev_infiniband: bool = Field(
        default=False, description="/dev/infiniband exists (what `--device=/dev/infiniband` needs)"
    )

    @property
    def present(self) -> bool:
        return bool(self.devices)

    def device(self, name: str) -> RdmaDevice | None:
        return next((d for d in self.devices if d.name == name), None)

    def for_netdev(self, iface: str) -> RdmaDevice | None:
        """The device driving netdev `iface`, or None."""
        return next((d for d in self.devices if iface in d.netdevs), None)


_TWIN = re.compile(r"^en(?:P\d+)?(?P<rest>p\d+s\d+f\d+(?:np\d+)?)$")


def twin_key(iface: str) -> str | None:
    """The name shared by the two twins of a CX-7 port, without the PCI domain part.

    `enp1s0f1np1` and `enP2p1s0f1np1` both give `p1s0f1np1`: the same QSFP port seen through
    the two PCIe halves. Names of another shape (eth0, lo, the testbed's veths) have no twin.
    """
    match = _TWIN.match(iface)
    return match.group("rest") if match else None


def fabric_devices(rdma: RdmaInfo, iface: str) -> list[RdmaDevice]:
    """The devices behind `iface` and its CX-7 twin, in sysfs order (both halves of one port)."""
    key = twin_key(iface)
    found = []
    for device in rdma.devices:
        if iface in device.netdevs or (key and any(twin_key(n) == key for n in device.netdevs)):
            found.append(device)
    return found


def _state(value: str) -> str:
    """`4: ACTIVE` -> `ACTIVE` (sysfs prints the number and the name)."""
    _, colon, name = value.partition(":")
    return name.strip() if colon else value.strip()


def parse_rdma(stdout: str) -> RdmaInfo:
    """The output of `SCRIPT` -> `RdmaInfo`."""
    ports: dict[tuple[str, int], dict[str, str]] = {}
    gids: dict[tuple[str, int, int], dict[str, str]] = {}
    netdevs: dict[str, list[str]] = {}
    order: list[str] = []
    dev_ib = False

    def seen(dev: str) -> None:
        if dev not in order:
            order.append(dev)

    for number, raw in enumerate(stdout.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line == "dev:/dev/infiniband":
            dev_ib = True
            continue
        if line.startswith("net:"):
            if "*" in line:  # an unmatched glob: the device has no netdev
                continue
            match = _NET.match(line[4:])
            if match is None:
                raise fail(NAME, f"line {number} is not a device/net path: {excerpt(line)!r}")
            seen(match["dev"])
            netdevs.setdefault(match["dev"], []).append(match["iface"])
            continue
        path, colon, value = line.partition(":")
        match = _ATTR.match(path)
        if not colon or match is None:
            raise fail(NAME, f"line {number} is not `PATH:VALUE` under sysfs: {excerpt(line)!r}")
        dev, port = match["dev"], int(match["port"])
        seen(dev)
        ports.setdefault((dev, port), {})
        if match["key"]:
            ports[(dev, port)][match["key"]] = value.strip()
        elif match["attr"]:
            gids.setdefault((dev, port, int(match["i"])), {})[match["attr"]] = value.strip()
        else:
            gids.setdefault((dev, port, int(match["gi"])), {})["gid"] = value.strip()
    devices = []
    for dev in order:
        dev_ports = []
        for (d, port), attrs in sorted(ports.items(), key=lambda kv: kv[0][1]):
            if d != dev:
                continue
            table = [
                RdmaGid(index=i, gid=e["gid"], type=e.get("types"), ndev=e.get("ndevs") or None)
                for (gd, gp, i), e in sorted(gids.items(), key=lambda kv: kv[0][2])
                if gd == dev and gp == port and "gid" in e
            ]
            dev_ports.append(
                RdmaPort(
                    port=port,
                    state=_state(attrs["state"]) if "state" in attrs else None,
                    phys_state=_state(attrs["phys_state"]) if "phys_state" in attrs else None,
                    link_layer=attrs.get("link_layer"),
                    gids=tuple(table),
                )
            )
        devices.append(
            RdmaDevice(name=dev, netdevs=tuple(netdevs.get(dev, ())), ports=tuple(dev_ports))
        )
    return RdmaInfo(devices=tuple(devices), dev_infiniband=dev_ib)


def active_names(devices: Iterable[RdmaDevice]) -> list[str]:
    return [d.name for d in devices if d.active]


RDMA: Probe[RdmaInfo] = Probe(name=NAME, argv=("sh", "-c", SCRIPT), parse=parse_rdma)
