"""The judge (pure): facts of every node, the rendezvous plan and the result of the real TCP test
in, every problem out, at once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.models.facts import NodeFacts
from orchestrator.models.inventory import Inventory, Node
from orchestrator.models.recipe import Recipe
from orchestrator.preflight.checks import CHECK_TABLE, CHECKS
from orchestrator.preflight.checks.engine import _check_engine_args
from orchestrator.preflight.checks.fabric import _check_tcp
from orchestrator.preflight.engine_args import EngineArgsResult
from orchestrator.preflight.model import (
    PreflightLimits,
    Problem,
    Reachability,
    Runtime,
    Severity,
)
from orchestrator.rendezvous import RendezvousPlan


@dataclass
class _Judge:
    recipe: Recipe
    inventory: Inventory
    facts: dict[str, NodeFacts]
    plan: RendezvousPlan
    limits: PreflightLimits
    runtime: Runtime
    run_id: str | None
    image_will_be_pushed: bool
    image_ready: Mapping[str, bool] | None
    need_peer_ssh: bool
    problems: list[Problem]
    ran: list[str]
    recipe_path: Path | None = None

    def add(
        self,
        check: str,
        severity: Severity,
        node: Node | None,
        what: str,
        evidence: str,
        fix: str,
    ) -> None:
        self.problems.append(
            Problem(
                check=check,
                severity=severity,
                node=node.name if node else None,
                rank=node.rank if node else None,
                what=what,
                evidence=evidence,
                fix=fix,
            )
        )

    def reachable(self) -> list[tuple[Node, NodeFacts]]:
        return [
            (n, self.facts[n.name])
            for n in self.inventory.nodes
            if n.name in self.facts and self.facts[n.name].reachable
        ]

    @property
    def docker(self) -> bool:
        return self.runtime == "docker"


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
    recipe_path: Path | None = None,
) -> tuple[list[Problem], list[str]]:
    """Every problem of booting `recipe` on `inventory`, and the checks that ran. Pure.

    `runtime`: "docker" (Sparks, the testbed) or "process" (the built-in simulated cluster: no
    image, GPU, container or disk checks). `image_will_be_pushed`: `cluster boot` pushes a
    missing image after preflight, so a missing image is a warning, not an error. `image_ready`:
    the exec-readiness verdict per node, when it was probed. `need_peer_ssh`: whether the image
    chain will run (default: when some node lacks the image and there is more than one node).
    `run_id`: the run being prepared; its own containers are not "other containers".
    """
    by_name = {f.node: f for f in facts}
    if need_peer_ssh is None:
        need_peer_ssh = (
            runtime == "docker"
            and len(inventory.nodes) > 1
            and any(f.image is not None and not f.image.present for f in by_name.values())
        )
    j = _Judge(
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
    for check in CHECK_TABLE:
        if check.docker_only and not j.docker:
            continue
        j.ran.append(check.name)
        if check.run is not None:
            check.run(j)
        elif check.name == "rendezvous-tcp":
            _check_tcp(j, reachability)
        elif check.name == "engine-args":
            _check_engine_args(j, engine_args)
    order = {n.name: n.rank for n in inventory.nodes}
    checks = list(CHECKS)
    j.problems.sort(
        key=lambda p: (
            p.node is not None,
            order.get(p.node or "", -1),
            checks.index(_family(p.check)) if _family(p.check) in checks else 99,
        )
    )
    return j.problems, j.ran


def _family(check: str) -> str:
    """`fabric-iface-down` -> `fabric-iface`: the CHECKS entry a problem id belongs to."""
    for name in sorted(CHECKS, key=len, reverse=True):
        if check == name or check.startswith(name + "-"):
            return name
    return check
