"""Nodes whose Docker only the inventory's `docker_host` reaches (issue 14), on the netns testbed.

In this module the testbed's sshd does NOT export DOCKER_HOST (`Testbed.set_session(docker_env=
False)`): a plain `docker` over SSH finds no daemon, as on a node whose Docker listens on a
non-default socket, and only `docker --host <docker_host>` (the inventory sets it per host)
reaches it. Every command `cluster` sends must therefore carry the node's `--host`: the check,
preflight, a boot to READY, status derived live from a second process, stop and prune.
Before the one Docker driver (orchestrator/dockercli.py), the boot started its ranks through
`--host` and then could not follow or stop them ("No such container").
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.testbed import TEST_IMAGE, Testbed
from tests.netns import test_boot_netns
from tests.netns.test_boot_netns import (
    RANKS,
    BootProc,
    cluster,
    container_name,
    containers_of,
    read_json,
    remove_run_containers,
    start_boot,
)

pytestmark = [pytest.mark.netns, pytest.mark.timeout(420)]

state_home = test_boot_netns.state_home
OLD_RUN = "20000101T000000Z-1ef70e"


@pytest.fixture(scope="module")
def hidden_docker(testbed: Testbed, testbed_image: str) -> Iterator[Testbed]:
    """The session testbed with DOCKER_HOST no longer exported by sshd; put back afterwards."""
    testbed.heal()
    remove_run_containers(testbed)
    testbed.set_session(docker_env=False)
    try:
        yield testbed
    finally:
        remove_run_containers(testbed)
        testbed.set_session(docker_env=True)


@pytest.fixture(scope="module")
def ready(
    hidden_docker: Testbed, state_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BootProc]:
    boot = start_boot(hidden_docker, state_home, tmp_path_factory.mktemp("hidden"), "--json")
    try:
        boot.extra["verdict"] = boot.wait()
        yield boot
    finally:
        if boot.proc.poll() is None:
            boot.kill()


def test_in_this_mode_a_plain_docker_over_ssh_finds_no_daemon(hidden_docker: Testbed) -> None:
    plain = hidden_docker.ssh(2, "docker ps", check=False)
    assert plain.returncode != 0, plain.stdout
    assert "Cannot connect to the Docker daemon" in plain.stderr + plain.stdout
    aimed = hidden_docker.ssh(2, ["docker", "--host", hidden_docker.node(2).docker_host, "ps"])
    assert aimed.returncode == 0


def test_inventory_check_reaches_every_daemon_through_docker_host(
    hidden_docker: Testbed, state_home: Path
) -> None:
    proc = cluster(state_home, "inventory", "check", "-i", str(hidden_docker.inventory), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["healthy"], report
    assert all(n["docker_server"] for n in report["nodes"]), report


def test_a_boot_reaches_ready_and_follows_every_rank_through_docker_host(
    ready: BootProc,
) -> None:
    verdict = ready.extra["verdict"]
    assert ready.code == 0, ready.output()
    assert verdict.get("outcome") == "READY", verdict
    assert verdict.get("repaired_bytes") == 0
    for k in range(RANKS):
        follow = ready.follow(k)
        assert follow["bytes_kept"]["stderr"] > 1000, (k, follow)
    text = (ready.run / "rank-0" / "stderr.log").read_bytes()
    assert b"The server is fired up and ready to roll!" in text
    assert b"No such container" not in ready.err.read_bytes()


def test_status_from_a_second_process_asks_every_node_through_docker_host(
    hidden_docker: Testbed, state_home: Path, ready: BootProc
) -> None:
    proc = cluster(
        state_home, "status", "-i", str(hidden_docker.inventory), "--run", ready.id, "--json"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    ranks = {r["rank"]: r for r in doc["ranks"]}
    assert sorted(ranks) == list(range(RANKS))
    assert {r["phase"] for r in ranks.values()} == {"serving"}, doc


def test_stop_saves_and_removes_every_rank_through_docker_host(
    hidden_docker: Testbed, state_home: Path, ready: BootProc
) -> None:
    proc = cluster(
        state_home, "stop", "-i", str(hidden_docker.inventory), "--run", ready.id, "--yes"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"saved logs of {RANKS} ranks" in proc.stdout
    for k in range(RANKS):
        assert containers_of(hidden_docker, k, ready.id) == [], k
        d = ready.run / f"rank-{k}"
        assert b"ready to roll" in (d / "full-stderr.log").read_bytes() or k != 0
        assert read_json(d / "inspect.json")["Name"] == "/" + container_name(ready.id, k)
        assert read_json(d / "exit.json")["status"] == "exited", k


def test_prune_saves_and_removes_leftovers_through_docker_host(
    hidden_docker: Testbed, state_home: Path
) -> None:
    tb = hidden_docker
    labels = ["--label", f"cluster.run={OLD_RUN}"]
    for k in range(RANKS):  # an exited leftover on every node, a running one on node 1
        name = container_name(OLD_RUN, k)
        tb.docker(k, "run", "--name", name, *labels, "--label", f"cluster.rank={k}", TEST_IMAGE,
                  "sh", "-c", f"echo leftover {k} says goodbye")  # fmt: skip
    running = f"cluster-{OLD_RUN}-extra-r1"
    tb.docker(1, "run", "-d", "--name", running, *labels, "--label", "cluster.rank=9", TEST_IMAGE,
              "sh", "-c", "trap 'exit 0' TERM; echo still here; while :; do sleep 1; done")  # fmt: skip
    proc = cluster(
        state_home, "prune", "-i", str(tb.inventory), "--older-than", "1d", "--yes", timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(f"removed cluster-{OLD_RUN}") == RANKS + 1, proc.stdout
    run_dir = state_home / "cluster" / "runs" / OLD_RUN
    for k in range(RANKS):
        assert containers_of(tb, k, OLD_RUN) == [], k
        saved = (run_dir / f"rank-{k}" / "full-stdout.log").read_text()
        assert f"leftover {k} says goodbye" in saved, k
    assert "still here" in (run_dir / "rank-9" / "full-stdout.log").read_text()
    assert read_json(run_dir / "rank-9" / "exit.json")["exit_code"] == 0  # stopped, not killed
