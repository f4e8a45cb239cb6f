"""What the testbed needs on the machine (tools, root, kernel features) and its root folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .constants import DEFAULT_ROOT, ENV_ROOT, REAL_DOCKER, SSHD

#: tool -> Debian package that provides it
REQUIRED_TOOLS = {
    "ip": "iproute2",
    "tc": "iproute2",
    "nft": "nftables",
    "sshd": "openssh-server",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "dockerd": "docker.io",
    "containerd": "containerd",
    "runc": "runc",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "mount": "mount",
    "umount": "mount",
    "flock": "util-linux",
    "busybox": "busybox-static",
    "tar": "tar",
}


def _which(tool: str) -> str | None:
    path = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin"
    return shutil.which(tool, path=path)


def missing_prerequisites() -> list[str]:
    """Why the testbed cannot run here (empty list: it can). Not root is one of the reasons."""
    problems = []
    if os.geteuid() != 0:
        problems.append(f"not root (euid {os.geteuid()}): network namespaces need root")
    for tool, pkg in REQUIRED_TOOLS.items():
        if _which(tool) is None:
            problems.append(f"`{tool}` not found (Debian package {pkg})")
    if not os.access(REAL_DOCKER, os.X_OK):
        problems.append(f"{REAL_DOCKER} not found (Debian package docker.io)")
    if not os.access(SSHD, os.X_OK):
        problems.append(f"{SSHD} not found (Debian package openssh-server)")
    if not Path("/proc/self/ns/net").exists():
        problems.append("kernel without network namespaces (/proc/self/ns/net missing)")
    if not Path("/sys/fs/cgroup").is_dir():
        problems.append("/sys/fs/cgroup is not mounted (dockerd needs cgroups)")
    return problems


def default_root() -> Path:
    return Path(os.environ.get(ENV_ROOT) or DEFAULT_ROOT)
