"""The base every Testbed part builds on: root, prefix and subnets, paths, nodes, state file.

`TestbedCore` sets every instance attribute (root, prefix, subnets, `_lock`, `_n`); the mixins
in the other modules subclass it, so each sees exactly the attributes it uses.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .constants import (
    ALLOWED_NET,
    DEFAULT_FAB_SUBNET,
    DEFAULT_MGMT_SUBNET,
    DEFAULT_PREFIX,
    FAB_IFACES,
    MGMT_IFACE,
)
from .errors import TestbedError
from .node import Node
from .prerequisites import default_root


@dataclass(frozen=True)
class Session:
    """What an SSH session on a node finds (orchestrator/testbed/session.py changes it)."""

    docker_env: bool = True
    """sshd exports DOCKER_HOST=<the node's socket>."""
    shell_delay_s: float = 0.0
    """root's ~/.bashrc sleeps this long: every command sshd runs starts that much later."""


DEFAULT_SESSION = Session()


class TestbedCore:
    """Construction, paths, node lookup and the state file (`<root>/state.json`) of a testbed."""

    __test__ = False  # not a pytest test class

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

    def session(self) -> Session:
        saved = self.state().get("session") or {}
        return Session(**saved) if saved else DEFAULT_SESSION

    def is_up(self) -> bool:
        return (self.state().get("status")) == "up"

    def _record(self, st: dict[str, Any], nd: Node, which: str, rec: dict[str, Any]) -> None:
        self._node_state(st, nd)["pids"][which] = rec
        st.setdefault("history", []).append(
            {"node": nd.index, "what": which, "pid": rec["pid"], "start": rec["start"]}
        )
