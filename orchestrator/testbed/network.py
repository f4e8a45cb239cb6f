"""Host preparation, network namespaces, the two bridges and every node's veth pairs."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from . import host
from .constants import FAB_MTU, NODE_VIEWS
from .core import TestbedCore
from .node import Node
from .probes import _link_names
from .processes import _run


class NetworkMixin(TestbedCore):
    """Create, list and delete the namespaces and links; run a command inside a namespace."""

    def _prepare_host(self) -> None:
        """Mount points the node views need, sshd's privsep dir, and bridged traffic that does not
        go through the root namespace's iptables (a root dockerd sets FORWARD DROP)."""
        wanted = [Path("/run/sshd"), Path("/etc/netns"), Path("/run/netns")]
        wanted += [Path(t) for _, t in NODE_VIEWS if t not in ("/root", "/root/.ssh")]
        # containerd-shim-runc-v2 puts its sockets under /run/containerd/s whatever --state says:
        # removed again at down (only when empty, and only when absent before up).
        shim = [Path("/run/containerd"), Path("/run/containerd/s")]
        # Shared with any other testbed up at once: made under one lock, and restored or
        # removed by the last one down (host.py).
        host.hold(self.root, make=wanted, ours_if_absent=shim)

    def _make_network(self, nodes: list[Node]) -> None:
        mb, fb = self.mgmt_bridge, self.fab_bridge
        lines = [f"netns add {nd.name}" for nd in nodes]
        lines += [
            f"link add {mb} type bridge",
            f"addr add {self.controller_addr}/24 dev {mb}",
            f"link set {mb} up",
            f"link add {fb} mtu {FAB_MTU} type bridge",
            f"link set {fb} up",
        ]
        for nd in nodes:
            lines += [
                f"link add {nd.host_mgmt_veth} type veth peer name {nd.mgmt_iface} netns {nd.name}",
                f"link set {nd.host_mgmt_veth} master {mb} up",
                f"link add {nd.host_fab_veth} mtu {FAB_MTU} type veth"
                f" peer name {nd.fab_iface} mtu {FAB_MTU} netns {nd.name}",
                f"link set {nd.host_fab_veth} master {fb} up",
            ]
        _run(["ip", "-batch", "-"], input="\n".join(lines) + "\n")
        for nd in nodes:
            node_lines = [
                "link set lo up",
                f"addr add {nd.mgmt_addr}/24 dev {nd.mgmt_iface}",
                f"link set {nd.mgmt_iface} up",
                f"addr add {nd.fab_addr}/24 dev {nd.fab_iface}",
                f"link set {nd.fab_iface} mtu {FAB_MTU} up",
            ]
            _run(["ip", "-n", nd.name, "-batch", "-"], input="\n".join(node_lines) + "\n")

    def _leftover_netns(self) -> list[str]:
        proc = _run(["ip", "netns", "list"], check=False)
        pat = re.compile(rf"{re.escape(self.prefix)}-node\d+")
        names = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
        return [x for x in names if pat.fullmatch(x)]

    def _netns_pids(self, name: str) -> list[int]:
        if not (Path("/var/run/netns") / name).exists():
            return []
        proc = _run(["ip", "netns", "pids", name], check=False)
        return [int(x) for x in proc.stdout.split() if x.isdigit() and int(x) != os.getpid()]

    def _delete_network(self, nodes: Sequence[Node]) -> None:
        lines = [f"netns del {nd.name}" for nd in nodes if nd.netns_path.exists()]
        if lines:
            _run(["ip", "-force", "-batch", "-"], input="\n".join(lines) + "\n", check=False)
        existing = set(_link_names())
        links = [self.mgmt_bridge, self.fab_bridge]
        links += [x for x in existing if re.fullmatch(rf"{re.escape(self.prefix)}-[mf]\d+", x)]
        lines = [f"link del {x}" for x in links if x in existing]
        if lines:
            _run(["ip", "-force", "-batch", "-"], input="\n".join(lines) + "\n", check=False)

    def netns_run(
        self,
        node: int | str | Node,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run argv in a node's network namespace (no SSH; the controller's filesystem view)."""
        nd = self.node(node)
        return _run(
            ["nsenter", f"--net={nd.netns_path}", "--", *argv], check=check, timeout=timeout
        )
