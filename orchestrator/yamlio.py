"""YAML reading that fails loudly: duplicate keys and syntax errors name the file and line.

PyYAML keeps the last of two equal keys without a word; in an inventory that silently drops a
host, so duplicates are errors here (Ansible warns about them too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class YamlProblem(Exception):
    """A file that is not the YAML it claims to be; `line` is 1-based when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.message = message
        self.line = line
        super().__init__(f"line {line}: {message}" if line else message)


class _StrictLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise YamlProblem(f"duplicate key {key!r} (first at line {seen[key]})", line)
        seen[key] = line
    return dict(loader.construct_mapping(node))


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(path: Path) -> Any:
    """Parse one YAML document; `YamlProblem` on unreadable files, bad syntax or duplicate keys."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise YamlProblem(f"cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise YamlProblem("not UTF-8 text") from exc
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 — a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise YamlProblem(f"invalid YAML: {exc.problem or exc.context}", line) from exc
    except yaml.YAMLError as exc:
        raise YamlProblem(f"invalid YAML: {exc}") from exc
