"""Typed manifests for tests that need a run directory without booting one."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.models.inventory import Node
from orchestrator.models.recipe import Recipe
from orchestrator.recipes import resolve_recipe
from orchestrator.run.boot import write_manifest
from orchestrator.runstore import Run
from tests.inventories import inventory_of

BUILTIN = "mistral-large4-8x-sglang"


def a_recipe(name: str | None = None, **update: object) -> Recipe:
    """A built-in recipe, renamed and with fields replaced (e.g. `env={...}`)."""
    recipe = resolve_recipe(BUILTIN)
    data = recipe.model_dump()
    if name is not None:
        data["name"] = name
    data.update(update)
    return Recipe.model_validate(data)


def write_a_manifest(
    run: Run,
    name: str | None = None,
    env: Mapping[str, str] | None = None,
    recipe: Recipe | None = None,
) -> Recipe:
    """A manifest as a boot writes it before preflight (no plans)."""
    update = {"env": dict(env)} if env is not None else {}
    recipe = recipe or a_recipe(name, **update)
    node = Node(name="n0", address="198.18.0.1", user="u", rank=0, fabric_iface="eth0")
    write_manifest(run, recipe, recipe, None, inventory_of(node))
    return recipe
