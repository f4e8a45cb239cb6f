"""Secret env reaches a rank's container through real sshd and dockerd, never on a command line
(issue 17, severe 4), on the netns testbed.

`launch.with_secret_env` runs `docker run --env HF_TOKEN` under `sh`, which reads the value from
the SSH channel's stdin. Here the real pieces carry it: asyncssh to the node's sshd, sh, the
docker client, the node's dockerd. The container prints what it got; `docker inspect` shows the
daemon has it; the argv that travelled to the node (and that `ps` would show) has no value.
"""

from __future__ import annotations

import asyncio
import json
import secrets

import pytest

from orchestrator.dockercli import DockerCli
from orchestrator.inventory import load_inventory
from orchestrator.plan.launch import with_secret_env
from orchestrator.testbed import TEST_IMAGE, Testbed
from orchestrator.transport.base import ConnectOptions
from orchestrator.transport.ssh import SshTransport

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180)]


def test_a_secret_reaches_the_container_through_stdin_and_never_the_argv(
    clean_testbed: Testbed, testbed_image: str
) -> None:
    inv = load_inventory(clean_testbed.inventory)
    node = inv.nodes[1]
    token = "hf_" + secrets.token_hex(16)
    name = f"cluster-secret-{secrets.token_hex(3)}"
    env = {"HF_TOKEN": token, "MY_PASSWD": "two words \\ and more", "PLAIN": "visible"}
    argv = [
        *DockerCli.of(node).base,
        "run",
        "--detach",
        "--name",
        name,
        "--env",
        "HF_TOKEN",
        "--env",
        "MY_PASSWD",
        "--env",
        "PLAIN=visible",
        TEST_IMAGE,
        "sh",
        "-c",
        'echo "token=$HF_TOKEN"; echo "passwd=$MY_PASSWD"; echo "plain=$PLAIN"',
    ]
    wrapped, stdin = with_secret_env(argv, env)
    assert stdin is not None
    assert token not in " ".join(wrapped) and "two words" not in " ".join(wrapped)

    async def go() -> tuple[str, str]:
        t = SshTransport(node, known_hosts=inv.known_hosts, options=ConnectOptions())
        try:
            started = await t.run(wrapped, stdin=stdin, timeout_s=60)
            assert started.ok, started.stderr
            await t.run([*DockerCli.of(node).base, "wait", name], timeout_s=60, check=True)
            logs = await t.run([*DockerCli.of(node).base, "logs", name], timeout_s=30, check=True)
            insp = await t.run(
                [*DockerCli.of(node).base, "inspect", name], timeout_s=30, check=True
            )
            return logs.stdout, insp.stdout
        finally:
            await t.run([*DockerCli.of(node).base, "rm", "-f", name], timeout_s=60)
            await t.close()

    out, inspect = asyncio.run(go())
    assert f"token={token}" in out
    assert "passwd=two words \\ and more" in out
    assert "plain=visible" in out
    assert f"HF_TOKEN={token}" in json.loads(inspect)[0]["Config"]["Env"]
