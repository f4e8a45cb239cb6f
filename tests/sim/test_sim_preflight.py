"""`cluster preflight RECIPE` on the built-in simulated cluster checks the engine argv through the
recipe's twin, as `cluster boot` does there, and lists every check it did not run (issue 31)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import ExitCode
from orchestrator.paths import builtin_recipes_dir, builtin_simulated_inventory

pytestmark = pytest.mark.timeout(120)

FLAG = "--frobnicate-kv"


def preflight(recipe: str | Path) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "preflight", str(recipe), "--json",
         "-i", str(builtin_simulated_inventory())],
        capture_output=True, text=True, timeout=100,
    )  # fmt: skip
    return proc.returncode, json.loads(proc.stdout)


def test_a_recipe_with_an_unknown_flag_fails_preflight_on_the_built_in_cluster(
    tmp_path: Path,
) -> None:
    text = (builtin_recipes_dir() / "mistral-large4-8x-sglang.yaml").read_text()
    text = text.replace("name: mistral-large4-8x-sglang", "name: bad-flag")
    mode = "  - [--tokenizer-mode, mistral]\n"
    text = text.replace(mode, f'{mode}  - [{FLAG}, "1"]\n', 1)
    bad = tmp_path / "bad-flag.yaml"
    bad.write_text(text)
    code, report = preflight(bad)
    assert code == ExitCode.PREFLIGHT_REFUSED, report
    refused = [p for p in report["problems"] if p["check"] == "engine-args"]
    assert len(refused) == 2, report["problems"]  # rank 0's argv and rank 1's
    assert all(FLAG in p["evidence"] and f"change {FLAG} at {bad}:" in p["fix"] for p in refused)
    assert "engine-args" in report["checks"]
    not_run = {n["check"]: n["because"] for n in report["not_checked"]}
    kernel = {"logind-removeipc", "fabric-speed", "kernel-recent"}
    assert set(not_run) == {"docker", "image", "gpu", "containers", "disk", "peer-ssh", *kernel}
    assert all("runs each rank as a local process" in why for why in not_run.values())
    # The recipe as shipped: the same twin's parser accepts its argv.
    _, shipped = preflight("mistral-large4-8x-sglang")
    assert "engine-args" in shipped["checks"]
    assert not [p for p in shipped["problems"] if p["check"] == "engine-args"], shipped
