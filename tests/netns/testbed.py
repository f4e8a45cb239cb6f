"""A real cluster on one machine: N "nodes" as network namespaces, each with its own OpenSSH sshd,
containerd and dockerd, joined by a management bridge and an MTU-9000 fabric bridge.

Library (used by tests/netns/conftest.py) and CLI for a person, run as root::

    .venv/bin/python -m tests.netns.testbed up [N]       # default 8 nodes
    .venv/bin/python -m tests.netns.testbed status
    .venv/bin/python -m tests.netns.testbed ssh node3 -- docker ps
    .venv/bin/python -m tests.netns.testbed fault sshd-stop node3
    .venv/bin/python -m tests.netns.testbed heal
    .venv/bin/python -m tests.netns.testbed down

Everything lives under one root folder (default ``/run/cluster-testbed``, or ``$CLUSTER_TESTBED_DIR``)
and every kernel object it creates is named with a prefix (default ``ctb``), so ``down`` finds it
again: by the PIDs recorded in ``<root>/state.json`` first, then by name. Addresses come only from
198.18.0.0/15. Processes are only ever signalled by recorded PID (checked against the recorded start
time, so a reused PID is never hit) or, for the final sweep, because they live inside one of the
testbed's own network namespaces or cgroups. No shell ever sees an interpolated string: every command
is an argv list; the few shell snippets are constant strings that take their values as "$1"...

See docs/testbed.md for the person-facing guide.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------------------------------
# Constants

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
)

# Runs inside `ip netns exec NODE unshare --mount --uts --propagation slave`: give this node its own
# views and hostname, then exec sshd. Constant text; values arrive as positional parameters.
_SSHD_LAUNCH = """set -eu
node_dir=$1
host=$2
shift 2
mount --bind "$node_dir/etc-docker" /etc/docker
mount --bind "$node_dir/etc-systemd" /etc/systemd
mount --bind "$node_dir/etc-netplan" /etc/netplan
mount --bind "$node_dir/root-home" /root
mount --bind "$node_dir/root-ssh" /root/.ssh
printf '%s' "$host" > /proc/sys/kernel/hostname
exec "$@"
"""

# A TCP listener that accepts every connection and never says a word (an "sshd" that hangs).
_SILENT_LISTENER = """import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(128)
held = []
while True:
    conn, _ = s.accept()
    held.append(conn)
"""

# The lazy-unpack docker wrapper. Filled with str.format (paths shell-quoted); it is file content.
_DOCKER_WRAPPER = """#!/bin/sh
# Fault injected by tests.netns.testbed (lazy-unpack): after every `docker load`, the next
# {failures} `docker run`/`docker create` fail like a half-unpacked image, then calls pass through.
REAL={real}
STATE={state}
FAILS={failures}
sub=""
op=""
skip=0
for a in "$@"; do
  if [ "$skip" = 1 ]; then skip=0; continue; fi
  case "$a" in
    -H|--host|-c|--context|--config|-l|--log-level|--tlscacert|--tlscert|--tlskey)
      skip=1; continue ;;
    -*) continue ;;
  esac
  if [ -z "$sub" ]; then
    sub=$a
    case "$sub" in container|image) continue ;; esac
    op=$sub
    break
  fi
  op=$a
  break
done
echo "$op" >> "$STATE/calls"
case "$op" in
  load)
    "$REAL" "$@"
    rc=$?
    if [ "$rc" -eq 0 ]; then
      ( flock 9; echo "$FAILS" > "$STATE/remaining" ) 9>"$STATE/lock"
    fi
    exit "$rc" ;;
  run|create)
    exec 9>"$STATE/lock"
    flock 9
    left=$(cat "$STATE/remaining" 2>/dev/null || echo 0)
    if [ "${{left:-0}}" -gt 0 ]; then
      echo $((left - 1)) > "$STATE/remaining"
      done_=$(cat "$STATE/failed" 2>/dev/null || echo 0)
      echo $((done_ + 1)) > "$STATE/failed"
      exec 9>&-
      echo {message} >&2
      exit 125
    fi
    exec 9>&- ;;
esac
exec "$REAL" "$@"
"""


class TestbedError(RuntimeError):
    """The testbed could not do what was asked; the message says what and where to look."""

    __test__ = False  # not a pytest test class


# --------------------------------------------------------------------------------------------------
# Prerequisites

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


# --------------------------------------------------------------------------------------------------
# Processes (by recorded PID only)

_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
_CHILDREN_LOCK = threading.Lock()


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a process, None when there is none."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def _reap(pid: int) -> None:
    """Collect the exit status of a child of ours (so no zombie stays behind)."""
    with _CHILDREN_LOCK:
        popen = _CHILDREN.get(pid)
    if popen is not None:
        if popen.poll() is not None:
            with _CHILDREN_LOCK:
                _CHILDREN.pop(pid, None)
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def pid_alive(pid: int | None, start: int | None = None) -> bool:
    """True when `pid` runs and (if given) started at `start`. Zombies count as dead."""
    if not pid:
        return False
    _reap(pid)
    st = _proc_stat(pid)
    if st is None or st[0] in ("Z", "X", "x"):
        return False
    return start is None or st[1] == start


def _rec_alive(rec: dict[str, Any] | None) -> bool:
    return bool(rec) and not rec.get("stopped") and pid_alive(rec.get("pid"), rec.get("start"))


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def terminate(records: Iterable[dict[str, Any]], timeout: float = 10.0) -> None:
    """SIGTERM every live recorded process, wait (bounded), SIGKILL what is left, wait again."""
    live = [r for r in records if r and pid_alive(r.get("pid"), r.get("start"))]
    for r in live:
        _signal(r["pid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = [r for r in live if pid_alive(r["pid"], r.get("start"))]
        if not live:
            return
        time.sleep(0.05)
    for r in live:
        _signal(r["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and live:
        live = [r for r in live if pid_alive(r["pid"], r.get("start"))]
        time.sleep(0.05)


def _spawn(argv: Sequence[str], log: Path, what: str) -> dict[str, Any]:
    """Start a daemon in its own session, output appended to `log`; returns its PID record."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            cwd="/",
            env=DAEMON_ENV,
        )
    with _CHILDREN_LOCK:
        _CHILDREN[popen.pid] = popen
    st = _proc_stat(popen.pid)
    return {
        "pid": popen.pid,
        "start": st[1] if st else None,
        "what": what,
        "argv": list(argv),
        "log": str(log),
    }


