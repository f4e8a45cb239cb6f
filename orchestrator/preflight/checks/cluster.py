"""Checks of the cluster's shape: the node count, every node answering, every probe answering."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.preflight.model import Severity

if TYPE_CHECKING:
    from orchestrator.preflight.checks.context import Judge

PROBE_COMMANDS: dict[str, str] = {
    "host": "uname -n -r -m",
    "memory": "cat /proc/meminfo",
    "interfaces": "ip -j addr show",
    "rdma": "grep . /sys/class/infiniband/*/ports/*/state",
    "gpu": "nvidia-smi",
    "docker": "docker info",
    "containers": "docker ps",
    "listening": "cat /proc/net/tcp",
    "image": "docker image inspect IMAGE",
    "weights": "du -s WEIGHTS_DIR",
    "disks": "df -P DOCKER_ROOT",
    "clock": "date +%s.%N",
    "peers": "ssh -o BatchMode=yes PEER true",
}


# -- the checks, one function each -----------------------------------------------------------


def _check_node_count(j: Judge) -> None:
    n = len(j.inventory.nodes)
    if j.recipe.nodes != n:
        names = ", ".join(node.name for node in j.inventory.nodes)
        j.add(
            "node-count",
            Severity.error,
            None,
            f"the recipe {j.recipe.name} is for {j.recipe.nodes} nodes, the inventory has {n}",
            f"recipe nodes: {j.recipe.nodes}; inventory {j.inventory.path}: {n} hosts ({names})",
            f"use an inventory with {j.recipe.nodes} hosts (ranks 0..{j.recipe.nodes - 1}), or a "
            f"recipe for {n} nodes (its `nodes:` and `tp:`)",
        )


def _check_reachable(j: Judge) -> None:
    for node in j.inventory.nodes:
        f = j.facts.get(node.name)
        if f is None or f.reachable:
            continue
        why = "; ".join(f.errors.values()) or "no answer"
        j.add(
            "reachable",
            Severity.error,
            node,
            f"{node.name} did not answer over SSH",
            why,
            f"check {node.name}'s management link and sshd (`ssh {node.user}@{node.address} "
            "true`), then `cluster inventory check`",
        )


_CRITICAL_PROBES = {"interfaces", "listening"}
_DOCKER_PROBES = {"docker", "containers", "image", "disks"}


def _check_probes(j: Judge) -> None:
    for node, f in j.reachable():
        for probe, why in f.errors.items():
            if probe in _DOCKER_PROBES and not j.docker:
                continue
            critical = probe in _CRITICAL_PROBES or (probe in _DOCKER_PROBES and j.docker)
            j.add(
                f"probe-{probe}",
                Severity.error if critical else Severity.warning,
                node,
                f"could not ask {node.name} about {probe}"
                + ("" if critical else " (the checks that need it were skipped)"),
                why,
                f"run `{PROBE_COMMANDS.get(probe, probe)}` on {node.name} by hand and fix what it "
                "says",
            )
