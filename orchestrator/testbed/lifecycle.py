"""Bring-up (keys, network, files, daemons, in that order) and per-node status."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from .constants import DEFAULT_NODES, FAB_IFACES, MAX_NODES, MGMT_IFACE, NODE_VIEWS
from .daemons import DaemonsMixin
from .errors import TestbedError
from .node import Node
from .prerequisites import missing_prerequisites
from .processes import _rec_alive, _run
from .teardown import TeardownMixin


class LifecycleMixin(TeardownMixin, DaemonsMixin):
    """`up` (after a `down` of whatever was there), the files it writes, and `status`."""

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
                "# written by orchestrator.testbed: /etc/profile resets PATH for root\n"
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

    def _inventory_text(self, nodes: list[Node]) -> str:
        out = [
            f"# Testbed inventory written by orchestrator.testbed ({len(nodes)} nodes).",
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
