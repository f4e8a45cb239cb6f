"""The node program as a command line (`python3 -c TEXT MODE SPEC ...`): its text is package
data, read once."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def node_program() -> str:
    """The node program's text (package data), run as `python3 -c TEXT MODE SPEC ...`."""
    return (
        resources.files("orchestrator.weights")
        .joinpath("node_program.py")
        .read_text(encoding="utf-8")
    )


def program_argv(mode: str, spec: dict[str, Any], *more: str) -> list[str]:
    return ["python3", "-c", node_program(), mode, json.dumps(spec, separators=(",", ":")), *more]
