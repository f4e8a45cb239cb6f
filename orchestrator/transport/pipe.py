"""A long byte stream into one command on a node: the first hop of an image push.

`Transport.run(stdin=bytes)` holds the whole input in memory, which is right for a script and
wrong for a 30 GB image. A pipe is a child process of the controller whose stdin we write as
the bytes arrive and whose stdout/stderr we read by line:

* inventories with SSH: the **OpenSSH client** (`ssh`), with the inventory's user, port, key
  and known_hosts, strict host-key checking, batch mode (never a password prompt) and
  `ServerAliveInterval`, so a dead link ends the stream instead of hanging it. OpenSSH and not
  asyncssh because the nodes forward the same stream to each other with OpenSSH, and a
  subprocess keeps the bulk bytes off the event loop's thread (`ssh.py` stays the only
  module importing asyncssh);
* the built-in simulated cluster (`cluster_connection: local`): the command itself, with the
  node's `docker_host` as DOCKER_HOST, like `LocalTransport`.

The command is an argv list, quoted with `shlex.join` for the remote shell, as `ssh.py` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.deadlines import DEADLINES
from orchestrator.models.inventory import Connection, Inventory, Node

# AES-GCM first: hardware-accelerated (AES-NI, ARMv8 crypto) and several times cheaper per byte
# than OpenSSH's default chacha20-poly1305 for bulk streams; chacha20 stays as the fallback.
CIPHERS = "aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com"


@dataclass(frozen=True)
class PipeOptions:
    connect_timeout_s: float = DEADLINES.connect_s
    alive_interval_s: int = 5
    alive_count: int = 3


def ssh_client_argv(
    node: Node,
    remote: Sequence[str],
    *,
    known_hosts: Path | None,
    options: PipeOptions,
) -> list[str]:
    """`ssh ... -- HOST 'quoted argv'` for one node, as the inventory describes it."""
    kh = known_hosts or Path("~/.ssh/known_hosts").expanduser()
    argv = [
        "ssh",
        "-T",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={kh}",
        "-o",
        f"ConnectTimeout={max(1, round(options.connect_timeout_s))}",
        "-o",
        f"ServerAliveInterval={max(1, options.alive_interval_s)}",
        "-o",
        f"ServerAliveCountMax={max(1, options.alive_count)}",
        "-o",
        f"Ciphers={CIPHERS}",
        "-o",
        "LogLevel=ERROR",
        "-p",
        str(node.port),
        "-l",
        node.user,
    ]
    if node.private_key is not None:
        argv += ["-i", str(node.private_key), "-o", "IdentitiesOnly=yes"]
    return [*argv, "--", node.address, shlex.join(remote)]


class Pipe:
    """A running command fed by us: `write`, then `close_stdin`, then `wait`.

    `write` raises `BrokenPipeError` (or `ConnectionResetError`) once the command stopped
    reading: the caller drops this pipe and carries on with the others."""

    def __init__(self, node: Node, proc: asyncio.subprocess.Process) -> None:
        self.node = node
        self.proc = proc
        self.broken = False

    @property
    def stdout(self) -> asyncio.StreamReader:
        assert self.proc.stdout is not None
        return self.proc.stdout

    @property
    def stderr(self) -> asyncio.StreamReader:
        assert self.proc.stderr is not None
        return self.proc.stderr

    async def write(self, data: bytes) -> None:
        stdin = self.proc.stdin
        if self.broken or stdin is None:
            raise BrokenPipeError("the command stopped reading")
        try:
            stdin.write(data)
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            self.broken = True
            raise

    async def close_stdin(self) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing():
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.close()
            await stdin.wait_closed()

    async def wait(self) -> int:
        return await self.proc.wait()

    def kill(self) -> None:
        """Stop the local process group (the ssh client or the local command)."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGTERM)


async def open_pipe(
    inventory: Inventory,
    node: Node,
    remote: Sequence[str],
    *,
    options: PipeOptions | None = None,
    stdin: int = asyncio.subprocess.PIPE,
    stdout: int = asyncio.subprocess.PIPE,
) -> Pipe:
    """Start `remote` on `node`; see the module doc for how. By default we feed its stdin
    (`Pipe.write`) and read its stdout; `stdin`/`stdout` may instead be file descriptors the
    caller owns (a pipe the kernel fills by `os.splice`), or DEVNULL."""
    options = options or PipeOptions()
    env = dict(os.environ)
    if inventory.connection is Connection.local:
        argv = list(remote)
        if node.docker_host:
            env["DOCKER_HOST"] = node.docker_host
    else:
        argv = ssh_client_argv(node, remote, known_hosts=inventory.known_hosts, options=options)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=stdin,
        stdout=stdout,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        start_new_session=True,
        limit=1 << 20,
    )
    return Pipe(node, proc)
