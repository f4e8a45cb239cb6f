"""The judge (pure): facts of every node, the rendezvous plan and the result of the real TCP test
in, every problem out, at once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

from orchestrator.kernel.model import KernelHealth
from orchestrator.models.inventory import Inventory
from orchestrator.models.recipe import Recipe
from orchestrator.plan.rendezvous import RendezvousPlan
from orchestrator.preflight.checks import CHECK_TABLE, CHECKS
from orchestrator.preflight.checks.context import Judge
from orchestrator.preflight.checks.engine import _check_engine_args
from orchestrator.preflight.checks.fabric import _check_tcp
from orchestrator.preflight.checks.kernel import KERNEL_CHECKS, check_kernel
from orchestrator.preflight.engine_args import EngineArgsResult
from orchestrator.preflight.model import (
    NotChecked,
    PreflightLimits,
    Problem,
    Reachability,
    Runtime,
)
from orchestrator.probes.node_facts import NodeFacts


class Judgement(NamedTuple):
    problems: list[Problem]
    ran: list[str]
    not_checked: list[NotChecked]


# Why a Docker-only check cannot run on the built-in simulated cluster (ranks are processes).
_PROCESS_RUNTIME = "the built-in simulated cluster runs each rank as a local process: no {what}"
_DOCKER_SUBJECT = {
    "docker": "Docker daemon to ask",
    "image": "image to look for",
    "gpu": "GPU or NVIDIA runtime to ask for",
    "containers": "containers to look at",
    "disk": "Docker data root to measure",
    "peer-ssh": "image chain, so no node-to-node SSH",
    "logind-removeipc": "node's systemd-logind to ask",
    "fabric-speed": "fabric port to measure",
    "kernel-recent": "node kernel log of its own to read",
}


def judge(
    recipe: Recipe,
    inventory: Inventory,
    facts: Iterable[NodeFacts],
    rendezvous: RendezvousPlan,
    *,
    reachability: Reachability | None = None,
    limits: PreflightLimits | None = None,
    runtime: Runtime = "docker",
    run_id: str | None = None,
    image_will_be_pushed: bool = False,
    image_ready: Mapping[str, bool] | None = None,
    need_peer_ssh: bool | None = None,
    engine_args: EngineArgsResult | None = None,
    kernel_health: Mapping[str, KernelHealth] | None = None,
    recipe_path: Path | None = None,
    not_asked: Mapping[str, str] | None = None,
) -> Judgement:
    """Every problem of booting `recipe` on `inventory`, the checks that ran, and those that
    did not, each with why. Pure.

    `runtime`: "docker" (Sparks, the testbed) or "process" (the built-in simulated cluster: no
    image, GPU, container or disk checks). `image_will_be_pushed`: `cluster boot` pushes a
    missing image after preflight, so a missing image is a warning, not an error. `image_ready`:
    the exec-readiness verdict per node, when it was probed. `need_peer_ssh`: whether the image
    chain will run (default: when some node lacks the image and there is more than one node).
    `run_id`: the run being prepared; its own containers are not "other containers".
    `not_asked`: why the runner has no result for `rendezvous-tcp` or `engine-args`, by name.
    """
    by_name = {f.node: f for f in facts}
    if need_peer_ssh is None:
        need_peer_ssh = (
            runtime == "docker"
            and len(inventory.nodes) > 1
            and any(f.image is not None and not f.image.present for f in by_name.values())
        )
    j = Judge(
        recipe=recipe,
        inventory=inventory,
        facts=by_name,
        plan=rendezvous,
        limits=limits or PreflightLimits(),
        runtime=runtime,
        run_id=run_id,
        image_will_be_pushed=image_will_be_pushed,
        image_ready=image_ready,
        need_peer_ssh=need_peer_ssh,
        problems=[],
        ran=[],
        recipe_path=recipe_path,
    )
    skipped: list[NotChecked] = []
    for check in CHECK_TABLE:
        because = _not_run(j, check.name, check.docker_only, reachability, engine_args)
        if because is None and check.name in KERNEL_CHECKS and kernel_health is None:
            because = "the nodes' kernel and fabric health was not asked"
        if because is not None:
            why = (not_asked or {}).get(check.name, because)
            skipped.append(NotChecked(check=check.name, because=why))
            continue
        j.ran.append(check.name)
        if check.run is not None:
            check.run(j)
        elif check.name == "rendezvous-tcp":
            _check_tcp(j, reachability)
        elif check.name == "engine-args":
            _check_engine_args(j, engine_args)
        elif check.name in KERNEL_CHECKS:
            check_kernel(j, check.name, kernel_health)
    order = {n.name: n.rank for n in inventory.nodes}
    checks = list(CHECKS)
    j.problems.sort(
        key=lambda p: (
            p.node is not None,
            order.get(p.node or "", -1),
            checks.index(_family(p.check)) if _family(p.check) in checks else 99,
        )
    )
    return Judgement(j.problems, j.ran, skipped)


def _not_run(
    j: Judge,
    name: str,
    docker_only: bool,
    reachability: Reachability | None,
    engine_args: EngineArgsResult | None,
) -> str | None:
    """Why check `name` cannot run with what the judge was handed; None when it can."""
    if docker_only and not j.docker:
        return _PROCESS_RUNTIME.format(what=_DOCKER_SUBJECT.get(name, "Docker"))
    head = j.inventory.head.name
    head_up = head in j.facts and j.facts[head].reachable
    if name == "rendezvous-tcp" and reachability is None:
        if not head_up:
            return f"the head {head} did not answer, so nothing could listen on its port"
        return (
            f"the head {head} has no address on {j.plan.head_iface} to listen on (see fabric-iface)"
        )
    if name == "engine-args" and engine_args is None:
        return f"no launch plan to check, or the head {head} did not answer"
    if name == "peer-ssh" and all(f.peers is None for _, f in j.reachable()):
        if j.need_peer_ssh:
            return "no node answered whether it can SSH to the next (see the probe problems)"
        return "every node holds the image, so the image chain will not run and no node was asked"
    return None


def _family(check: str) -> str:
    """`fabric-iface-down` -> `fabric-iface`: the CHECKS entry a problem id belongs to."""
    for name in sorted(CHECKS, key=len, reverse=True):
        if check == name or check.startswith(name + "-"):
            return name
    return check
