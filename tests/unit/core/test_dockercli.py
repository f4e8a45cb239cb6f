"""One Docker driver: every command for a node whose daemon is only reachable through its
inventory `docker_host` carries `--host` (issue 14: the boot started ranks through `--host`, then
followed, inspected and stopped them with plain `docker`, "No such container").

The fake node below answers like a real one whose daemon listens on a non-default socket: a
`docker` without `--host <its socket>` gets the client's "Cannot connect" and exit 1. The netns
tier proves the same against real sshd + dockerd (tests/netns/test_docker_host_netns.py).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from orchestrator.check import check_node
from orchestrator.dockercli import DockerCli
from orchestrator.facts import FactsRequest, gather_node_facts
from orchestrator.models.inventory import Node
from orchestrator.plan.launch import LABEL_RUN
from orchestrator.probes.exec_ready import wait_exec_ready
from orchestrator.run.stop import Leftover, _list_leftovers, _prune_with
from orchestrator.runstore import RunStore
from orchestrator.runtime.base import RankSpec
from orchestrator.runtime.docker import DockerRuntime
from tests.fake_transport import FakeReply, FakeTransport
from tests.inventories import inventory_of

SOCK = "unix:///run/cluster-testbed/nodes/node3/docker.sock"
ORCHESTRATOR = Path(__file__).resolve().parents[3] / "orchestrator"
NOT_RUNNING = (
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
    "Is the docker daemon running?\n"
)
STAMP = "2026-12-01T06:00:00.123456789Z"


def node(docker_host: str | None = SOCK) -> Node:
    return Node(
        name="spark-3",
        address="10.0.0.13",
        user="u",
        rank=3,
        fabric_iface="enp1s0f1np1",
        docker_host=docker_host,
    )


class HostOnlyDaemon:
    """A node whose daemon answers only `docker --host SOCK ...`; every call recorded."""

    def __init__(self) -> None:
        self.docker_calls: list[tuple[str, ...]] = []
        self.removed: list[str] = []

    def __call__(self, argv: tuple[str, ...], stdin: bytes | None) -> FakeReply:
        script = argv[:2] == ("sh", "-c") and "docker" in argv[4:5]
        if script:  # the containers probe: a script given the client as its arguments
            argv = (*argv[4:], "ps")
        if argv[0] != "docker":
            return FakeReply(stdout="{}\n")
        self.docker_calls.append(argv)
        if argv[1:3] != ("--host", SOCK):
            return FakeReply(exit_status=1, stderr=NOT_RUNNING)
        if script:
            return FakeReply()
        verb, rest = argv[3], argv[4:]
        if verb == "logs":
            return FakeReply(stdout=f"{STAMP} rank 3 says hello\n")
        if verb == "inspect" and rest[0] == "--format":
            state = {"Status": "exited", "ExitCode": 0, "Pid": 0, "FinishedAt": STAMP}
            return FakeReply(stdout=json.dumps(state) + "\n")
        if verb == "inspect":
            return FakeReply(stdout=json.dumps([{"Name": rest[0]}]) + "\n")
        if verb == "ps" and "--filter" in rest:
            row = {"Names": "cluster-R-r3", "Labels": f"{LABEL_RUN}=R,cluster.rank=3"}
            return FakeReply(stdout=json.dumps(row) + "\n")
        if verb == "rm":
            self.removed.append(rest[-1])
        return FakeReply()


def spec(n: Node) -> RankSpec:
    run = DockerCli.of(n)("run", "--detach", "--name", "cluster-R-r3", "img", "true")
    return RankSpec(rank=3, node=n, name="cluster-R-r3", argv=("true",), docker_run=run)


def test_the_client_names_the_nodes_daemon_only_when_the_inventory_does() -> None:
    assert DockerCli.of(node()).logs("c", follow=True, since="T") == (
        *("docker", "--host", SOCK),
        *("logs", "-f", "--timestamps", "--since", "T", "c"),
    )
    assert DockerCli.of(node(None)).rm("c", force=True) == ("docker", "rm", "-f", "c")
    assert DockerCli.of(node()).stop("c") == ("docker", "--host", SOCK, "stop", "-t", "10", "c")


async def test_every_runtime_command_reaches_a_daemon_known_only_by_docker_host() -> None:
    daemon = HostOnlyDaemon()
    n = node()
    runtime = DockerRuntime({n.name: FakeTransport(n, daemon)})
    s = spec(n)
    await runtime.start(s)
    followed = [lines async for _, lines in runtime.follow(s, since=STAMP)]
    assert followed == [[f"{STAMP} rank 3 says hello\n".encode()]]  # not "No such container"
    assert (await runtime.full_logs(s))["stdout"].endswith(b"hello\n")
    assert await runtime.tail(s, 5)
    assert (await runtime.state(s)).exit_code == 0
    assert (await runtime.inspect(s))["Name"] == "cluster-R-r3"
    await runtime.stop(s, remove=True)
    assert daemon.removed == ["cluster-R-r3"]
    verbs = {argv[3] for argv in daemon.docker_calls}
    assert verbs == {"run", "logs", "inspect", "stop", "rm"}
    assert all(argv[1:3] == ("--host", SOCK) for argv in daemon.docker_calls)


async def test_prune_lists_saves_and_removes_through_the_nodes_docker_host(tmp_path: Path) -> None:
    daemon = HostOnlyDaemon()
    n = node()
    inv = inventory_of(n, path=tmp_path / "inv.yaml")
    transports = {n.name: FakeTransport(n, daemon)}
    found = await _list_leftovers(inv, transports)
    assert found == [Leftover("spark-3", "cluster-R-r3", "R", "3", "?")]
    store = RunStore(tmp_path / "runs")
    done = await _prune_with(DockerRuntime(transports), inv, found, store)
    assert done == ["spark-3: removed cluster-R-r3 (run R)"]
    saved = tmp_path / "runs" / "R" / "rank-3"
    assert (saved / "full-stdout.log").read_text().endswith("hello\n")
    assert json.loads((saved / "exit.json").read_text())["status"] == "exited"
    assert daemon.removed == ["cluster-R-r3"]
    assert all(argv[1:3] == ("--host", SOCK) for argv in daemon.docker_calls)


async def test_prune_keeps_a_container_whose_log_cannot_be_read(tmp_path: Path) -> None:
    """Prune used to save whatever `docker logs` printed, an error included, and `rm -f` anyway;
    it now saves through the runtime, as `stop` does, and keeps what it could not save."""
    n = node(None)  # the inventory does not name the socket: the daemon cannot be reached
    daemon = HostOnlyDaemon()
    runtime = DockerRuntime({n.name: FakeTransport(n, daemon)})
    item = Leftover("spark-3", "cluster-R-r3", "R", "3", "running")
    inv = inventory_of(n, path=tmp_path / "i.yaml")
    done = await _prune_with(runtime, inv, [item], RunStore(tmp_path / "runs"))
    assert done[0].startswith("spark-3: kept cluster-R-r3: ")
    assert "Cannot connect" in done[0]
    assert daemon.removed == []


async def test_facts_check_and_exec_readiness_ask_the_nodes_daemon() -> None:
    daemon = HostOnlyDaemon()
    n = node()
    transport = FakeTransport(n, daemon)
    await gather_node_facts(n, transport, FactsRequest(image="img:1", clock=False))
    inv = inventory_of(n)
    await check_node(inv, n, transport)
    await wait_exec_ready(transport, "img:1", window_s=1)
    asked = {argv[3] for argv in daemon.docker_calls}
    assert {"info", "ps", "image", "run"} <= asked
    assert all(argv[1:3] == ("--host", SOCK) for argv in daemon.docker_calls)


def _verb(expr: ast.expr) -> bool:
    """A docker subcommand or global flag: what follows `docker` in a command line."""
    return isinstance(expr, ast.Constant) and isinstance(expr.value, str) and expr.value in VERBS


VERBS = {"--host", "-H", "run", "logs", "inspect", "ps", "stop", "rm", "kill", "wait", "info"}
VERBS |= {"version", "image", "save", "load", "stats", "exec", "pull"}


def test_no_module_but_dockercli_spells_a_docker_command() -> None:
    """A list or tuple `["docker", <verb>, ...]` (or `("docker",)`) is a command line that
    bypasses the node's `--host`; only orchestrator/dockercli.py may write one."""
    found = []
    for path in sorted(ORCHESTRATOR.rglob("*.py")):
        if path.name == "dockercli.py":
            continue
        for expr in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(expr, ast.List | ast.Tuple) and expr.elts:
                first = expr.elts[0]
                second = expr.elts[1] if len(expr.elts) > 1 else None
                if (
                    isinstance(first, ast.Constant)
                    and first.value == "docker"
                    and (second is None or isinstance(second, ast.Starred) or _verb(second))
                ):
                    found.append(f"{path.relative_to(ORCHESTRATOR)}:{expr.lineno}")
    assert found == []
