"""Secrets (issue 17, severe 4): redacted by name, by flag and by shape wherever cluster writes or
prints, and never on a node's command line (`ps` shows every argv to every user)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.errors import CommandTimeout
from orchestrator.plan.launch import PlanError, plan_launch, with_secret_env
from orchestrator.plan.rendezvous import plan_rendezvous
from orchestrator.recipes import load_recipe
from orchestrator.redact import REDACTED, is_secret_name, redact
from orchestrator.runstore import RunStore
from tests.run_manifests import a_recipe, write_a_manifest
from tests.unit.plan.test_rendezvous import spark_cluster, spark_inventory

HF = "hf_" + "A1b2C3d4E5f6G7h8I9j0K1l2"
SK = "sk-" + "proj0123456789abcdefXYZ"


@pytest.mark.parametrize(
    "name",
    ["HF_TOKEN", "MY_PASSWD", "HF_AUTH", "CREDENTIALS", "db_password", "ansible_become_pass"],
)
def test_secret_names_are_recognised(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["PWD", "--max-total-tokens", "--tokenizer", "ansible_ssh_private_key_file", "NCCL_IB_HCA"],
)
def test_engine_flags_paths_and_the_working_directory_are_not_secrets(name):
    assert not is_secret_name(name)


def test_a_flag_and_its_separate_value_are_redacted_and_so_are_token_shapes():
    argv = ["--api-key", SK, "--hf-token=x", "--max-total-tokens", "8192", f"note {HF} end"]
    assert redact(argv) == [
        "--api-key",
        REDACTED,
        f"--hf-token={REDACTED}",
        "--max-total-tokens",
        "8192",
        f"note {REDACTED} end",
    ]


def test_the_manifest_keeps_no_secret_in_clear(tmp_path):
    run = RunStore(tmp_path).create()
    base = a_recipe()
    recipe = a_recipe(
        args=(*base.args, "--api-key", SK, "--port", "30000", f"--hf-token={HF}"),
        env={"MY_PASSWD": "p1", "HF_AUTH": "p2", "CREDENTIALS": "p3", "PATH": "/bin"},
    )
    write_a_manifest(run, recipe=recipe)
    text = run.manifest_path.read_text()
    for secret in (SK, "p1", "p2", "p3", HF):
        assert secret not in text
    manifest = json.loads(text)["recipe"]
    assert manifest["env"]["PATH"] == "/bin" and manifest["args"][-3:-1] == ["--port", "30000"]


def recipe_with_secrets(tmp_path: Path) -> Path:
    text = (
        Path(__file__).resolve().parents[3]
        / "orchestrator/_data/recipes/mistral-large4-8x-sglang.yaml"
    ).read_text()
    text = text.replace("name: mistral-large4-8x-sglang", "name: secret")
    text = text.replace("env:\n", f"env:\n  HF_TOKEN: {HF}\n  MY_PASSWD: 'p w'\n", 1)
    path = tmp_path / "secret.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("as_json", [True, False])
def test_recipes_show_never_prints_a_secret(tmp_path, capsys, as_json):
    path = recipe_with_secrets(tmp_path)
    code = main(["recipes", "show", str(path), *(["--json"] if as_json else [])])
    out = capsys.readouterr().out
    assert code == 0
    assert HF not in out and "p w" not in out
    assert "HF_TOKEN" in out and REDACTED in out


def test_a_ranks_docker_run_names_a_secret_but_never_carries_its_value(tmp_path):
    recipe = load_recipe(recipe_with_secrets(tmp_path))
    inv, facts = spark_cluster(spark_inventory(recipe.nodes))
    plan = plan_launch(recipe, inv, plan_rendezvous(recipe, inv, facts), "20261129T153000Z-0a1b2c")
    for rank in plan.ranks:
        assert HF not in " ".join(rank.docker_argv)
        assert "HF_TOKEN" in rank.docker_argv and "MY_PASSWD" in rank.docker_argv
        assert rank.env["HF_TOKEN"] == HF  # the value travels in memory, to the channel


def test_the_secret_reaches_docker_through_stdin_not_argv(tmp_path):
    """Real `sh` runs the wrapper; a stand-in `docker` records its argv and environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    fake.write_text(
        textwrap.dedent(
            """\
            #!/bin/sh
            tr '\\0' ' ' < /proc/$$/cmdline > "$OUT/cmdline"
            printf '%s|%s' "$HF_TOKEN" "$MY_PASSWD" > "$OUT/env"
            """
        )
    )
    fake.chmod(0o755)
    env = {"HF_TOKEN": HF, "MY_PASSWD": " spaced \\ value ", "NCCL_DEBUG": "INFO"}
    docker = ("docker", "run", "--env", "HF_TOKEN", "--env", "MY_PASSWD", "img")
    argv, stdin = with_secret_env(docker, env)
    assert stdin is not None and HF not in " ".join(argv)
    subprocess.run(
        argv,
        input=stdin,
        check=True,
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path)},
        timeout=30,
    )
    assert (tmp_path / "env").read_text() == f"{HF}| spaced \\ value "
    cmdline = (tmp_path / "cmdline").read_text()
    assert "docker run --env HF_TOKEN --env MY_PASSWD img" in cmdline and HF not in cmdline


