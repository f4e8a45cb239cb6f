"""The side environments of the engines tier: one directory per pinned engine release.

`tests/engines/install-parsers.sh` (run by `make test`) installs each `parsers/ENGINE-RELEASE.txt`
with `pip install --no-deps --target .engines/ENGINE-RELEASE`: the release's own wheel and what
importing its argument parser needs, each pinned. They run on .venv's Python and its CPU torch
(the engines' wheels want CUDA torch; parsing never touches it), with `stubs/` last on the path.
A missing directory fails the tier loudly; it is never skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PINS = HERE / "parsers"
STUBS = HERE / "stubs"
PROBE = ROOT / "orchestrator" / "preflight" / "engine_argv_probe.py"
MARK = "ENGINE_ARGS_PROBE "


def engines_dir() -> Path:
    return Path(os.environ.get("ENGINE_PARSERS_DIR", ROOT / ".engines"))


def pinned() -> list[tuple[str, str]]:
    """(engine, release) of every pin file, e.g. ('sglang', '0.5.23')."""
    out = []
    for path in sorted(PINS.glob("*.txt")):
        engine, _, release = path.stem.partition("-")
        out.append((engine, release))
    return out


def side_dir(engine: str, release: str) -> Path:
    """The installed side environment; fails the test (loudly, never a skip) when absent."""
    pins = PINS / f"{engine}-{release}.txt"
    if not pins.is_file():
        pytest.fail(
            f"no pins for {engine} {release}: add tests/engines/parsers/{engine}-{release}.txt "
            "(the release's wheel and what importing its parser needs, each ==pinned)"
        )
    where = engines_dir() / f"{engine}-{release}"
    stamp = where / ".installed"
    if not stamp.is_file() or stamp.read_text() != pins.read_text():
        pytest.fail(
            f"the {engine} {release} parser is not installed at {where} (or its pins changed): "
            "run `bash tests/engines/install-parsers.sh` (make test runs it)"
        )
    return where


def _env(engine: str, release: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "SGLANG_"))}
    env["PYTHONPATH"] = f"{side_dir(engine, release)}{os.pathsep}{STUBS}"
    env["HF_HUB_OFFLINE"] = "1"  # parsing never downloads; make sure of it
    env["TRANSFORMERS_OFFLINE"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


RELEASE_PROBE = HERE / "release_probe.py"


@dataclass(frozen=True)
class ReleaseAnswers:
    """What one release's own parser said: its verdict on each argv asked, and its flag table."""

    verdicts: dict[str, dict[str, Any]]  # json.dumps(argv) -> verdict
    table: dict[str, Any]

    def verdict(self, argv: list[str]) -> dict[str, Any]:
        return self.verdicts[json.dumps(argv)]


def probe_release(engine: str, release: str, argvs: list[list[str]]) -> ReleaseAnswers:
    """The release's own verdict on each argv (the flags after the program) and its serve
    parser's flag table: one process, one import of the release (release_probe.py)."""
    done = subprocess.run(
        [sys.executable, str(RELEASE_PROBE), str(PROBE), engine],
        input=json.dumps(argvs),
        env=_env(engine, release),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    answers = [
        json.loads(line[len(MARK) :]) for line in done.stdout.splitlines() if line.startswith(MARK)
    ]
    if done.returncode != 0 or len(answers) != len(argvs) + 1:
        pytest.fail(
            f"the {engine} {release} probe failed (exit {done.returncode}, {len(answers)} of "
            f"{len(argvs)} answers and the flag table):\n{done.stderr[-3000:]}"
        )
    *verdicts, table = answers
    return ReleaseAnswers({json.dumps(a): v for a, v in zip(argvs, verdicts, strict=True)}, table)


def flag_table(engine: str, release: str) -> dict[str, Any]:
    """The release's serve parser as a table (the probe's `--flags` mode)."""
    done = subprocess.run(
        [sys.executable, str(PROBE), "--flags", engine],
        env=_env(engine, release),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"the {engine} {release} flag table failed:\n{done.stderr[-3000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if not lines:
        pytest.fail(f"the {engine} {release} flag table: no answer:\n{done.stderr[-3000:]}")
    table: dict[str, Any] = json.loads(lines[-1][len(MARK) :])
    return table
