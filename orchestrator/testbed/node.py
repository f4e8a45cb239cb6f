"""One testbed node: its names, addresses, interfaces and where its files live."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .constants import NETS, NODE_PATH_TAIL, NODE_VIEWS
from .errors import TestbedError


@dataclass(frozen=True)
class Node:
    """One testbed node. `name` is also its network namespace, hostname and cgroup parent."""

    index: int
    name: str
    dir: Path
    mgmt_addr: str
    fab_addr: str
    mgmt_iface: str
    fab_iface: str
    host_mgmt_veth: str
    host_fab_veth: str

    @property
    def netns_path(self) -> Path:
        return Path("/var/run/netns") / self.name

    @property
    def docker_sock(self) -> Path:
        return self.dir / "docker.sock"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.docker_sock}"

    @property
    def containerd_sock(self) -> Path:
        return self.dir / "containerd.sock"

    @property
    def data_root(self) -> Path:
        return self.dir / "docker"

    @property
    def exec_root(self) -> Path:
        return self.dir / "exec"

    @property
    def containerd_dir(self) -> Path:
        return self.dir / "containerd"

    @property
    def bin_dir(self) -> Path:
        """First on PATH of every SSH session on this node (the docker wrapper goes here)."""
        return self.dir / "bin"

    @property
    def etc_docker(self) -> Path:
        return self.dir / "etc-docker"

    @property
    def etc_systemd(self) -> Path:
        return self.dir / "etc-systemd"

    @property
    def etc_netplan(self) -> Path:
        return self.dir / "etc-netplan"

    @property
    def root_home(self) -> Path:
        return self.dir / "root-home"

    @property
    def root_ssh(self) -> Path:
        return self.dir / "root-ssh"

    @property
    def faults_dir(self) -> Path:
        return self.dir / "faults"

    @property
    def sshd_config(self) -> Path:
        return self.dir / "sshd_config"

    @property
    def host_key(self) -> Path:
        return self.dir / "ssh_host_ed25519_key"

    @property
    def log_dir(self) -> Path:
        return self.dir / "logs"

    @property
    def node_path(self) -> str:
        """PATH of an SSH session on this node."""
        return f"{self.bin_dir}:{NODE_PATH_TAIL}"

    def view(self, path_in_node: str) -> Path:
        """Where node-side `path_in_node` (under one of NODE_VIEWS) lives on the controller."""
        best: tuple[str, str] | None = None
        for folder, target in NODE_VIEWS:
            if (path_in_node == target or path_in_node.startswith(target + "/")) and (
                best is None or len(target) > len(best[1])
            ):
                best = (folder, target)
        if best is None:
            raise TestbedError(f"{path_in_node} is not a per-node view ({NODE_VIEWS})")
        rest = path_in_node[len(best[1]) :].lstrip("/")
        return self.dir / best[0] / rest if rest else self.dir / best[0]

    def iface_pair(self, net: str) -> tuple[str, str]:
        """(bridge-side veth in the root namespace, interface inside the node) of `net`."""
        if net in ("mgmt", "management"):
            return self.host_mgmt_veth, self.mgmt_iface
        if net in ("fabric", "fab"):
            return self.host_fab_veth, self.fab_iface
        raise TestbedError(f"unknown network {net!r}: use one of {NETS}")
