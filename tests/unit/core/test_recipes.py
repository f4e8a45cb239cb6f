"""Recipes: the shipped lanes validate, render per rank exactly, and bad recipes are refused.

Golden renders live in tests/fixtures/recipes/golden/; `UPDATE_GOLDEN=1 pytest ...` rewrites them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from orchestrator.cli.main import main
from orchestrator.errors import ExitCode, RecipeError
from orchestrator.models.recipe import Engine, Recipe, flag_value, render
from orchestrator.paths import builtin_recipes_dir
from orchestrator.recipes import find_recipe, list_recipes, load_recipe, recipe_names

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes"
GOLDEN = FIXTURES / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

SHIPPED = {
    "mistral-large4-8x-sglang",
    "mistral-large4-8x-vllm",
    "mistral-small4-1x-sglang",
    "mistral-small4-1x-vllm",
    "mistral-small4-thor-vllm",
}


def minimal(**overrides: Any) -> dict[str, Any]:
    """The smallest valid single-node SGLang recipe, with `overrides` on top."""
    data: dict[str, Any] = {
        "name": "t",
        "engine": "sglang",
        "image": {"reference": "lmsysorg/sglang:v0.5.9"},
        "nodes": 1,
        "model": {"path": "/model"},
        "entrypoint": ["python3", "-m", "sglang.launch_server"],
        "args": ["--model-path", "/model"],
    }
    data.update(overrides)
    return data


def two_node_vllm(**overrides: Any) -> dict[str, Any]:
    """The smallest valid two-node vLLM recipe, with `overrides` on top."""
    data = minimal(
        engine="vllm",
        nodes=2,
        entrypoint=["vllm", "serve"],
        args=[
            "/model",
            ["--tensor-parallel-size", "{tp}"],
            ["--nnodes", "{nnodes}"],
            ["--node-rank", "{node_rank}"],
            ["--master-addr", "{head_addr}"],
            ["--master-port", "{head_port}"],
        ],
        worker_args=["--headless"],
    )
    data.update(overrides)
    return data


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def refusal(tmp_path: Path, data: dict[str, Any]) -> str:
    with pytest.raises(RecipeError) as info:
        load_recipe(write(tmp_path, data))
    return info.value.line()


def check_golden(name: str, payload: object) -> None:
    path = GOLDEN / name
    text = json.dumps(payload, indent=2) + "\n"
    if UPDATE or not path.exists():
        path.write_text(text, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"golden {path} was missing and has been written; re-run")
    assert json.loads(path.read_text(encoding="utf-8")) == payload, f"golden {path} differs"


# ---------------------------------------------------------------------------------------------
# The shipped recipes


def test_the_shipped_recipes_are_the_five_seed_lanes() -> None:
    assert set(recipe_names()) == SHIPPED


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_recipe_validates(name: str) -> None:
    recipe = load_recipe(builtin_recipes_dir() / f"{name}.yaml")
    assert recipe.name == name
    assert recipe.seed is not None
    assert not recipe.simulated


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_recipe_leads_with_a_program_not_a_model_id(name: str) -> None:
    recipe = load_recipe(find_recipe(name))
    assert recipe.entrypoint
    assert recipe.entrypoint[0] in {"python3", "vllm", "/opt/nvidia/nvidia_entrypoint.sh"}


def test_list_recipes_returns_every_shipped_recipe_sorted_by_name() -> None:
    assert [r.name for r in list_recipes()] == sorted(SHIPPED)


def test_the_large4_sglang_barrier_matches_the_env_the_patched_image_reads() -> None:
    recipe = load_recipe(find_recipe("mistral-large4-8x-sglang"))
    assert recipe.env["SGLANG_UNBALANCED_LOAD_TIMEOUT_S"] == "7200"
    assert recipe.timeouts.barrier == 7200
    assert recipe.nodes == recipe.tp == 8


def test_the_large4_vllm_recipe_runs_at_gpu_memory_utilization_089() -> None:
    recipe = load_recipe(find_recipe("mistral-large4-8x-vllm"))
    i = recipe.args.index("--gpu-memory-utilization")
    assert recipe.args[i + 1] == "0.89"
    assert recipe.worker_args == ["--headless"]


# ---------------------------------------------------------------------------------------------
# Rendering


@pytest.mark.parametrize("rank", [0, 3])
@pytest.mark.parametrize("name", ["mistral-large4-8x-sglang", "mistral-large4-8x-vllm"])
def test_the_8x_recipes_render_each_rank_as_the_golden_file_says(name: str, rank: int) -> None:
    recipe = load_recipe(find_recipe(name))
    argv, env = render(recipe, rank, 8, "10.10.0.1", recipe.ports.rendezvous)
    check_golden(f"{name}.rank{rank}.json", {"argv_tail": argv, "env": env})


def test_vllm_worker_ranks_get_headless_and_rank_0_does_not() -> None:
    recipe = load_recipe(find_recipe("mistral-large4-8x-vllm"))
    head = render(recipe, 0, 8, "10.10.0.1", 29501).argv_tail
    worker = render(recipe, 3, 8, "10.10.0.1", 29501).argv_tail
    assert "--headless" not in head
    assert worker[-1] == "--headless"
    assert worker[: len(head)] == [a if a != "0" else "3" for a in head][: len(head)]


def test_sglang_ranks_differ_only_in_their_node_rank() -> None:
    recipe = load_recipe(find_recipe("mistral-large4-8x-sglang"))
    head = render(recipe, 0, 8, "10.10.0.1", 29500).argv_tail
    worker = render(recipe, 3, 8, "10.10.0.1", 29500).argv_tail
    diff = [(a, b) for a, b in zip(head, worker, strict=True) if a != b]
    assert diff == [("0", "3")]
    assert head[head.index("--dist-init-addr") + 1] == "10.10.0.1:29500"


def test_the_render_leaves_json_braces_alone_and_unescapes_double_braces() -> None:
    recipe = Recipe.model_validate(
        minimal(
            args=[
                "--model-path",
                "/model",
                ["--speculative-config", '{"method":"dspark","num_speculative_tokens":3}'],
                ["--note", "{{node_rank}}={node_rank}"],
            ],
            env={"MASTER_ADDR": "{head_addr}", "RANKS": "{nnodes}"},
        )
    )
    argv, env = render(recipe, 0, 1, "10.0.0.9", 29500)
    assert '{"method":"dspark","num_speculative_tokens":3}' in argv
    assert "{node_rank}=0" in argv
    assert env == {"MASTER_ADDR": "10.0.0.9", "RANKS": "1"}


def test_the_render_refuses_a_rank_outside_the_cluster_and_a_different_node_count() -> None:
    recipe = load_recipe(find_recipe("mistral-large4-8x-sglang"))
    with pytest.raises(ValueError, match="outside"):
        render(recipe, 8, 8, "10.10.0.1", 29500)
    with pytest.raises(ValueError, match="for 8 nodes"):
        render(recipe, 0, 4, "10.10.0.1", 29500)


# ---------------------------------------------------------------------------------------------
# Bad recipes, one problem each

BAD = [
    ("no-entrypoint.yaml", "key 'entrypoint'", "--entrypoint <model-id>"),
    ("model-id-entrypoint.yaml", "key 'entrypoint'", "looks like a model id"),
    ("unknown-engine.yaml", "key 'engine'", "'tensorrt-llm'"),
    ("unknown-key.yaml", "key 'timeouts.barier'", "did you mean 'barrier'"),
    ("bad-digest.yaml", "key 'image.digest'", "64 lowercase hex"),
    ("rm-in-extra.yaml", "key 'docker.extra'", "logs survive"),
    ("unknown-placeholder.yaml", "key 'args'", "unknown placeholder {rank}"),
    ("malformed-yaml.yaml", "malformed-yaml.yaml:5:", "invalid YAML"),
    ("barrier-mismatch.yaml", "key 'env'", "timeouts.barrier is 600"),
    ("vllm-workers-not-headless.yaml", "key 'worker_args'", "--headless"),
]


@pytest.mark.parametrize(("fixture", "key", "words"), BAD, ids=[b[0] for b in BAD])
def test_each_bad_recipe_is_refused_naming_its_file_and_key(
    fixture: str, key: str, words: str
) -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe(FIXTURES / fixture)
    line = info.value.line()
    assert str(FIXTURES / fixture) in line
    assert key in line
    assert words in line
    assert info.value.exit_code == ExitCode.CONFIG
    assert "\n" not in line


@pytest.mark.parametrize(("fixture", "key", "words"), BAD, ids=[b[0] for b in BAD])
def test_the_cli_refuses_each_bad_recipe_with_exit_2_and_one_line_on_stderr(
    fixture: str, key: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["recipes", "validate", str(FIXTURES / fixture)])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    assert key in err and words in err


def test_several_problems_are_reported_at_once_each_naming_file_and_key() -> None:
    path = FIXTURES / "several-problems.yaml"
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    problems = info.value.lines()  # one line each (issue 17: they were joined into one)
    assert len(problems) == 3
    assert all(p.startswith(f"{path}: key '") for p in problems)
    assert {p.split("'")[1] for p in problems} == {"image.digest", "docker.extra", "docker.colour"}


def test_a_name_that_differs_from_the_file_name_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump(minimal(name="t")), encoding="utf-8")
    with pytest.raises(RecipeError, match="differs from the file name"):
        load_recipe(path)


def test_a_recipe_without_a_name_is_named_after_its_file(tmp_path: Path) -> None:
    data = minimal()
    del data["name"]
    path = tmp_path / "my-lane.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert load_recipe(path).name == "my-lane"


def test_a_yaml_file_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n", encoding="utf-8")
    with pytest.raises(RecipeError, match="expected a mapping"):
        load_recipe(path)


def test_a_duplicate_key_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("name: dup\nengine: sglang\nengine: vllm\n", encoding="utf-8")
    with pytest.raises(RecipeError, match=r"dup\.yaml:3: duplicate key 'engine'"):
        load_recipe(path)


def test_an_unquoted_number_in_args_is_refused_with_a_hint_to_quote_it(tmp_path: Path) -> None:
    line = refusal(tmp_path, minimal(args=["--model-path", "/model", ["--tp", 1]]))
    assert "key 'args[3]'" in line
    assert "quote it" in line


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        ({"entrypoint": []}, "entrypoint", "required"),
        ({"entrypoint": ["vllm serve"]}, "entrypoint", "one program name"),
        ({"docker": {"extra": ["--rm=true"]}}, "docker.extra", "--rm is refused"),
        ({"docker": {"extra": ["--name=x"]}}, "docker.extra", "--name is refused"),
        ({"docker": {"extra": ["-e", "X=1"]}}, "docker.extra", "one long flag"),
        ({"docker": {"volumes": ["~/models:/model"]}}, "docker.volumes", "does not expand"),
        ({"docker": {"ulimits": {"memlok": "-1"}}}, "docker.ulimits", "unknown ulimit"),
        ({"env": {"NCCL_SOCKET_IFNAME": "enp1s0f1np1"}}, "env", "per-host value"),
        ({"env": {"X": "{rank}"}}, "env", "unknown placeholder"),
        ({"args": ["--model-path", "/other"]}, "args", "model.path /model is never passed"),
        ({"args": ["--model-path", "/model", "--port", "8000"]}, "args", "ports.serve"),
        ({"args": ["--model-path", "/model", "--tp", "2"]}, "args", "--tp 2 disagrees"),
        ({"args": ["--model-path", "/model", "--headless"]}, "args", "worker_args"),
        ({"image": {"reference": "x", "digest": "sha256:" + "A" * 64}}, "image.digest", "hex"),
        ({"ports": {"serve": 29500}}, "ports", "must differ"),
        ({"timeouts": {"ready": 0}}, "timeouts.ready", "greater than 0"),
        ({"nodes": "8"}, "nodes", "valid integer"),
        ({"model": {"path": "model"}}, "model.path", "absolute"),
        ({"model": {"path": "/model", "host_dir": "/w"}}, "docker", "no volume mounts"),
    ],
)
def test_each_refusal_names_its_key(
    tmp_path: Path, overrides: dict[str, Any], key: str, words: str
) -> None:
    line = refusal(tmp_path, minimal(**overrides))
    assert f"key '{key}'" in line
    assert words in line


def test_a_multi_node_recipe_that_never_uses_the_rank_placeholders_is_refused(
    tmp_path: Path,
) -> None:
    line = refusal(tmp_path, two_node_vllm(args=["/model"]))
    assert "every rank would think it is the head" in line


def test_a_multi_node_recipe_on_a_bridge_network_is_refused(tmp_path: Path) -> None:
    line = refusal(tmp_path, two_node_vllm(docker={"network": "bridge"}))
    assert "key 'docker'" in line and "multi-node needs 'host'" in line


def test_a_two_node_vllm_recipe_with_headless_workers_validates() -> None:
    recipe = Recipe.model_validate(two_node_vllm())
    assert recipe.engine is Engine.vllm
    assert recipe.tp == 2
    assert recipe.ports.serve == 8000 and recipe.ports.rendezvous == 29501


def test_the_barrier_timeout_is_derived_from_the_sglang_env_when_not_written() -> None:
    recipe = Recipe.model_validate(minimal(env={"SGLANG_UNBALANCED_LOAD_TIMEOUT_S": "3600"}))
    assert recipe.timeouts.barrier == 3600


def test_the_barrier_timeout_defaults_to_sglangs_480_s_constant() -> None:
    assert Recipe.model_validate(minimal()).timeouts.barrier == 480


def test_a_mounted_host_dir_under_a_parent_volume_validates() -> None:
    recipe = Recipe.model_validate(
        minimal(
            model={"path": "/models/a/b", "host_dir": "/srv/models/a/b"},
            args=["--model-path", "/models/a/b"],
            docker={"volumes": ["/srv/models:/models:ro"]},
        )
    )
    assert recipe.model.host_dir == "/srv/models/a/b"


def test_a_recipe_is_frozen() -> None:
    recipe = Recipe.model_validate(minimal())
    with pytest.raises(ValidationError):
        recipe.nodes = 2  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# Finding recipes and the CLI


def test_find_recipe_takes_a_path_that_exists(tmp_path: Path) -> None:
    path = write(tmp_path, minimal())
    assert find_recipe(str(path)) == path


def test_an_unknown_recipe_name_is_refused_listing_the_available_names() -> None:
    with pytest.raises(RecipeError) as info:
        find_recipe("mistral-large4-8x-sglan")
    line = info.value.line()
    assert "unknown recipe 'mistral-large4-8x-sglan'" in line
    assert "did you mean mistral-large4-8x-sglang" in line
    assert all(name in line for name in SHIPPED)


def test_a_missing_recipe_path_is_refused() -> None:
    with pytest.raises(RecipeError, match="no such file"):
        find_recipe("nowhere/x.yaml")


def test_the_cli_validates_a_good_recipe_and_prints_ok(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["recipes", "validate", str(builtin_recipes_dir() / "mistral-small4-1x-vllm.yaml")])
    out, err = capsys.readouterr()
    assert code == 0
    assert out.strip() == "ok: mistral-small4-1x-vllm"
    assert err == ""


def test_the_cli_lists_recipes_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipes", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in listed} == SHIPPED


def test_the_cli_lists_recipes_as_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipes", "list"]) == 0
    out = capsys.readouterr().out
    assert "mistral-small4-1x-sglang" in out and "engine" in out


def test_the_cli_shows_a_recipe_as_json_with_defaults_filled(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["recipes", "show", "mistral-small4-1x-sglang", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["timeouts"]["exec_ready"] == 120
    assert shown["entrypoint"] == ["python3", "-m", "sglang.launch_server"]


def test_the_cli_show_output_is_itself_a_valid_recipe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["recipes", "show", "mistral-large4-8x-vllm"]) == 0
    path = tmp_path / "mistral-large4-8x-vllm.yaml"
    path.write_text(capsys.readouterr().out, encoding="utf-8")
    assert load_recipe(path) == load_recipe(find_recipe("mistral-large4-8x-vllm"))


def test_the_cli_refuses_an_unknown_recipe_name_with_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["recipes", "show", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown recipe 'nope'" in err and "mistral-large4-8x-vllm" in err


def test_the_cli_prints_the_entrypoint_explanation_intact(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["recipes", "validate", str(FIXTURES / "no-entrypoint.yaml")]) == 2
    err = capsys.readouterr().err
    assert '["python3", "-m", "sglang.launch_server"] or ["vllm", "serve"]' in err


def test_the_annotated_example_in_the_docs_validates(tmp_path: Path) -> None:
    docs = Path(__file__).resolve().parents[3] / "docs" / "recipes.md"
    text = docs.read_text(encoding="utf-8")
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "my-lane.yaml"
    path.write_text(block, encoding="utf-8")
    recipe = load_recipe(path)
    argv, _ = render(recipe, 1, 2, "10.0.0.1", recipe.ports.rendezvous)
    assert " ".join(argv) in " ".join(text.split())


@pytest.mark.parametrize(
    ("argv", "value"),
    [
        (["--tokenizer-mode", "mistral", "--tp", "8"], "mistral"),
        (["--tokenizer-mode=mistral"], "mistral"),
        (["--tokenizer-mode", "--tp", "8"], ""),  # bare: a boolean flag
        (["--tokenizer-mode"], ""),
        (["--tp", "8"], None),
        (["--tokenizer-mode", "auto", "--tokenizer-mode", "mistral"], "auto"),  # the first
        (["--tokenizer-modes", "x"], None),  # another flag's name is not a prefix match
    ],
)
def test_flag_value_is_one_reading_of_an_argv(argv: list[str], value: str | None) -> None:
    # one reading for the postmortem's "current value", the weights' checks and `weights
    # status --warm` (three copies before issue 26, one of which read `--flag --next` as a value)
    assert flag_value(argv, "--tokenizer-mode") == value