def _run(
    argv: Sequence[str],
    *,
    check: bool = True,
    input: str | None = None,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        list(argv),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
    if check and proc.returncode != 0:
        raise TestbedError(
            f"command failed (rc {proc.returncode}): {shlex.join(argv)}\n"
            f"{proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc


def _tail(path: Path | str, lines: int = 15) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------------------------------------
# Nodes


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


# --------------------------------------------------------------------------------------------------
# The testbed


class Testbed:
    """A testbed under `root` (default $CLUSTER_TESTBED_DIR or /run/cluster-testbed).

    Construct, then `up(n)`; or construct over an existing root to drive a testbed someone else
    brought up (the prefix and subnets are read back from its state file).
    """

    __test__ = False

    def __init__(
        self,
        root: Path | str | None = None,
        *,
        prefix: str | None = None,
        mgmt_subnet: str | None = None,
        fab_subnet: str | None = None,
    ) -> None:
        self.root = Path(root) if root is not None else default_root()
        if not self.root.is_absolute():
            self.root = self.root.resolve()
        if str(self.root) in ("/", "") or len(self.root.parts) < 3:
            raise TestbedError(f"refusing testbed root {self.root}: use a dedicated folder")
        self._lock = threading.RLock()
        saved = self._read_state()
        self.prefix = prefix or (saved or {}).get("prefix") or DEFAULT_PREFIX
        self.mgmt_subnet = mgmt_subnet or (saved or {}).get("mgmt_subnet") or DEFAULT_MGMT_SUBNET
        self.fab_subnet = fab_subnet or (saved or {}).get("fab_subnet") or DEFAULT_FAB_SUBNET
        if not re.fullmatch(r"[a-z][a-z0-9]{1,5}", self.prefix):
            raise TestbedError(f"prefix {self.prefix!r}: 2-6 lowercase letters/digits")
        for subnet in (self.mgmt_subnet, self.fab_subnet):
            net = ipaddress.ip_network(f"{subnet}.0/24")
            if not net.subnet_of(ALLOWED_NET):  # type: ignore[arg-type]
                raise TestbedError(f"subnet {subnet}.0/24 is outside {ALLOWED_NET}")
        if self.mgmt_subnet == self.fab_subnet:
            raise TestbedError("management and fabric subnets must differ")
        self._n = int((saved or {}).get("n") or 0)

    # ---- paths -----------------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def inventory(self) -> Path:
        return self.root / "inventory.yaml"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def client_dir(self) -> Path:
        return self.root / "client"

    @property
    def client_key(self) -> Path:
        return self.client_dir / "id_ed25519"

    @property
    def docker_config_dir(self) -> Path:
        return self.client_dir / "docker-config"

    @property
    def image_dir(self) -> Path:
        return self.root / "image"

    @property
    def mgmt_bridge(self) -> str:
        return f"{self.prefix}-mgmt"

    @property
    def fab_bridge(self) -> str:
        return f"{self.prefix}-fab"

    @property
    def controller_addr(self) -> str:
        return f"{self.mgmt_subnet}.1"

    # ---- nodes -----------------------------------------------------------------------------

    def _make_node(self, k: int) -> Node:
        return Node(
            index=k,
            name=f"{self.prefix}-node{k}",
            dir=self.root / "nodes" / f"node{k}",
            mgmt_addr=f"{self.mgmt_subnet}.{10 + k}",
            fab_addr=f"{self.fab_subnet}.{10 + k}",
            mgmt_iface=MGMT_IFACE,
            fab_iface=FAB_IFACES[k % 2],
            host_mgmt_veth=f"{self.prefix}-m{k}",
            host_fab_veth=f"{self.prefix}-f{k}",
        )

    @property
    def nodes(self) -> list[Node]:
        n = self._n
        if not n:
            saved = self._read_state()
            n = int((saved or {}).get("n") or 0)
        return [self._make_node(k) for k in range(n)]

    def node(self, which: int | str | Node) -> Node:
        """A node by index (3), short name ("node3") or full name ("ctb-node3")."""
        if isinstance(which, Node):
            return which
        nodes = self.nodes
        if isinstance(which, int) or (isinstance(which, str) and which.isdigit()):
            k = int(which)
        else:
            m = re.fullmatch(rf"(?:{re.escape(self.prefix)}-)?node(\d+)", str(which))
            if not m:
                raise TestbedError(f"no node {which!r} (use 3, node3 or {self.prefix}-node3)")
            k = int(m.group(1))
        if not 0 <= k < len(nodes):
            raise TestbedError(f"no node {which!r}: the testbed has {len(nodes)} nodes")
        return nodes[k]

    # ---- state -----------------------------------------------------------------------------

    def _read_state(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.state_file.read_text())  # type: ignore[no-any-return]
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def _write_state(self, state: dict[str, Any]) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
        os.replace(tmp, self.state_file)

    @contextlib.contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        """Read-modify-write of the state file (under the instance lock)."""
        with self._lock:
            state = self._read_state()
            if state is None:
                raise TestbedError(f"no testbed under {self.root} (no {self.state_file.name})")
            yield state
            self._write_state(state)

    def state(self) -> dict[str, Any]:
        """A copy of the recorded state (PIDs, timings, created paths)."""
        return self._read_state() or {}

    def _node_state(self, state: dict[str, Any], node: Node) -> dict[str, Any]:
        return state["nodes"].setdefault(  # type: ignore[no-any-return]
            str(node.index), {"pids": {}, "listeners": []}
        )

    def pid(self, node: int | str | Node, which: str) -> int | None:
        """The recorded PID of `which` (sshd, containerd, dockerd) on a node, None if stopped."""
        n = self.node(node)
        rec = (self.state().get("nodes", {}).get(str(n.index), {}).get("pids", {})).get(which)
        if not rec or rec.get("stopped"):
            return None
        return int(rec["pid"])

    def recorded_pids(self) -> list[int]:
        """Every PID the testbed ever recorded (daemons, restarted daemons, listeners)."""
        state = self.state()
        pids = [int(r["pid"]) for r in state.get("history", []) if r.get("pid")]
        return sorted(set(pids))

    def is_up(self) -> bool:
        return (self.state().get("status")) == "up"

    # ---- bring-up --------------------------------------------------------------------------

    def up(self, n: int = DEFAULT_NODES, *, wait_timeout: float = 90.0) -> float:
        """Bring up `n` nodes (tearing down a previous testbed under this root first).

        Returns the seconds it took. On any failure everything created so far is torn down."""
        problems = missing_prerequisites()
        if problems:
            raise TestbedError("testbed prerequisites missing: " + "; ".join(problems))
        if not 1 <= n <= MAX_NODES:
            raise TestbedError(f"nodes: 1..{MAX_NODES}, not {n}")
        t0 = time.monotonic()
        with self._lock:
            self.down()
            self._n = n
            nodes = self.nodes
            sock_len = len(str(nodes[-1].containerd_sock)) + len(".ttrpc")
            if sock_len > 100:
                raise TestbedError(f"root {self.root} is too long for unix socket paths")
            self.root.mkdir(parents=True, exist_ok=True)
            state: dict[str, Any] = {
                "version": 1,
                "status": "starting",
                "root": str(self.root),
                "prefix": self.prefix,
                "n": n,
                "mgmt_subnet": self.mgmt_subnet,
                "fab_subnet": self.fab_subnet,
                "mgmt_iface": MGMT_IFACE,
                "fab_ifaces": list(FAB_IFACES),
                "created_host_paths": [],
                "sysctl_restore": {},
                "nodes": {str(nd.index): {"pids": {}, "listeners": []} for nd in nodes},
                "history": [],
                "timings": {},
            }
            self._write_state(state)
            try:
                self._up(nodes, t0, wait_timeout)
            except BaseException:
                with contextlib.suppress(Exception):
                    self.down()
                raise
        return time.monotonic() - t0

    def _up(self, nodes: list[Node], t0: float, wait_timeout: float) -> None:
        timings: dict[str, float] = {}
        self._prepare_host()
        self._make_keys(nodes)
        timings["keys"] = time.monotonic() - t0
        self._make_network(nodes)
        timings["network"] = time.monotonic() - t0
        self._write_files(nodes)
        timings["files"] = time.monotonic() - t0
        with self._state() as st:
            for nd in nodes:
                self._record(st, nd, "containerd", self._spawn_containerd(nd))
                self._record(st, nd, "sshd", self._spawn_sshd(nd))
        self._wait_daemons(nodes, ("containerd",), wait_timeout, start_dockerd=True)
        self._wait_daemons(nodes, ("sshd", "dockerd"), wait_timeout)
        timings["daemons"] = time.monotonic() - t0
        with self._state() as st:
            st["status"] = "up"
            st["timings"] = {k: round(v, 2) for k, v in timings.items()}
            st["timings"]["up"] = round(time.monotonic() - t0, 2)

    def _record(self, st: dict[str, Any], nd: Node, which: str, rec: dict[str, Any]) -> None:
        self._node_state(st, nd)["pids"][which] = rec
        st.setdefault("history", []).append(
            {"node": nd.index, "what": which, "pid": rec["pid"], "start": rec["start"]}
        )

    def _prepare_host(self) -> None:
        """Mount points the node views need, sshd's privsep dir, and bridged traffic that does not
        go through the root namespace's iptables (a root dockerd sets FORWARD DROP)."""
        created: list[str] = []
        restore: dict[str, str] = {}
        wanted = [Path("/run/sshd"), Path("/etc/netns"), Path("/run/netns")]
        wanted += [Path(t) for _, t in NODE_VIEWS if t not in ("/root", "/root/.ssh")]
        for p in wanted:
            if not p.exists():
                p.mkdir(parents=True, mode=0o755)
                created.append(str(p))
        # containerd-shim-runc-v2 puts its sockets under /run/containerd/s whatever --state says:
        # removed again at down (only when empty, and only when absent before up).
        for p in (Path("/run/containerd"), Path("/run/containerd/s")):
            if not p.exists():
                created.append(str(p))
        for key in (
            "bridge-nf-call-iptables",
            "bridge-nf-call-ip6tables",
            "bridge-nf-call-arptables",
        ):
            f = Path("/proc/sys/net/bridge") / key
            if f.exists():
                old = f.read_text().strip()
                if old != "0":
                    restore[str(f)] = old
                    f.write_text("0\n")
        with self._state() as st:
            st["created_host_paths"] = created
            st["sysctl_restore"] = restore

    def _make_keys(self, nodes: list[Node]) -> None:
        self.client_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.client_dir, 0o700)
        self.docker_config_dir.mkdir(parents=True, exist_ok=True)
        jobs: list[tuple[list[str], Path]] = []
        targets = [(self.client_key, f"{self.prefix}-controller")]
        for nd in nodes:
            nd.dir.mkdir(parents=True, exist_ok=True)
            targets.append((nd.host_key, f"{nd.name}-host"))
        for key, comment in targets:
            for p in (key, key.with_suffix(".pub")):
                p.unlink(missing_ok=True)
            argv = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)]
            jobs.append((argv, key))
        procs = [
            subprocess.Popen(
                a, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            for a, _ in jobs
        ]
        for p, (argv, _) in zip(procs, jobs, strict=True):
            out, _ = p.communicate(timeout=60)
            if p.returncode != 0:
                raise TestbedError(f"{shlex.join(argv)} failed: {out.decode(errors='replace')}")

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

    def _write_files(self, nodes: list[Node]) -> None:
        client_pub = self.client_key.with_suffix(".pub").read_text().strip()
        host_keys = {}
        for nd in nodes:
            typ, key = nd.host_key.with_suffix(".pub").read_text().split()[:2]
            host_keys[nd.index] = f"{typ} {key}"
        kh_lines = []
        for nd in nodes:
            for who in (nd.mgmt_addr, nd.name, nd.fab_addr, f"{nd.name}-fab"):
                kh_lines.append(f"{who} {host_keys[nd.index]}")
        known_hosts = "\n".join(kh_lines) + "\n"
        self.known_hosts.write_text(known_hosts)

        hosts = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        hosts.append(f"{self.controller_addr}\t{self.prefix}-controller")
        for nd in nodes:
            hosts.append(f"{nd.mgmt_addr}\t{nd.name}")
            hosts.append(f"{nd.fab_addr}\t{nd.name}-fab")
        hosts_text = "\n".join(hosts) + "\n"

        client_priv = self.client_key.read_bytes()
        for nd in nodes:
            for folder, _ in NODE_VIEWS:
                (nd.dir / folder).mkdir(parents=True, exist_ok=True)
            (nd.etc_systemd / "system").mkdir(exist_ok=True)
            (nd.root_home / ".ssh").mkdir(exist_ok=True)
            # Debian's /etc/profile resets root's PATH in login shells; keep the node's PATH there
            (nd.root_home / ".profile").write_text(
                "# written by tests.netns.testbed: /etc/profile resets PATH for root\n"
                f"PATH={nd.node_path}\nexport PATH\n"
            )
            os.chmod(nd.root_ssh, 0o700)
            for d in (nd.bin_dir, nd.faults_dir, nd.log_dir, nd.containerd_dir, nd.data_root):
                d.mkdir(parents=True, exist_ok=True)
            ak = nd.root_ssh / "authorized_keys"
            ak.write_text(client_pub + "\n")
            os.chmod(ak, 0o600)
            idk = nd.root_ssh / "id_ed25519"
            idk.write_bytes(client_priv)
            os.chmod(idk, 0o600)
            (nd.root_ssh / "id_ed25519.pub").write_text(client_pub + "\n")
            (nd.root_ssh / "known_hosts").write_text(known_hosts)
            netns_etc = Path("/etc/netns") / nd.name
            netns_etc.mkdir(parents=True, exist_ok=True)
            (netns_etc / "hosts").write_text(hosts_text)
            nd.sshd_config.write_text(self._sshd_config(nd))
            (nd.containerd_dir / "config.toml").write_text(self._containerd_config(nd))
        self.inventory.write_text(self._inventory_text(nodes))

    def _sshd_config(self, nd: Node) -> str:
        return f"""# generated by tests.netns.testbed for {nd.name}
Port 22
ListenAddress 0.0.0.0
AddressFamily inet
HostKey {nd.host_key}
PidFile none
StrictModes no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
PrintMotd no
PrintLastLog no
MaxStartups 100:30:200
SetEnv DOCKER_HOST={nd.docker_host} PATH={nd.node_path}
Subsystem sftp internal-sftp
"""

    def _containerd_config(self, nd: Node) -> str:
        c = nd.containerd_dir
        return f"""# generated by tests.netns.testbed for {nd.name}
version = 2
root = "{c / "root"}"
state = "{c / "state"}"
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "{nd.containerd_sock}"

[ttrpc]
  address = "{nd.containerd_sock}.ttrpc"

[debug]
  address = ""
  level = "warn"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{c / "opt"}"
"""

    def _inventory_text(self, nodes: list[Node]) -> str:
        out = [
            f"# Testbed inventory written by tests.netns.testbed ({len(nodes)} nodes).",
            "all:",
            "  vars:",
            "    cluster_name: testbed",
            "    cluster_known_hosts: known_hosts        # relative to this file",
            "    ansible_user: root",
            f"    ansible_ssh_private_key_file: {self.client_key}",
            "  children:",
            "    sparks:",
            "      hosts:",
        ]
        for nd in nodes:
            out += [
                f"        {nd.name}:",
                f"          ansible_host: {nd.mgmt_addr}",
                f"          rank: {nd.index}",
                f"          fabric_iface: {nd.fab_iface}",
                f"          mgmt_iface: {nd.mgmt_iface}",
                f"          docker_host: {nd.docker_host}",
            ]
        return "\n".join(out) + "\n"

    # ---- daemons ---------------------------------------------------------------------------

    def _spawn_containerd(self, nd: Node) -> dict[str, Any]:
        nd.containerd_sock.unlink(missing_ok=True)
        argv = [
            "nsenter",
            f"--net={nd.netns_path}",
            "--",
            "containerd",
            "--config",
            str(nd.containerd_dir / "config.toml"),
        ]
        return _spawn(argv, nd.log_dir / "containerd.log", "containerd")

    def _spawn_dockerd(self, nd: Node) -> dict[str, Any]:
        argv = [
            "nsenter",
            f"--net={nd.netns_path}",
            "--",
            "dockerd",
            f"--containerd={nd.containerd_sock}",
            "--bridge=none",
            "--iptables=false",
            "--ip-masq=false",
            "--ip-forward=false",
            "--userland-proxy=false",
            f"--data-root={nd.data_root}",
            f"--exec-root={nd.exec_root}",
            f"--pidfile={nd.dir / 'docker.pid'}",
            f"--cgroup-parent=/{nd.name}",
            "--shutdown-timeout=3",
            "--log-level=warn",
            "-H",
            nd.docker_host,
        ]
        # The node's own /etc/docker/daemon.json (if any, read at each start) plus a per-node trust
        # key (/etc/docker/key.json of the node), so `docker info` IDs differ between nodes.
        cfg: dict[str, Any] = {}
        daemon_json = nd.etc_docker / "daemon.json"
        if daemon_json.exists():
            try:
                loaded = json.loads(daemon_json.read_text() or "{}")
            except json.JSONDecodeError as e:
                raise TestbedError(f"{nd.name}: /etc/docker/daemon.json is not JSON: {e}") from e
            if not isinstance(loaded, dict):
                raise TestbedError(f"{nd.name}: /etc/docker/daemon.json is not a JSON object")
            cfg.update(loaded)
        cfg.setdefault("deprecated-key-path", str(nd.etc_docker / "key.json"))
        merged = nd.dir / "dockerd.json"
        merged.write_text(json.dumps(cfg, indent=1))
        argv.append(f"--config-file={merged}")
        return _spawn(argv, nd.log_dir / "dockerd.log", "dockerd")

    def _spawn_sshd(self, nd: Node) -> dict[str, Any]:
        argv = [
            "ip",
            "netns",
            "exec",
            nd.name,
            "unshare",
            "--mount",
            "--uts",
            "--propagation",
            "slave",
            "--",
            "sh",
            "-c",
            _SSHD_LAUNCH,
            "ctb-sshd-launch",
            str(nd.dir),
            nd.name,
            SSHD,
            "-D",
            "-f",
            str(nd.sshd_config),
            "-E",
            str(nd.log_dir / "sshd.log"),
        ]
        return _spawn(argv, nd.log_dir / "sshd.out", "sshd")

    def _ready(self, nd: Node, which: str) -> bool:
        if which == "containerd":
            return _unix_connects(nd.containerd_sock)
        if which == "dockerd":
            return _docker_ping(nd.docker_sock)
        if which == "sshd":
            return _ssh_banner(nd.mgmt_addr, 22)
        raise TestbedError(f"unknown daemon {which!r}")

    def _wait_daemons(
        self,
        nodes: Sequence[Node],
        whats: Sequence[str],
        timeout: float,
        *,
        start_dockerd: bool = False,
    ) -> None:
        """Poll (bounded) until every node's `whats` answer; when `start_dockerd`, start each
        node's dockerd as soon as its containerd answers."""
        pending = {(nd.index, w) for nd in nodes for w in whats}
        by_index = {nd.index: nd for nd in nodes}
        deadline = time.monotonic() + timeout
        while pending:
            for k, w in sorted(pending):
                nd = by_index[k]
                if self._ready(nd, w):
                    pending.discard((k, w))
                    if start_dockerd and w == "containerd":
                        with self._state() as st:
                            self._record(st, nd, "dockerd", self._spawn_dockerd(nd))
                    continue
                rec = self._node_state(self.state(), nd)["pids"].get(w)
                if rec and not pid_alive(rec["pid"], rec.get("start")):
                    raise TestbedError(
                        f"{nd.name}: {w} (pid {rec['pid']}) exited while starting; "
                        f"{rec['log']}:\n{_tail(rec['log'])}"
                    )
            if not pending:
                break
            if time.monotonic() > deadline:
                what = ", ".join(f"{by_index[k].name}:{w}" for k, w in sorted(pending))
                raise TestbedError(f"not ready after {timeout:.0f} s: {what}")
            time.sleep(0.05)

    # ---- tear-down -------------------------------------------------------------------------

    def down(self, *, keep_logs: Path | str | None = None) -> float:
        """Tear down everything of this testbed (recorded PIDs, then by name). Idempotent.

        `keep_logs`: a folder to copy every node's daemon logs (and state.json) into first."""
        t0 = time.monotonic()
        with self._lock:
            state = self._read_state() or {}
            n = int(state.get("n") or 0)
            names = self._leftover_netns()
            n = max([n] + [int(x.rsplit("node", 1)[1]) + 1 for x in names])
            nodes = [self._make_node(k) for k in range(n)]
            per_node = state.get("nodes", {})

            # 1. daemons by recorded PID: listeners, dockerd, containerd, sshd (parallel per kind)
            def recs(kind: str) -> list[dict[str, Any]]:
                out = []
                for v in per_node.values():
                    if kind == "listeners":
                        out += list(v.get("listeners", []))
                    elif v.get("pids", {}).get(kind):
                        out.append(v["pids"][kind])
                return out

            terminate(recs("listeners"), timeout=3)
            # containers first (SIGKILL: they are throwaway), so dockerd has nothing to stop
            for nd in nodes:
                for pid in self._cgroup_pids(nd):
                    _signal(pid, signal.SIGKILL)
            terminate(recs("dockerd"), timeout=15)
            terminate(recs("containerd"), timeout=10)
            terminate(recs("sshd"), timeout=5)
            for r in state.get("history", []):  # restarted/stopped daemons too
                if pid_alive(r.get("pid"), r.get("start")):
                    terminate([r], timeout=5)

            # 2. whatever still lives in the testbed's namespaces or cgroups (sessions, shims,
            #    containers): processes of ours by construction.
            self._sweep_processes(nodes)

            # 3. mounts under the root (docker overlays, shim rootfs, netns files)
            self._unmount_under(self.root)

            # 4. namespaces, links, netns hosts files, cgroups
            self._delete_network(nodes)
            for nd in nodes:
                d = Path("/etc/netns") / nd.name
                (d / "hosts").unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    d.rmdir()
            self._remove_cgroups(nodes)

            # 5. host settings and paths we created
            for f, old in state.get("sysctl_restore", {}).items():
                with contextlib.suppress(OSError):
                    Path(f).write_text(old + "\n")
            for p in reversed(state.get("created_host_paths", [])):
                self._remove_created_path(Path(p))

            # 6. our files (logs copied out first when asked)
            if keep_logs is not None and self.root.exists():
                self._copy_logs(Path(keep_logs))
            self._remove_root()
            self._n = 0
        return time.monotonic() - t0

    def _copy_logs(self, dest: Path) -> None:
        dest.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            shutil.copy2(self.state_file, dest / "state.json")
        for logs in sorted(self.root.glob("nodes/*/logs")):
            shutil.copytree(logs, dest / logs.parent.name, dirs_exist_ok=True)

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

    def _cgroup_dirs(self, nd: Node) -> list[Path]:
        base = Path("/sys/fs/cgroup")
        out = []
        if (base / nd.name).is_dir():
            out.append(base / nd.name)
        with contextlib.suppress(OSError):
            for ctrl in base.iterdir():
                if ctrl.is_dir() and not ctrl.is_symlink() and (ctrl / nd.name).is_dir():
                    out.append(ctrl / nd.name)
        return out

    def _cgroup_pids(self, nd: Node) -> list[int]:
        pids: set[int] = set()
        for d in self._cgroup_dirs(nd):
            for dirpath, _, files in os.walk(d):
                if "cgroup.procs" in files:
                    with contextlib.suppress(OSError):
                        text = (Path(dirpath) / "cgroup.procs").read_text()
                        pids.update(int(x) for x in text.split() if x.isdigit())
        pids.discard(os.getpid())
        return sorted(pids)

    def _sweep_processes(self, nodes: Sequence[Node]) -> None:
        for attempt in range(3):
            found: list[dict[str, Any]] = []
            for nd in nodes:
                for pid in set(self._netns_pids(nd.name)) | set(self._cgroup_pids(nd)):
                    st = _proc_stat(pid)
                    if st and st[0] not in ("Z", "X"):
                        found.append({"pid": pid, "start": st[1]})
            if not found:
                return
            terminate(found, timeout=3 if attempt == 0 else 1)

    @staticmethod
    def _mounts_under(root: Path) -> list[str]:
        out = []
        prefix = str(root).rstrip("/") + "/"
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                mp = line.split()[4]
                mp = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), mp)
                if mp == str(root) or mp.startswith(prefix):
                    out.append(mp)
        return out

    def _unmount_under(self, root: Path) -> None:
        for _ in range(5):
            mps = self._mounts_under(root)
            if not mps:
                return
            for mp in sorted(set(mps), key=lambda p: -p.count("/")):
                if _run(["umount", mp], check=False).returncode != 0:
                    _run(["umount", "-l", mp], check=False)
        left = self._mounts_under(root)
        if left:
            raise TestbedError(f"could not unmount: {left}")

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

    def _remove_cgroups(self, nodes: Sequence[Node]) -> None:
        for nd in nodes:
            for d in self._cgroup_dirs(nd):
                for dirpath, _, _ in sorted(os.walk(d), key=lambda t: -t[0].count("/")):
                    with contextlib.suppress(OSError):
                        os.rmdir(dirpath)

    @staticmethod
    def _remove_created_path(p: Path) -> None:
        if p == Path("/run/netns"):
            with contextlib.suppress(OSError):
                if any(p.iterdir()):
                    return
            for _ in range(4):  # ip netns makes /run/netns a (shared) bind mount of itself
                if _run(["mountpoint", "-q", str(p)], check=False).returncode != 0:
                    break
                _run(["umount", str(p)], check=False)
        with contextlib.suppress(OSError):
            p.rmdir()

    def _remove_root(self) -> None:
        if not self.root.exists():
            return
        if self._mounts_under(self.root):
            raise TestbedError(f"mounts remain under {self.root}; not removing it")
        for name in ("nodes", "client", "image"):
            p = self.root / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
        for name in ("inventory.yaml", "known_hosts", "state.json", "state.tmp"):
            (self.root / name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.root.rmdir()

    # ---- status ----------------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """Per node: namespace present, daemon PIDs alive, addresses (as the kernel has them)."""
        state = self.state()
        present = set(self._leftover_netns())
        out = []
        for nd in self.nodes:
            ns = self._node_state(state, nd) if state else {"pids": {}}
            row: dict[str, Any] = {"node": nd.name, "netns": nd.name in present}
            for which in ("sshd", "containerd", "dockerd"):
                rec = ns["pids"].get(which)
                row[which] = {
                    "pid": rec["pid"] if rec else None,
                    "alive": _rec_alive(rec),
                    "stopped": bool(rec and rec.get("stopped")),
                }
            row["addrs"] = {}
            if row["netns"]:
                proc = _run(["ip", "-n", nd.name, "-j", "addr"], check=False)
                with contextlib.suppress(json.JSONDecodeError):
                    for link in json.loads(proc.stdout or "[]"):
                        if link["ifname"] == "lo":
                            continue
                        addrs = [
                            a["local"] for a in link.get("addr_info", []) if a["family"] == "inet"
                        ]
                        row["addrs"][link["ifname"]] = {
                            "addrs": addrs,
                            "mtu": link.get("mtu"),
                            "state": link.get("operstate"),
                        }
            out.append(row)
        return out

    # ---- running things --------------------------------------------------------------------

    def ssh_argv(
        self, node: int | str | Node, *, connect_timeout: float = 10, user: str = "root"
    ) -> list[str]:
        """`ssh ... ADDR` with the testbed key and known_hosts (strict); append `--`, command."""
        nd = self.node(node)
        return [
            "ssh",
            "-F",
            "/dev/null",
            "-i",
            str(self.client_key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={int(connect_timeout)}",
            "-o",
            "LogLevel=ERROR",
            "-l",
            user,
            nd.mgmt_addr,
        ]

    def ssh(
        self,
        node: int | str | Node,
        command: str | Sequence[str],
        *,
        timeout: float = 60,
        check: bool = True,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `command` on a node over real SSH (a list is shell-quoted; a str is sent as is)."""
        cmd = command if isinstance(command, str) else shlex.join(command)
        argv = [*self.ssh_argv(node), "--", cmd]
        proc = _run(argv, check=False, timeout=timeout, input=input)
        if check and proc.returncode != 0:
            raise TestbedError(
                f"ssh {self.node(node).name} {cmd!r}: rc {proc.returncode}\n{proc.stderr.strip()}"
            )
        return proc

    def docker(
        self,
        node: int | str | Node,
        *args: str,
        timeout: float = 120,
        check: bool = True,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """The real docker client (/usr/bin/docker) against a node's dockerd, from the controller."""
        nd = self.node(node)
        env = {**DAEMON_ENV, "DOCKER_CONFIG": str(self.docker_config_dir)}
        return _run(
            [REAL_DOCKER, "-H", nd.docker_host, *args],
            check=check,
            timeout=timeout,
            input=input,
            env=env,
        )

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

    # ---- faults: nftables in the node ------------------------------------------------------

    def _nft(self, nd: Node, script: str) -> None:
        _run(["nsenter", f"--net={nd.netns_path}", "--", "nft", "-f", "-"], input=script)

    def _nft_table(self) -> str:
        return (
            f"table inet {NFT_TABLE} {{\n"
            "  chain input { type filter hook input priority -10; policy accept; }\n"
            "  chain output { type filter hook output priority -10; policy accept; }\n"
            "}\n"
        )

    def drop_port(self, node: int | str | Node, port: int, *, proto: str = "tcp") -> None:
        """Silently drop the node's traffic to `port` (incoming and outgoing): connects time out."""
        nd = self.node(node)
        if proto not in ("tcp", "udp"):
            raise TestbedError(f"proto: tcp or udp, not {proto!r}")
        p = int(port)
        self._nft(
            nd,
            self._nft_table()
            + f"add rule inet {NFT_TABLE} input {proto} dport {p} drop\n"
            + f"add rule inet {NFT_TABLE} output {proto} dport {p} drop\n",
        )

    def drop_packets(self, node: int | str | Node, net: str = "fabric", percent: int = 5) -> None:
        """Random packet loss (`percent` in and out) on one link, with nftables `numgen random`
        (works without sch_netem)."""
        nd = self.node(node)
        _, iface = nd.iface_pair(net)
        pct = int(percent)
        if not 0 < pct <= 100:
            raise TestbedError("percent: 1..100")
        chance = "" if pct == 100 else f"numgen random mod 100 < {pct} "
        self._nft(
            nd,
            self._nft_table()
            + f'add rule inet {NFT_TABLE} input iifname "{iface}" {chance}drop\n'
            + f'add rule inet {NFT_TABLE} output oifname "{iface}" {chance}drop\n',
        )

    def clear_nft(self, node: int | str | Node) -> None:
        """Remove the node's `ctb_fault` table (port drops and packet loss)."""
        nd = self.node(node)
        _run(
            [
                "nsenter",
                f"--net={nd.netns_path}",
                "--",
                "nft",
                "delete",
                "table",
                "inet",
                NFT_TABLE,
            ],
            check=False,
        )

    clear_port_drops = clear_nft

    # ---- faults: daemons -------------------------------------------------------------------

    def stop_daemon(self, node: int | str | Node, which: str, *, timeout: float = 15) -> int | None:
        """Stop a node's sshd, dockerd or containerd by its recorded PID (SIGTERM, then SIGKILL).
        Returns the PID that was stopped (None if it was not running)."""
        nd = self.node(node)
        if which not in ("sshd", "dockerd", "containerd"):
            raise TestbedError(f"daemon: sshd, dockerd or containerd, not {which!r}")
        with self._state() as st:
            rec = self._node_state(st, nd)["pids"].get(which)
            if not rec:
                return None
            pid = rec["pid"]
            was_alive = _rec_alive(rec)
            terminate([rec], timeout=timeout)
            rec["stopped"] = True
        return pid if was_alive else None

    def start_daemon(self, node: int | str | Node, which: str, *, timeout: float = 60) -> int:
        """(Re)start a node's daemon; the new PID is recorded and returned. Starting dockerd
        starts containerd first if that is down. Waits until it answers."""
        nd = self.node(node)
        spawners = {
            "sshd": self._spawn_sshd,
            "dockerd": self._spawn_dockerd,
            "containerd": self._spawn_containerd,
        }
        if which not in spawners:
            raise TestbedError(f"daemon: sshd, dockerd or containerd, not {which!r}")
        if which == "dockerd" and not _rec_alive(
            self._node_state(self.state(), nd)["pids"].get("containerd")
        ):
            self.start_daemon(nd, "containerd", timeout=timeout)
        with self._state() as st:
            rec = self._node_state(st, nd)["pids"].get(which)
            if _rec_alive(rec):
                return int(rec["pid"])  # type: ignore[index]
            new = spawners[which](nd)
            self._record(st, nd, which, new)
        self._wait_daemons([nd], [which], timeout)
        return int(new["pid"])

    def restart_daemon(self, node: int | str | Node, which: str) -> int:
        self.stop_daemon(node, which)
        return self.start_daemon(node, which)

    # ---- faults: docker wrapper ------------------------------------------------------------

    def install_docker_wrapper(self, node: int | str | Node, failures: int = 1) -> Path:
        """Put a `docker` first on the node's SSH PATH that makes the first `failures`
        `docker run`/`docker create` after each `docker load` exit 125 with containerd's
        lazy-unpack error; other calls go to the real /usr/bin/docker."""
        nd = self.node(node)
        state_dir = nd.faults_dir / "lazy-unpack"
        if state_dir.exists():
            shutil.rmtree(state_dir)
        state_dir.mkdir(parents=True)
        (state_dir / "remaining").write_text("0\n")
        (state_dir / "failed").write_text("0\n")
        script = _DOCKER_WRAPPER.format(
            real=shlex.quote(REAL_DOCKER),
            state=shlex.quote(str(state_dir)),
            failures=int(failures),
            message=shlex.quote(LAZY_UNPACK_ERROR),
        )
        wrapper = nd.bin_dir / "docker"
        tmp = wrapper.with_suffix(".tmp")
        tmp.write_text(script)
        os.chmod(tmp, 0o755)
        os.replace(tmp, wrapper)
        return wrapper

    def docker_wrapper_stats(self, node: int | str | Node) -> dict[str, Any]:
        """{'installed', 'remaining', 'failed', 'calls'} of a node's lazy-unpack wrapper."""
        nd = self.node(node)
        d = nd.faults_dir / "lazy-unpack"

        def num(name: str) -> int:
            with contextlib.suppress(OSError, ValueError):
                return int((d / name).read_text().strip() or 0)
            return 0

        calls = (d / "calls").read_text().split() if (d / "calls").exists() else []
        return {
            "installed": (nd.bin_dir / "docker").exists(),
            "remaining": num("remaining"),
            "failed": num("failed"),
            "calls": calls,
        }

    def remove_docker_wrapper(self, node: int | str | Node) -> None:
        nd = self.node(node)
        (nd.bin_dir / "docker").unlink(missing_ok=True)
        shutil.rmtree(nd.faults_dir / "lazy-unpack", ignore_errors=True)

    # ---- faults: a port that accepts but never speaks --------------------------------------

    def start_silent_listener(
        self, node: int | str | Node, port: int, *, timeout: float = 15
    ) -> int:
        """A TCP listener on `port` in the node's namespace that accepts and never writes (an
        SSH server that hangs before its banner). Returns its PID (recorded; `heal`/`down` stop
        it)."""
        nd = self.node(node)
        argv = [
            "nsenter",
            f"--net={nd.netns_path}",
            "--",
            sys.executable,
            "-c",
            _SILENT_LISTENER,
            str(int(port)),
        ]
        rec = _spawn(argv, nd.log_dir / f"listener-{int(port)}.log", "listener")
        rec["port"] = int(port)
        with self._state() as st:
            self._node_state(st, nd)["listeners"].append(rec)
            st.setdefault("history", []).append(
                {"node": nd.index, "what": "listener", "pid": rec["pid"], "start": rec["start"]}
            )
        deadline = time.monotonic() + timeout
        while not _tcp_connects(nd.mgmt_addr, int(port)):
            if not pid_alive(rec["pid"], rec["start"]):
                raise TestbedError(f"listener on {nd.name}:{port} died:\n{_tail(rec['log'])}")
            if time.monotonic() > deadline:
                raise TestbedError(f"listener on {nd.name}:{port} not accepting after {timeout} s")
            time.sleep(0.05)
        return int(rec["pid"])

    def stop_listeners(self, node: int | str | Node | None = None) -> None:
        nodes = [self.node(node)] if node is not None else self.nodes
        with self._state() as st:
            for nd in nodes:
                ns = self._node_state(st, nd)
                terminate(ns.get("listeners", []), timeout=3)
                ns["listeners"] = []

    # ---- docker run flags: slow disk, memory ------------------------------------------------

    def block_device(self, node: int | str | Node) -> str | None:
        """The whole-disk block device (/dev/vda) holding the node's docker data root, or None
        when it sits on tmpfs/overlay or the device node is absent."""
        nd = self.node(node)
        st = os.stat(nd.data_root)
        sysdir = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
        if not sysdir.exists():
            return None
        real = sysdir.resolve()
        if (real / "partition").exists():
            real = real.parent
        dev = Path("/dev") / real.name
        try:
            if stat.S_ISBLK(os.stat(dev).st_mode):
                return str(dev)
        except OSError:
            return None
        return None

    def docker_run_limit_flags(
        self,
        node: int | str | Node,
        *,
        read_bps: str | None = None,
        memory: str | None = None,
    ) -> list[str]:
        """`docker run` flags for slow disk reads (`--device-read-bps DEV:RATE` on the device of
        the node's data root) and a memory limit (`--memory`, swap equal so no swap)."""
        flags: list[str] = []
        if read_bps:
            dev = self.block_device(node)
            if dev is None:
                raise TestbedError(
                    f"{self.node(node).name}: the docker data root is not on a block device; "
                    "--device-read-bps cannot apply here"
                )
            flags += ["--device-read-bps", f"{dev}:{read_bps}"]
        if memory:
            flags += ["--memory", memory, "--memory-swap", memory]
        return flags

    # ---- test image ------------------------------------------------------------------------

    def image_archive(self, tag: str = TEST_IMAGE) -> Path:
        """The `docker save` archive of a test image (exists once it was built on one node)."""
        return self.image_dir / (re.sub(r"[^A-Za-z0-9_.-]", "_", tag) + ".tar")

    def build_test_image(self, node: int | str | Node, tag: str = TEST_IMAGE) -> str:
        """Make `tag` (a busybox-static rootfs, ~1 MB) present in a node's dockerd, offline.

        Built once per testbed (docker import, then docker save to <root>/image/); every later
        node gets the same archive through `docker load`, so the image ID is the same on all."""
        nd = self.node(node)
        archive = self.image_archive(tag)
        if archive.exists():
            self.docker(nd, "load", "-q", "-i", str(archive), timeout=180)
            return tag
        rootfs = self.image_dir / "rootfs"
        if rootfs.exists():
            shutil.rmtree(rootfs)
        for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "tmp", "root", "proc", "sys", "dev"):
            (rootfs / d).mkdir(parents=True, exist_ok=True)
        os.chmod(rootfs / "tmp", 0o1777)
        busybox = _which("busybox") or "/bin/busybox"
        shutil.copy2(busybox, rootfs / "bin" / "busybox")
        applets = _run([busybox, "--list-full"]).stdout.split()
        for rel in applets:
            dst = rootfs / rel
            if rel == "bin/busybox" or dst.exists() or dst.is_symlink():
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to("/bin/busybox")
        (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (rootfs / "etc" / "group").write_text("root:x:0:\n")
        env = {**DAEMON_ENV, "DOCKER_CONFIG": str(self.docker_config_dir)}
        tar = subprocess.Popen(
            ["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            imp = subprocess.run(
                [REAL_DOCKER, "-H", nd.docker_host, "import", "-c", 'CMD ["/bin/sh"]', "-", tag],
                stdin=tar.stdout,
                capture_output=True,
                text=True,
                timeout=180,
                env=env,
                check=False,
            )
        finally:
            if tar.stdout:
                tar.stdout.close()
            tar.wait(timeout=60)
        if imp.returncode != 0 or tar.returncode != 0:
            raise TestbedError(f"docker import failed: {imp.stderr.strip()}")
        self.image_dir.mkdir(parents=True, exist_ok=True)
        tmp = archive.with_suffix(".tmp")
        self.docker(nd, "save", "-o", str(tmp), tag, timeout=180)
        os.replace(tmp, archive)
        shutil.rmtree(rootfs)
        return tag

    def load_test_image(
        self, nodes: Iterable[int | str | Node] | None = None, tag: str = TEST_IMAGE
    ) -> str:
        """`build_test_image` on several nodes (all by default): built once, loaded elsewhere."""
        targets = [self.node(x) for x in nodes] if nodes is not None else self.nodes
        if not targets:
            return tag
        self.build_test_image(targets[0], tag)
        errors: list[BaseException] = []

        def load(nd: Node) -> None:
            try:
                self.build_test_image(nd, tag)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=load, args=(nd,)) for nd in targets[1:]]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        if errors:
            raise errors[0]
        return tag

    # ---- heal ------------------------------------------------------------------------------

    def heal(self, *, timeout: float = 60) -> list[str]:
        """Undo every fault: links up, shaping and netem gone, nft tables gone, listeners
        stopped, docker wrappers removed, stopped/dead daemons started again. Returns what it
        had to fix."""
        fixed: list[str] = []
        nodes = self.nodes
        if not nodes:
            return fixed
        root_links = []
        root_tc = []
        for nd in nodes:
            for net in NETS:
                host_veth, _ = nd.iface_pair(net)
                root_links.append(f"link set {host_veth} up")
                root_tc.append(f"qdisc del dev {host_veth} root")
        _run(["ip", "-force", "-batch", "-"], input="\n".join(root_links) + "\n", check=False)
        _run(["tc", "-force", "-batch", "-"], input="\n".join(root_tc) + "\n", check=False)
        for nd in nodes:
            lines = [f"link set {nd.mgmt_iface} up", f"link set {nd.fab_iface} up"]
            _run(
                ["ip", "-n", nd.name, "-force", "-batch", "-"],
                input="\n".join(lines) + "\n",
                check=False,
            )
            tc_lines = [f"qdisc del dev {nd.mgmt_iface} root", f"qdisc del dev {nd.fab_iface} root"]
            _run(
                ["tc", "-n", nd.name, "-force", "-batch", "-"],
                input="\n".join(tc_lines) + "\n",
                check=False,
            )
            if self._nft_has_table(nd):
                self.clear_nft(nd)
                fixed.append(f"{nd.name}: nft {NFT_TABLE}")
            if (nd.bin_dir / "docker").exists() or (nd.faults_dir / "lazy-unpack").exists():
                self.remove_docker_wrapper(nd)
                fixed.append(f"{nd.name}: docker wrapper")
        state = self.state()
        if any(v.get("listeners") for v in state.get("nodes", {}).values()):
            self.stop_listeners()
            fixed.append("listeners")
        for which in ("containerd", "dockerd", "sshd"):
            todo = [
                nd
                for nd in nodes
                if not _rec_alive(self._node_state(self.state(), nd)["pids"].get(which))
            ]
            if not todo:
                continue
            with self._state() as st:
                for nd in todo:
                    ns = self._node_state(st, nd)
                    if ns["pids"].get(which):
                        terminate([ns["pids"][which]], timeout=5)  # a hung one, if any
                    spawn = {
                        "sshd": self._spawn_sshd,
                        "dockerd": self._spawn_dockerd,
                        "containerd": self._spawn_containerd,
                    }[which]
                    self._record(st, nd, which, spawn(nd))
                    fixed.append(f"{nd.name}: {which} restarted")
            self._wait_daemons(todo, [which], timeout)
        return fixed

    def _nft_has_table(self, nd: Node) -> bool:
        proc = _run(
            ["nsenter", f"--net={nd.netns_path}", "--", "nft", "list", "tables"], check=False
        )
        return NFT_TABLE in proc.stdout


# --------------------------------------------------------------------------------------------------
# Small network helpers


def _link_names() -> list[str]:
    proc = _run(["ip", "-j", "link"], check=False)
    try:
        return [x["ifname"] for x in json.loads(proc.stdout or "[]")]
    except json.JSONDecodeError:
        return []


def _unix_connects(path: Path) -> bool:
    if not path.exists():
        return False
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _docker_ping(path: Path) -> bool:
    if not path.exists():
        return False
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(str(path))
        s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
        data = s.recv(64)
        return data.startswith(b"HTTP/1.") and b" 200 " in data
    except OSError:
        return False
    finally:
        s.close()


def _tcp_connects(addr: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=timeout):
            return True
    except OSError:
        return False


def _ssh_banner(addr: str, port: int, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def tcp_probe(addr: str, port: int, timeout: float = 3.0) -> str:
    """'open', 'refused' or 'timeout' (or 'unreachable') for one TCP connect."""
    try:
        with socket.create_connection((addr, port), timeout=timeout):
            return "open"
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "timeout"
    except OSError:
        return "unreachable"


# --------------------------------------------------------------------------------------------------
# CLI


def _print_status(tb: Testbed) -> int:
    rows = tb.status()
    if not rows:
        print(f"no testbed under {tb.root}")
        return 3
    ok = True
    for r in rows:
        parts = [f"{r['node']:<12}", f"netns={'yes' if r['netns'] else 'NO'}"]
        for which in ("sshd", "containerd", "dockerd"):
            d = r[which]
            word = "alive" if d["alive"] else ("stopped" if d["stopped"] else "DEAD")
            ok = ok and d["alive"]
            parts.append(f"{which}={d['pid']}({word})")
        for ifname, a in r["addrs"].items():
            parts.append(f"{ifname}={','.join(a['addrs']) or '-'}/mtu{a['mtu']}/{a['state']}")
        ok = ok and r["netns"]
        print("  ".join(parts))
    st = tb.state()
    print(f"inventory: {tb.inventory}   known_hosts: {tb.known_hosts}   key: {tb.client_key}")
    if st.get("timings"):
        print(f"timings: {st['timings']}")
    return 0 if ok else 1


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tests.netns.testbed",
        description="A netns testbed of real sshd + dockerd nodes (root only).",
    )
    p.add_argument(
        "--root", default=None, help=f"state folder (default ${ENV_ROOT} or {DEFAULT_ROOT})"
    )
    p.add_argument("--prefix", default=None, help=f"name prefix (default {DEFAULT_PREFIX})")
    p.add_argument(
        "--mgmt-subnet", default=None, help=f"first 3 octets (default {DEFAULT_MGMT_SUBNET})"
    )
    p.add_argument(
        "--fab-subnet", default=None, help=f"first 3 octets (default {DEFAULT_FAB_SUBNET})"
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="bring up N nodes (tears down a previous testbed first)")
    up.add_argument("n", nargs="?", type=int, default=DEFAULT_NODES)
    up.add_argument("--image", action="store_true", help=f"also load {TEST_IMAGE} on every node")
    dn = sub.add_parser("down", help="tear everything down")
    dn.add_argument("--keep-logs", default=None, help="copy node logs to this folder first")
    sub.add_parser("status", help="per node: namespace, daemons, addresses")
    sub.add_parser("heal", help="undo every fault")
    sub.add_parser("pids", help="every PID the testbed recorded")
    s = sub.add_parser("ssh", help="ssh to a node with the testbed key and known_hosts")
    s.add_argument("node")
    s.add_argument("command", nargs=argparse.REMAINDER)
    im = sub.add_parser("image", help=f"load the test image ({TEST_IMAGE}) on nodes")
    im.add_argument("nodes", nargs="*")
    fl = sub.add_parser("flags", help="docker run flags for slow reads / memory on a node")
    fl.add_argument("node")
    fl.add_argument("--read-bps", default=None, help="e.g. 10mb")
    fl.add_argument("--memory", default=None, help="e.g. 256m")

    f = sub.add_parser("fault", help="inject or undo one fault").add_subparsers(
        dest="fault", required=True
    )
    for name, hlp in (("link-down", "cut a link"), ("link-up", "restore a link")):
        x = f.add_parser(name, help=hlp)
        x.add_argument("node")
        x.add_argument("net", nargs="?", default="fabric", choices=["mgmt", "fabric"])
        if name == "link-down":
            x.add_argument("--side", default="node", choices=["node", "bridge"])
    x = f.add_parser("shape", help="rate-limit a link (tc tbf, both ends)")
    x.add_argument("node")
    x.add_argument("net", choices=["mgmt", "fabric"])
    x.add_argument("rate", help="e.g. 100mbit")
    x = f.add_parser("unshape", help="remove rate limits / netem")
    x.add_argument("node")
    x.add_argument("net", nargs="?", default=None, choices=["mgmt", "fabric"])
    x = f.add_parser("delay", help="netem delay (needs sch_netem)")
    x.add_argument("node")
    x.add_argument("net", choices=["mgmt", "fabric"])
    x.add_argument("delay", help="e.g. 50ms")
    x = f.add_parser("loss", help="random packet loss with nftables")
    x.add_argument("node")
    x.add_argument("net", choices=["mgmt", "fabric"])
    x.add_argument("percent", type=int)
    x = f.add_parser("port-drop", help="drop a port's traffic on a node (nftables)")
    x.add_argument("node")
    x.add_argument("port", type=int)
    x.add_argument("--proto", default="tcp", choices=["tcp", "udp"])
    x = f.add_parser("nft-clear", help="remove port drops and loss on a node")
    x.add_argument("node")
    for d in ("sshd", "dockerd", "containerd"):
        for verb in ("stop", "start"):
            x = f.add_parser(f"{d}-{verb}", help=f"{verb} the node's {d}")
            x.add_argument("node")
    x = f.add_parser("docker-wrapper", help="lazy-unpack docker wrapper on a node")
    x.add_argument("node")
    x.add_argument("--failures", type=int, default=1)
    x = f.add_parser("docker-wrapper-remove", help="remove the docker wrapper")
    x.add_argument("node")
    x = f.add_parser("listener", help="TCP listener that accepts and never speaks")
    x.add_argument("node")
    x.add_argument("port", type=int)
    x = f.add_parser("listener-stop", help="stop a node's silent listeners")
    x.add_argument("node")
    return p


def _fault(tb: Testbed, a: argparse.Namespace) -> int:
    f = a.fault
    if f == "link-down":
        tb.cut_link(a.node, a.net, side=a.side)
    elif f == "link-up":
        tb.restore_link(a.node, a.net)
    elif f == "shape":
        tb.shape_link(a.node, a.net, a.rate)
    elif f == "unshape":
        tb.clear_shaping(a.node, a.net)
    elif f == "delay":
        tb.delay_link(a.node, a.net, a.delay)
    elif f == "loss":
        tb.drop_packets(a.node, a.net, a.percent)
    elif f == "port-drop":
        tb.drop_port(a.node, a.port, proto=a.proto)
    elif f == "nft-clear":
        tb.clear_nft(a.node)
    elif f.endswith("-stop") and f != "listener-stop":
        pid = tb.stop_daemon(a.node, f.rsplit("-", 1)[0])
        print(f"stopped pid {pid}")
    elif f.endswith("-start"):
        pid = tb.start_daemon(a.node, f.rsplit("-", 1)[0])
        print(f"running as pid {pid}")
    elif f == "docker-wrapper":
        print(tb.install_docker_wrapper(a.node, a.failures))
    elif f == "docker-wrapper-remove":
        tb.remove_docker_wrapper(a.node)
    elif f == "listener":
        print(f"listening, pid {tb.start_silent_listener(a.node, a.port)}")
    elif f == "listener-stop":
        tb.stop_listeners(a.node)
    else:  # pragma: no cover - argparse restricts the choices
        raise TestbedError(f"unknown fault {f}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    a = _build_parser().parse_args(argv)
    problems = missing_prerequisites()
    if problems and a.cmd not in ("status", "pids"):
        print("testbed cannot run here:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    tb = Testbed(a.root, prefix=a.prefix, mgmt_subnet=a.mgmt_subnet, fab_subnet=a.fab_subnet)
    try:
        if a.cmd == "up":
            took = tb.up(a.n)
            print(f"testbed up: {a.n} nodes in {took:.1f} s under {tb.root}")
            if a.image:
                t0 = time.monotonic()
                tb.load_test_image()
                print(f"{TEST_IMAGE} loaded on every node in {time.monotonic() - t0:.1f} s")
            return _print_status(tb)
        if a.cmd == "down":
            took = tb.down(keep_logs=a.keep_logs)
            print(f"testbed down in {took:.1f} s")
            return 0
        if a.cmd == "status":
            return _print_status(tb)
        if a.cmd == "heal":
            fixed = tb.heal()
            print("healed: " + (", ".join(fixed) if fixed else "nothing to fix"))
            return 0
        if a.cmd == "pids":
            print(" ".join(str(p) for p in tb.recorded_pids()))
            return 0
        if a.cmd == "ssh":
            cmd = list(a.command)
            if cmd and cmd[0] == "--":
                cmd = cmd[1:]
            argv_ = tb.ssh_argv(a.node)
            if cmd:
                argv_ += ["--", shlex.join(cmd) if len(cmd) > 1 else cmd[0]]
            os.execvp(argv_[0], argv_)
        if a.cmd == "image":
            tb.load_test_image(a.nodes or None)
            print(f"{TEST_IMAGE} on {', '.join(a.nodes) or 'every node'}")
            return 0
        if a.cmd == "flags":
            print(
                shlex.join(tb.docker_run_limit_flags(a.node, read_bps=a.read_bps, memory=a.memory))
            )
            return 0
        if a.cmd == "fault":
            return _fault(tb, a)
    except TestbedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `... status | head`
        sys.exit(0)
