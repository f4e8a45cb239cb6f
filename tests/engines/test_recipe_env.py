"""Every engine variable a shipped recipe sets is read by the release it declares.

An env name the engine does not read does nothing, silently: seed 001 set
VLLM_ENGINE_CORE_STARTUP_TIMEOUT, which no vLLM release reads (the wait it meant is
VLLM_ENGINE_READY_TIMEOUT_S). Searched: the release's own package sources in its side
environment."""

from __future__ import annotations

from functools import cache

import pytest

from orchestrator.recipes import list_recipes
from tests.engines.side_env import side_dir

# Read by something the release does not ship, and why.
NOT_IN_RELEASE = {
    "SGLANG_UNBALANCED_LOAD_TIMEOUT_S": "seed 002's image bakes patch_barrier_timeout.py, which "
    "makes the post-load barrier read it (stock SGLang: the 480 s constant)",
}

CASES = [
    (recipe, key)
    for recipe in list_recipes()
    for key in recipe.env
    if key.startswith(("VLLM_", "SGLANG_")) and key not in NOT_IN_RELEASE
]


@cache
def _sources(engine: str, release: str) -> str:
    root = side_dir(engine, release) / engine
    return "\n".join(p.read_text(errors="replace") for p in sorted(root.rglob("*.py")))


@pytest.mark.parametrize(("recipe", "key"), CASES, ids=[f"{r.name}-{k}" for r, k in CASES])
def test_the_release_reads_the_variable(recipe, key) -> None:  # type: ignore[no-untyped-def]
    assert recipe.engine_version is not None
    release = recipe.engine_version.release
    assert f'"{key}"' in _sources(recipe.engine.value, release), (
        f"{recipe.name}: {recipe.engine.value} {release} never reads {key}: it does nothing"
    )


def test_the_variable_seed_001_set_is_read_by_no_vllm_release() -> None:
    for release in ("0.17.1", "0.19.0", "0.33.0"):
        sources = _sources("vllm", release)
        assert '"VLLM_ENGINE_CORE_STARTUP_TIMEOUT"' not in sources
        assert '"VLLM_ENGINE_READY_TIMEOUT_S"' in sources