def test_without_secrets_the_argv_runs_as_it_is():
    assert with_secret_env(("docker", "run", "x"), {"A": "1"}) == (("docker", "run", "x"), None)


def test_a_secret_spanning_lines_cannot_be_planned():
    with pytest.raises(PlanError, match="one line"):
        with_secret_env(("docker",), {"HF_TOKEN": "a\nb"})


@pytest.mark.parametrize("key", ["BAD KEY", "A=B", "", "1ABC"])
def test_env_names_that_are_not_posix_names_are_refused(tmp_path, capsys, key):
    path = recipe_with_secrets(tmp_path)
    path.write_text(path.read_text().replace("env:\n", f"env:\n  {key!r}: '1'\n", 1))
    code = main(["recipes", "validate", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "env name" in err


def test_several_unknown_recipe_keys_are_one_line_each_without_an_echo_of_tp(tmp_path, capsys):
    path = recipe_with_secrets(tmp_path)
    text = path.read_text().replace("\ntp: 8", "\n").replace("nodes: 8", "nodes: eight")
    path.write_text(text + "bogus1: 1\nbogus2: 2\n")
    code = main(["recipes", "validate", str(path)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert [line.split("'")[1] for line in lines] == ["nodes", "bogus1", "bogus2"]
    assert all(line.startswith("error: ") for line in lines)


def test_nothing_to_hide_is_kept_and_a_key_files_path_is_not_a_secret():
    assert redact({"HF_TOKEN": None, "use_auth": False, "API_KEY": "", "private_key": "/k"}) == {
        "HF_TOKEN": None,
        "use_auth": False,
        "API_KEY": "",
        "private_key": "/k",
    }


def test_inventory_show_json_keeps_the_key_files_path(tmp_path, capsys):
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        "all:\n  hosts:\n    a: {rank: 0, fabric_iface: e, ansible_ssh_private_key_file: /k/id}\n"
    )
    assert main(["inventory", "show", "--json", "-i", str(inv)]) == 0
    node = json.loads(capsys.readouterr().out)["nodes"][0]
    assert node["private_key"] == "/k/id"
    assert node["extra_vars"]["ansible_ssh_private_key_file"] == "/k/id"


def test_an_errors_argv_shows_an_inline_program_by_its_size_and_still_hides_a_token() -> None:
    program = "\n".join(f"line {i}" for i in range(580))
    token = "hf_" + "a" * 30
    argv = ["python3", "-c", program, "probe", '{"dest":"/m"}', "--hf-token", token, "x" * 500]
    err = CommandTimeout(node="n4", argv=argv, timeout_s=10)
    line = err.line()
    assert line.startswith('node n4: `python3 -c <580-line program> probe \'{"dest":"/m"}\' ')
    assert line.endswith("<500 characters>` did not finish within 10 s — " + err.hint)
    assert token not in line and REDACTED in line and len(line) < 500
    assert err.argv == argv  # the exception keeps what ran, whole
