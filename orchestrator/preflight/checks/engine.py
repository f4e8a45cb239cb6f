"""The engine's own verdict on the argv (`engine-args`): the probe ran on the head
(preflight/engine_args.py); this turns what the parser said into problems."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.paths import builtin_recipes_dir
from orchestrator.preflight.engine_args import EngineArgsResult, verdict_problems
from orchestrator.preflight.model import Severity

if TYPE_CHECKING:
    from orchestrator.preflight.judge import _Judge


def _check_engine_args(j: _Judge, result: EngineArgsResult | None) -> None:
    if result is None:
        return  # not asked: a real recipe on the process runtime has no image to ask
    path = j.recipe_path
    if path is None:
        builtin = builtin_recipes_dir() / f"{j.recipe.name}.yaml"
        path = builtin if builtin.is_file() else None
    head = next((n for n in j.inventory.nodes if n.name == result.node), None)
    for severity, what, evidence, fix in verdict_problems(result, j.recipe, path):
        j.add("engine-args", Severity(severity), head, what, evidence, fix)
