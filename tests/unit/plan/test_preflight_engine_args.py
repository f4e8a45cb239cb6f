"""Preflight's `engine-args` check: the image's own parser on the head refuses a bad argv with
the engine's line and the recipe line to change (the probe itself: tests/engines/)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from orchestrator.models.recipe import Recipe, render
from orchestrator.paths import builtin_recipes_dir
from orchestrator.plan.launch import LaunchPlan, RankLaunch
from orchestrator.preflight.engine_args import (
    MARK,
    PROBE_SCRIPT,
    offending_flag,
    parse_verdicts,
    probe_commands,
    recipe_line,
)
from orchestrator.recipes import resolve_recipe
from orchestrator.runstore import RunStore
from orchestrator.simulator.flag_tables import ENV_BEYOND
from orchestrator.simulator.twin import make_twin
from tests.fake_transport import FakeReply
from tests.unit.plan.test_preflight import fake_cluster, inventory_like_testbed, small_twin

REFUSAL = (
    "sglang serve: error: argument --tokenizer-mode: invalid choice: 'mistral' "
    "(choose from 'auto', 'slow')"
)


def _launch(recipe: Recipe, python_env: dict[str, str] | None = None) -> LaunchPlan:
    ranks = []
    for rank in range(recipe.nodes):
        cmd = render(recipe, rank, recipe.nodes, "10.0.0.1", recipe.ports.rendezvous)
        ranks.append(
            RankLaunch(
                rank=rank,
                node=f"n{rank}",
                container=f"c{rank}",
                labels={},
                engine_argv=tuple(cmd.argv_tail),
                env={**cmd.env, **(python_env or {})},
                docker_argv=("docker", "run"),
            )
        )
    return LaunchPlan(
        run_id="r",
        recipe=recipe.name,
        engine=recipe.engine,
        image=recipe.image.reference,
        head_addr="10.0.0.1",
        head_port=recipe.ports.rendezvous,
        waves=((0,),),
        ranks=tuple(ranks),
    )


def test_a_real_recipe_is_probed_in_one_throwaway_container_with_its_own_image() -> None:
    recipe = resolve_recipe("mistral-large4-8x-vllm")
    [(argv, ranks)] = probe_commands(recipe, _launch(recipe), ["docker"])
    assert ranks == [0, 1]
    assert argv[:5] == ["docker", "run", "--rm", "--network", "none"]
    at = argv.index("--entrypoint")
    assert argv[at + 1 : at + 4] == ["python3", recipe.image.reference, "-c"]
    assert argv[at + 4] == PROBE_SCRIPT.read_text()
    assert argv[at + 5 : at + 7] == ["--batch", "vllm"]
    rank0, rank1 = json.loads(argv[-1])
    assert rank0[0] == recipe.model.path and "--headless" not in rank0
    assert rank1[-1] == "--headless"


def test_the_flag_and_the_recipe_line_are_found_from_the_engines_line() -> None:
    assert offending_flag(REFUSAL) == "--tokenizer-mode"
    assert offending_flag("vllm: error: unrecognized arguments: --tp 8") == "--tp"
    assert offending_flag(
        "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser"
    ) == ("--enable-auto-tool-choice")
    path = builtin_recipes_dir() / "mistral-large4-8x-sglang.yaml"
    where = recipe_line(path, "--tokenizer-mode")
    assert where is not None
    number = int(where.rpartition(":")[2])
    assert "[--tokenizer-mode, mistral]" in path.read_text().splitlines()[number - 1]


async def test_preflight_refuses_the_boot_with_the_engines_line_and_the_line_to_change(
    tmp_path: Path,
) -> None:
    from orchestrator.preflight import run_preflight

    inv = inventory_like_testbed(tmp_path)
    refused = "".join(
        MARK
        + json.dumps({"engine": "sglang", "ok": False, "error": REFUSAL, "version": "x"})
        + "\n"
        for _ in range(2)
    )
    head = {"ctb-node0": {"docker-run": FakeReply(stdout=refused)}}
    path = builtin_recipes_dir() / "mistral-large4-8x-sglang.yaml"
    run = RunStore(tmp_path / "runs").create()
    result = await run_preflight(
        small_twin(), inv, run=run, factory=fake_cluster(inv, head), recipe_path=path
    )
    errors = [p for p in result.report.errors if p.check == "engine-args"]
    assert [p.rank for p in errors] == [0, 0]  # both verdicts come from the head
    assert "rank 0" in errors[0].what and "rank 1" in errors[1].what
    assert errors[0].evidence == REFUSAL
    assert f"change --tokenizer-mode at {path}:" in errors[0].fix


def test_a_twin_is_asked_through_its_own_program_and_refuses_what_its_release_refuses() -> None:
    twin = make_twin(resolve_recipe("mistral-large4-8x-sglang"), "test")
    # Without the vendor build's extra flag, the twin is public SGLang 0.5.23.
    public = twin.model_copy(update={"env": {k: v for k, v in twin.env.items() if k != ENV_BEYOND}})
    for recipe, ok in ((twin, True), (public, False)):
        commands = probe_commands(recipe, _launch(recipe), None)
        assert [ranks for _, ranks in commands] == [[0], [1]]
        for argv, ranks in commands:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
            [verdict] = parse_verdicts(done.stdout, ranks)
            assert verdict.ok is ok, done.stdout + done.stderr
            assert verdict.parser == "simulator"
            if not ok:
                assert verdict.error == REFUSAL
