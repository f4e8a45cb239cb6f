"""Link faults: cut and restore links, rate limits (tc tbf) and delay (tc netem)."""

from __future__ import annotations

from .constants import NETS
from .core import TestbedCore
from .errors import TestbedError
from .node import Node
from .processes import _run


class LinksMixin(TestbedCore):
    """Faults on a node's veth pairs (both ends)."""

    # ---- faults: links ---------------------------------------------------------------------

    def cut_link(self, node: int | str | Node, net: str = "fabric", *, side: str = "node") -> None:
        """`ip link set ... down` on the node's interface (side="node": its state reads DOWN) or
        on the bridge-side veth (side="bridge": the node sees LOWERLAYERDOWN)."""
        nd = self.node(node)
        host_veth, iface = nd.iface_pair(net)
        if side == "node":
            _run(["ip", "-n", nd.name, "link", "set", iface, "down"])
        elif side == "bridge":
            _run(["ip", "link", "set", host_veth, "down"])
        else:
            raise TestbedError(f"side: 'node' or 'bridge', not {side!r}")

    def restore_link(self, node: int | str | Node, net: str | None = None) -> None:
        """Both ends of the node's link(s) up again (addresses and routes come back)."""
        nd = self.node(node)
        for n in [net] if net else list(NETS):
            host_veth, iface = nd.iface_pair(n)
            _run(["ip", "link", "set", host_veth, "up"])
            _run(["ip", "-n", nd.name, "link", "set", iface, "up"])

    def shape_link(
        self,
        node: int | str | Node,
        net: str = "fabric",
        rate: str = "100mbit",
        *,
        burst: str = "256kb",
        latency: str = "100ms",
    ) -> None:
        """Token-bucket rate limit on both veth ends (node's upload and download)."""
        nd = self.node(node)
        host_veth, iface = nd.iface_pair(net)
        tbf = ["root", "tbf", "rate", rate, "burst", burst, "latency", latency]
        _run(["tc", "qdisc", "replace", "dev", host_veth, *tbf])
        _run(["tc", "-n", nd.name, "qdisc", "replace", "dev", iface, *tbf])

    def clear_shaping(self, node: int | str | Node, net: str | None = None) -> None:
        nd = self.node(node)
        for n in [net] if net else list(NETS):
            host_veth, iface = nd.iface_pair(n)
            _run(["tc", "qdisc", "del", "dev", host_veth, "root"], check=False)
            _run(["tc", "-n", nd.name, "qdisc", "del", "dev", iface, "root"], check=False)

    def shape_all(self, net: str = "fabric", rate: str = "100mbit") -> None:
        for nd in self.nodes:
            self.shape_link(nd, net, rate)

    @staticmethod
    def netem_available() -> bool:
        """Whether this kernel has sch_netem (delay). Probed on a throwaway dummy link."""
        probe = "ctbnetemprobe"
        if _run(["ip", "link", "add", probe, "type", "dummy"], check=False).returncode != 0:
            return False
        try:
            proc = _run(
                ["tc", "qdisc", "add", "dev", probe, "root", "netem", "delay", "1ms"], check=False
            )
            return proc.returncode == 0
        finally:
            _run(["ip", "link", "del", probe], check=False)

    def delay_link(self, node: int | str | Node, net: str = "fabric", delay: str = "50ms") -> None:
        """netem delay on both ends (replaces shaping). Raises TestbedError if the kernel has no
        sch_netem (the case on the project's VM kernel: use drop_packets for loss instead)."""
        nd = self.node(node)
        host_veth, iface = nd.iface_pair(net)
        netem = ["root", "netem", "delay", delay]
        p1 = _run(["tc", "qdisc", "replace", "dev", host_veth, *netem], check=False)
        if p1.returncode != 0:
            raise TestbedError(f"tc netem unavailable on this kernel: {p1.stderr.strip()}")
        _run(["tc", "-n", nd.name, "qdisc", "replace", "dev", iface, *netem])
