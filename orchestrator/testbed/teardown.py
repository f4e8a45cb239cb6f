"""Tear-down: recorded PIDs, then everything in the testbed's namespaces and cgroups, mounts,
links, host settings and files.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import host
from .errors import TestbedError
from .network import NetworkMixin
from .node import Node
from .processes import _proc_stat, _run, _signal, pid_alive, terminate


class TeardownMixin(NetworkMixin):
    """`down` and the sweeps it is made of."""

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
            for f, old in state.get("sysctl_restore", {}).items():  # an earlier release's state
                with contextlib.suppress(OSError):
                    Path(f).write_text(old + "\n")
            made = [Path(p) for p in state.get("created_host_paths", [])]  # an earlier release
            made += host.release(self.root)  # only the last testbed down gets any
            for p in reversed(made):
                self._remove_created_path(p)

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
