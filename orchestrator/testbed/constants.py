"""Names, addresses, paths and the per-node views of the testbed (no behaviour here)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

ENV_ROOT = "CLUSTER_TESTBED_DIR"
DEFAULT_ROOT = Path("/run/cluster-testbed")
DEFAULT_PREFIX = "ctb"
DEFAULT_NODES = 8
MAX_NODES = 64
DEFAULT_MGMT_SUBNET = "198.18.0"
DEFAULT_FAB_SUBNET = "198.18.1"
ALLOWED_NET = ipaddress.ip_network("198.18.0.0/15")

#: Management interface inside every node: the name of a DGX Spark's wired management port.
MGMT_IFACE = "enP7s7"
#: Fabric interface inside node k: the two "twin" netdev names of a CX-7 port (even / odd nodes).
FAB_IFACES = ("enp1s0f1np1", "enP2p1s0f1np1")
FAB_MTU = 9000
NETS = ("mgmt", "fabric")

NFT_TABLE = "ctb_fault"
TEST_IMAGE = "ctb/busybox:1"

#: The Docker client every node's SSH session gets first on PATH (after <node>/bin): Debian's
#: docker.io 20.10 client. A newer client may sit in /usr/local/bin; it comes after /usr/bin.
REAL_DOCKER = "/usr/bin/docker"
SSHD = "/usr/sbin/sshd"
NODE_PATH_TAIL = "/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/sbin:/usr/local/bin"
DAEMON_ENV = {
    "PATH": NODE_PATH_TAIL,
    "HOME": "/root",
    "LANG": "C.UTF-8",
}

#: What containerd prints when `docker run` execs an image whose layers are not unpacked yet.
LAZY_UNPACK_ERROR = (
    "docker: Error response from daemon: failed to create task for container: failed to create "
    "shim task: OCI runtime create failed: runc create failed: unable to start container process: "
    'exec: "/bin/sh": stat /bin/sh: no such file or directory: unknown.'
)

#: Per-node folders bind-mounted over these paths for the node's sshd (and so every SSH session on
#: that node). Order matters: /root before /root/.ssh (root-ssh is mounted on root-home/.ssh).
NODE_VIEWS = (
    ("etc-docker", "/etc/docker"),
    ("etc-systemd", "/etc/systemd"),
    ("etc-netplan", "/etc/netplan"),
    ("root-home", "/root"),
    ("root-ssh", "/root/.ssh"),
    # Each node's own disk for model weights (`cluster weights`): eight copies are eight copies.
    ("models", "/models"),
)
