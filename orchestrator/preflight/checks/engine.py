"""The engine's own verdict on the argv (`engine-args`): the probe ran on the head
(preflight/engine_args.py); this turns what the parser said into problems."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.models.recipe import Engine, flag_values
from orchestrator.paths import builtin_recipes_dir
from orchestrator.preflight.engine_args import EngineArgsResult, verdict_problems
from orchestrator.preflight.model import Severity, gib

if TYPE_CHECKING:
    from orchestrator.preflight.checks.context import Judge


def _check_engine_args(j: Judge, result: EngineArgsResult | None) -> None:
    if result is None:
        return  # not asked: a real recipe on the process runtime has no image to ask
    path = j.recipe_path
    if path is None:
        builtin = builtin_recipes_dir() / f"{j.recipe.name}.yaml"
        path = builtin if builtin.is_file() else None
    head = next((n for n in j.inventory.nodes if n.name == result.node), None)
    for severity, what, evidence, fix in verdict_problems(result, j.recipe, path):
        j.add("engine-args", Severity(severity), head, what, evidence, fix)


# vLLM's default --gpu-memory-utilization (EngineArgs.gpu_memory_utilization, 0.17.1 to 0.33.0).
VLLM_DEFAULT_GMU = 0.9


def _claim_fraction(j: Judge) -> tuple[str, float] | None:
    """(flag, fraction) of the unified memory the engine claims at startup; None: not stated."""
    if j.recipe.engine is Engine.vllm:
        flag = "--gpu-memory-utilization"
        values = flag_values(j.recipe.args, [flag])
        return flag, float(values[-1]) if values else VLLM_DEFAULT_GMU
    flag = "--mem-fraction-static"
    values = flag_values(j.recipe.args, [flag])
    return (flag, float(values[-1])) if values else None  # SGLang sizes it itself when unset


def _check_memory_claim(j: Judge) -> None:
    """The engine's claim (fraction x MemTotal) against what the node has free now (the page
    cache the load itself needs is the `memory` check's: MemAvailable against the weights).
    vLLM refuses to start when the claim exceeds the free memory
    CUDA reports ("Free memory on device ... is less than desired GPU memory utilization"); on a
    GB10 that is MemFree: page cache counts as used (seed 001's relaunch, seed 002's ceiling)."""
    stated = _claim_fraction(j)
    if stated is None or j.recipe.simulated:
        return  # a twin claims no GPU memory: the simulator allocates none (but for `hog`)
    flag, fraction = stated
    weights = j.recipe.model.expected_bytes_per_rank or 0
    for node, f in j.reachable():
        m = f.memory
        if m is None or m.mem_total <= 0:
            continue
        claim = int(fraction * m.mem_total)
        evidence = (
            f"{flag} {fraction:g} x MemTotal {gib(m.mem_total)} = {gib(claim)}; MemFree "
            f"{gib(m.mem_free)}, MemAvailable {gib(m.mem_available)}, Cached {gib(m.cached)}"
            + (f"; the load reads {gib(weights)} through the page cache" if weights else "")
        )
        fits = m.mem_free / m.mem_total
        lower = f"lower {flag} to {int(fits * 100) / 100:.2f} or less (MemFree / MemTotal)"
        keep = (
            "never drop caches: the weights in the page cache are the next load's fastest path "
            "(seed 002 boot 4)"
        )
        if claim > m.mem_available:
            j.add(
                "memory-claim",
                Severity.error,
                node,
                f"the engine claims {gib(claim)} on {node.name}, more than it has available "
                f"({gib(m.mem_available)})",
                evidence,
                f"{lower}, or stop what holds memory on {node.name}; {keep}",
            )
        elif claim > m.mem_free:
            j.add(
                "memory-claim",
                Severity.error if j.recipe.engine is Engine.vllm else Severity.warning,
                node,
                f"the engine claims {gib(claim)} on {node.name} but only {gib(m.mem_free)} is free"
                + (
                    ": vLLM refuses to start ('Free memory on device ... is less than desired "
                    "GPU memory utilization'); page cache counts as used on a GB10"
                    if j.recipe.engine is Engine.vllm
                    else "; the rest is page cache the kernel must reclaim as the pool is taken"
                ),
                evidence,
                f"{lower}; {keep}",
            )
