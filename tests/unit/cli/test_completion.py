"""Shell completion through the real protocol: `cluster` run as bash and zsh run it on TAB
(typer's `_CLUSTER_COMPLETE` variable), completing commands, recipe names and run ids; and
`--install-completion` (`--show-completion` prints the same script for the shell it detects
from its parent process, which a test cannot choose)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.recipes import recipe_names
from orchestrator.runstore import RunStore

ROOT = Path(__file__).resolve().parents[3]


def cluster(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    full.pop("CLUSTER_INVENTORY", None)  # the built-in inventory: runs under $XDG_STATE_HOME
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        env=full, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def bash(words: str, state: Path | None = None) -> list[str]:
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    env = {"_CLUSTER_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    if state is not None:
        env["XDG_STATE_HOME"] = str(state)
    done = cluster(env)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_commands_complete_from_the_table_without_loading_them():
    assert bash("cluster st") == ["status", "stop"]
    assert "bench" in bash("cluster ")


def test_recipe_names_complete_for_every_command_that_takes_one():
    small = [n for n in recipe_names() if n.startswith("mistral-small4")]
    assert len(small) == 3
    for command in ("boot", "preflight", "nccl-check", "recipes show", "sim twin"):
        assert bash(f"cluster {command} mistral-small4") == small, command


@pytest.fixture
def state(tmp_path: Path) -> tuple[Path, list[str]]:
    store = RunStore(tmp_path / "cluster" / "runs")
    ids = []
    for outcome in ("READY", "BARRIER_TIMEOUT", None):
        run = store.create()
        if outcome:
            run.write_json("verdict.json", {"outcome": outcome})
        ids.append(run.id)
    return tmp_path, ids


def test_run_ids_complete_newest_first_wherever_a_run_is_asked(state):
    root, ids = state
    newest_first = sorted(ids, reverse=True)
    assert bash("cluster status --run ", root) == newest_first
    assert bash("cluster bench ", root) == newest_first
    assert bash("cluster supervise ", root) == newest_first
    assert bash("cluster postmortem ", root) == newest_first
    assert bash(f"cluster logs --run {ids[0][:-3]}", root) == [ids[0]]


def test_zsh_shows_each_runs_outcome_beside_its_id(state):
    root, ids = state
    env = {
        "_CLUSTER_COMPLETE": "complete_zsh",
        "_TYPER_COMPLETE_ARGS": "cluster stop --run ",
        "XDG_STATE_HOME": str(root),
    }
    out = cluster(env).stdout
    assert f'"{ids[0]}":"READY"' in out and f'"{ids[1]}":"BARRIER_TIMEOUT"' in out
    assert f'"{ids[2]}":"no verdict"' in out


def test_install_completion_writes_the_script_and_sources_it(tmp_path):
    # typer detects the shell from the processes above this one, and ignores the argument while
    # it does: under a runner with no shell above (a background job, some CI), it says "Shell
    # None is not supported" and writes nothing. Its own switch makes the shell the argument.
    env = {"HOME": str(tmp_path), "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    done = cluster(env, "--install-completion", "bash")
    assert done.returncode == 0, done.stderr
    script = tmp_path / ".bash_completions" / "cluster.sh"
    assert script.exists(), (done.stdout, done.stderr)
    assert "_CLUSTER_COMPLETE=complete_bash" in script.read_text()
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()
