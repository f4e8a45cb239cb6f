"""Faults inside a node: nftables drops and loss, the lazy-unpack docker wrapper, silent TCP
listeners; and `heal`, which undoes every fault (links included).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from .constants import LAZY_UNPACK_ERROR, NETS, NFT_TABLE, REAL_DOCKER
from .errors import TestbedError
from .node import Node
from .probes import _tcp_connects
from .processes import _rec_alive, _run, _spawn, _tail, pid_alive, terminate
from .session import SessionMixin

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

# A docker that runs a test's shell before one subcommand, then execs the real one.
_DOCKER_HOOK = """#!/bin/sh
# Fault injected by orchestrator.testbed (Testbed.hook_docker) before `docker {subcommand}`.
REAL={real}
skip=0
for a in "$@"; do
  if [ "$skip" = 1 ]; then skip=0; continue; fi
  case "$a" in
    -H|--host|-c|--context|--config|-l|--log-level) skip=1 ;;
    {subcommand}) {before}; break ;;
    -*) ;;
    *) break ;;
  esac
done
exec "$REAL" "$@"
"""


def docker_hook_script(subcommand: str, before: str, real: str = REAL_DOCKER) -> str:
    """The wrapper `Testbed.hook_docker` installs (file content; `before` is the test's shell)."""
    if not subcommand.isalpha():
        raise TestbedError(f"docker subcommand {subcommand!r}: expected a word such as run")
    return _DOCKER_HOOK.format(subcommand=subcommand, before=before, real=shlex.quote(real))


# The lazy-unpack docker wrapper. Filled with str.format (paths shell-quoted); it is file content.
_DOCKER_WRAPPER = """#!/bin/sh
# Fault injected by orchestrator.testbed (lazy-unpack): after every `docker load`, the next
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


class FaultsMixin(SessionMixin):
    """nftables, docker wrapper and listener faults, and `heal`."""

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

    # ---- faults: docker wrapper ------------------------------------------------------------

    def _install_docker(self, nd: Node, script: str) -> Path:
        """`script` as the `docker` first on the node's SSH PATH (`heal` removes it)."""
        wrapper = nd.bin_dir / "docker"
        tmp = wrapper.with_suffix(".tmp")
        tmp.write_text(script)
        os.chmod(tmp, 0o755)  # noqa: S103 - a wrapper the node's SSH sessions must execute
        os.replace(tmp, wrapper)
        return wrapper

    def hook_docker(self, node: int | str | Node, subcommand: str, before: str) -> Path:
        """Put a `docker` first on the node's SSH PATH that runs the shell `before` when the
        command is `docker SUBCOMMAND` (global options such as `-H` skipped), then the real
        docker with the same arguments (`$REAL` inside `before`). A test's fault: a held-back
        `docker run`, a gate the test opens, an image pruned before a load."""
        return self._install_docker(self.node(node), docker_hook_script(subcommand, before))

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
        return self._install_docker(nd, script)

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
        fixed += self._heal_session()
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
