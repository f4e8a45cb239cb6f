"""The context every preflight check runs in: one `Judge` per preflight, handed to each
check of `CHECK_TABLE`. Below the checks and the judge that runs them (neither imports the
other for it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.models.inventory import Inventory, Node
from orchestrator.models.recipe import Recipe
from orchestrator.plan.rendezvous import RendezvousPlan
from orchestrator.preflight.model import PreflightLimits, Problem, Runtime, Severity
from orchestrator.probes.node_facts import NodeFacts


@dataclass
class Judge:
    """What every check reads (the recipe, the inventory, each node's facts, the plan, the
    limits) and where it writes (`problems`, `ran`)."""

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
