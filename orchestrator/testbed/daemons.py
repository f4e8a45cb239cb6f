"""The three daemons of a node together: wait until they answer, stop, start, restart."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .dockerd import DockerdMixin
from .errors import TestbedError
from .node import Node
from .probes import _docker_ping, _ssh_banner, _unix_connects
from .processes import _rec_alive, _tail, pid_alive, terminate
from .sshd import SshdMixin


class DaemonsMixin(SshdMixin, DockerdMixin):
    """Readiness of sshd / containerd / dockerd, and stopping or (re)starting one of them."""

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

    def signal_daemon(self, node: int | str | Node, which: str, sig: int) -> int | None:
        """Send `sig` to a node's running sshd, dockerd or containerd by its recorded PID:
        SIGSTOP then SIGCONT is a daemon that hangs and comes back (a docker daemon too busy to
        answer). Returns the PID (None: not running)."""
        nd = self.node(node)
        if which not in ("sshd", "dockerd", "containerd"):
            raise TestbedError(f"daemon: sshd, dockerd or containerd, not {which!r}")
        rec = self._node_state(self.state(), nd)["pids"].get(which)
        if not rec or not _rec_alive(rec):
            return None
        os.kill(rec["pid"], sig)
        return int(rec["pid"])

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
            if rec is not None and _rec_alive(rec):
                return int(rec["pid"])
            new = spawners[which](nd)
            self._record(st, nd, which, new)
        self._wait_daemons([nd], [which], timeout)
        return int(new["pid"])

    def restart_daemon(self, node: int | str | Node, which: str) -> int:
        self.stop_daemon(node, which)
        return self.start_daemon(node, which)

    def switch_engine(
        self,
        node: int | str | Node,
        root: Path | str | None,
        daemon_json: dict[str, Any] | None = None,
        *,
        timeout: float = 90,
    ) -> None:
        """Restart a node's containerd and dockerd on another engine (`set_engine`: None is the
        system's), with `daemon_json` as its /etc/docker/daemon.json (None: left as it is),
        e.g. `{"features": {"containerd-snapshotter": True}}` for the containerd image store.
        What its previous store held stays on disk, out of sight of the other store."""
        nd = self.node(node)
        self.stop_daemon(nd, "dockerd")
        self.stop_daemon(nd, "containerd")
        self.set_engine(nd, root)
        if daemon_json is not None:
            (nd.etc_docker / "daemon.json").write_text(json.dumps(daemon_json, indent=1))
        self.start_daemon(nd, "dockerd", timeout=timeout)
