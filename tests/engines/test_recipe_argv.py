"""Every shipped recipe, every rank, parsed by the real parser of the release it declares.

Fails on an unknown flag, an invalid choice, a flag argparse only prefix-matched, a deprecation
the engine reports, and a multi-node flag missing or disagreeing with the recipe's keys. A flag in
`engine_version.beyond_release` must be exactly what the release refuses: the argv less those
flags must pass, and the full argv must fail naming one of them (so the entry goes the day a
release accepts it)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.models.recipe import Engine
from orchestrator.recipes import list_recipes
from tests.engines.cases import HEAD_ADDR, RankArgv, rank_argvs, without
from tests.engines.side_env import ReleaseAnswers

CASES = rank_argvs()


def test_every_shipped_recipe_declares_its_engine_version() -> None:
    missing = [r.name for r in list_recipes() if r.engine_version is None]
    assert not missing, f"recipes without engine_version: {missing}"


def _deprecations(verdict: dict[str, Any]) -> list[str]:
    return [w for w in verdict.get("warnings", []) if "deprecat" in w.lower() or "removed" in w]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rank_argv_parses(case: RankArgv, releases: dict[tuple[str, str], ReleaseAnswers]) -> None:
    version = case.recipe.engine_version
    assert version is not None
    answers = releases[case.release]
    full = answers.verdict(case.argv)
    assert full["version"] == version.release, "the side environment holds another release"
    if version.beyond_release:
        refused = full["error"] or ""
        assert not full["ok"] and any(flag in refused for flag in version.beyond_release), (
            f"{case.id}: {version.release} no longer refuses {version.beyond_release} "
            f"(verdict: {refused or 'accepted'}); drop them from engine_version.beyond_release"
        )
        verdict = answers.verdict(without(case.argv, version.beyond_release))
    else:
        verdict = full
    assert verdict["ok"], (
        f"{case.id}: {case.recipe.engine.value} {version.release}: {verdict['error']}"
    )
    assert not verdict["abbreviations"], (
        f"{case.id}: argparse only prefix-matched {verdict['abbreviations']}: write the full flag"
    )
    assert not _deprecations(verdict), f"{case.id}: the engine reports {_deprecations(verdict)}"
    _multi_node_agrees(case, verdict["parsed"])


def _multi_node_agrees(case: RankArgv, parsed: dict[str, Any]) -> None:
    r = case.recipe
    port = r.ports.rendezvous
    if r.engine is Engine.sglang:
        # The dest of --tp-size is tensor_parallel_size up to 0.5.10, tp_size later.
        tp_dest = "tp_size" if "tp_size" in parsed else "tensor_parallel_size"
        want: dict[str, Any] = {
            "model_path": r.model.path,
            tp_dest: r.tp,
            "nnodes": r.nodes,
            "node_rank": case.rank,
            "port": r.ports.serve,
        }
        if r.multi_node:
            want["dist_init_addr"] = f"{HEAD_ADDR}:{port}"
    else:
        model = parsed.get("model_tag") or parsed.get("model")
        assert model == r.model.path, f"{case.id}: vLLM serves {model!r}, not {r.model.path}"
        want = {"tensor_parallel_size": r.tp, "port": r.ports.serve}
        if r.multi_node:
            want |= {
                "nnodes": r.nodes,
                "node_rank": case.rank,
                "master_addr": HEAD_ADDR,
                "master_port": port,
                "headless": case.rank > 0,
            }
    got = {key: parsed.get(key, "<no such argument>") for key in want}
    assert got == want, f"{case.id}: the engine parsed {got}, the recipe means {want}"
