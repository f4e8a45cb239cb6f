"""What an SSH session on a node finds: does sshd export DOCKER_HOST, how slow is the shell.

By default sshd sets `DOCKER_HOST=<node socket>` in every session (so a person typing `docker ps`
over SSH reaches the node's daemon). That also hides a controller that forgets the inventory's
`docker_host`: its plain `docker` still works. `set_session(docker_env=False)` takes the export
away, as on a real node whose Docker listens on a non-default socket and whose sshd does not
set it: only `docker --host <docker_host>` reaches the daemon (issue 14).

`shell_delay_s` makes the login shell slow: root's `~/.bashrc` sleeps that long. Debian's bash
reads `~/.bashrc` for the commands sshd runs (`bash -c CMD` with SSH_CLIENT set), like a real
`~/.bashrc` with conda or pyenv init, so every command a controller sends costs that much more.

Both are recorded in the state file (`session`), survive `heal()`'s sshd restarts, and `heal()`
puts the defaults back.
"""

from __future__ import annotations

import time
from dataclasses import asdict

from .core import DEFAULT_SESSION, Session
from .daemons import DaemonsMixin
from .node import Node
from .processes import terminate

BASHRC_MARK = "# orchestrator.testbed: slow shell"
STARTS = ".shell-starts"


class SessionMixin(DaemonsMixin):
    """Changing the session settings of every node (sshd restarted when needed); reading them
    is `TestbedCore.session()`."""

    def set_session(
        self,
        *,
        docker_env: bool | None = None,
        shell_delay_s: float | None = None,
        timeout: float = 60,
    ) -> Session:
        """Change what sessions find on every node; returns the settings now in force."""
        old = self.session()
        new = Session(
            docker_env=old.docker_env if docker_env is None else docker_env,
            shell_delay_s=old.shell_delay_s if shell_delay_s is None else shell_delay_s,
        )
        with self._state() as st:
            st["session"] = asdict(new)
        nodes = self.nodes
        if new.shell_delay_s != old.shell_delay_s:
            for nd in nodes:
                self._write_bashrc(nd, new.shell_delay_s)
        if new.docker_env != old.docker_env:
            self._restart_sshds(nodes, timeout)
        return new

    def _write_bashrc(self, nd: Node, delay_s: float) -> None:
        bashrc = nd.root_home / ".bashrc"
        if delay_s <= 0:
            if bashrc.exists() and bashrc.read_text().startswith(BASHRC_MARK):
                bashrc.unlink()
            return
        # Each start-up also appends a line to ~/.shell-starts: `shell_starts` counts them.
        bashrc.write_text(f"{BASHRC_MARK}\necho >>~/{STARTS}\nsleep {delay_s:g}\n")

    def shell_starts(self, node: int | str | Node) -> int:
        """Login shells started on `node` since the last `reset_shell_starts` (slow shell on)."""
        path = self.node(node).root_home / STARTS
        return len(path.read_text().splitlines()) if path.exists() else 0

    def reset_shell_starts(self) -> None:
        for nd in self.nodes:
            (nd.root_home / STARTS).unlink(missing_ok=True)

    def _restart_sshds(self, nodes: list[Node], timeout: float) -> None:
        """Every node's sshd again with its config rewritten; sessions already open keep
        running (they are sshd's children, not the listener)."""
        with self._state() as st:
            for nd in nodes:
                nd.sshd_config.write_text(self._sshd_config(nd))
                rec = self._node_state(st, nd)["pids"].get("sshd")
                if rec:
                    terminate([rec], timeout=10)
                self._record(st, nd, "sshd", self._spawn_sshd(nd))
        time.sleep(0.05)
        self._wait_daemons(nodes, ["sshd"], timeout)

    def _heal_session(self) -> list[str]:
        if self.session() == DEFAULT_SESSION:
            return []
        self.set_session(
            docker_env=DEFAULT_SESSION.docker_env, shell_delay_s=DEFAULT_SESSION.shell_delay_s
        )
        return ["session settings"]
