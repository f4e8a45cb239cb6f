"""Copies of a built-in recipe with other deadlines, for drills about something else than the
deadline a busy host would spend (`cluster boot PATH`: the copy keeps the recipe's name)."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.paths import builtin_recipes_dir


def recipe_copy(
    folder: Path, name: str, env: dict[str, str] | None = None, **timeouts: int
) -> Path:
    """A copy of the built-in recipe NAME with these `timeouts:` (real seconds; a twin scales
    the engine's ones) and these values of keys already in its `env:`, nothing else changed."""
    text = (builtin_recipes_dir() / f"{name}.yaml").read_text()
    assert text.count("\ntimeouts:\n") == 1, "the recipe's timeouts block moved"
    for key, seconds in timeouts.items():
        text, n = re.subn(rf"(?m)^  {key}: \d+", f"  {key}: {seconds}", text)
        if n == 0:
            text = text.replace("\ntimeouts:\n", f"\ntimeouts:\n  {key}: {seconds}\n")
    for key, value in (env or {}).items():
        text, n = re.subn(rf'(?m)^  {key}: "[^"]*"', f'  {key}: "{value}"', text)
        assert n == 1, f"{name}: env {key} is not in the recipe once"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"  # `cluster boot PATH`: the name must be the file's stem
    path.write_text(text)
    return path
