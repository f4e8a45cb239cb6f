"""YAML reading that fails loudly: duplicate keys and syntax errors name the file and line.

PyYAML keeps the last of two equal keys without a word; in an inventory that silently drops a
host, so duplicates are errors here (Ansible warns about them too).

The input is bounded before anything is built from it: the file's size, the document's depth
and its size once every alias is expanded. A 450-byte "billion laughs" of nested aliases is
one shared object to PyYAML, but every walk over it (merging variables, validating, printing
an error) visits each expansion: 13.5 s and 475 MB before these bounds, gigabytes one level
later. The node graph is measured, memoised per node, before it is constructed.
"""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 16 * 2**20
"""A 10,000-host inventory is ~1.5 MB; recipes and signature files are a few KB."""
MAX_NODES = 1_000_000
"""Scalars, sequences and mappings once aliases are expanded (a 10,000-host inventory: ~150k)."""
ALIAS_FACTOR, ALIAS_SLACK = 10, 100_000
"""Aliases may grow a document at most 10-fold past 100k values (`<<: *defaults` per host)."""
MAX_DEPTH = 64
"""Nesting of sequences and mappings (inventories and recipes are under 10 deep)."""

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60


def short_repr(value: Any) -> str:
    """A value for an error line: never the full repr of something the user gave us."""
    return _short.repr(value)


class YamlProblem(Exception):
    """A file that is not the YAML it claims to be; `line` is 1-based when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.message = message
        self.line = line
        super().__init__(f"line {line}: {message}" if line else message)


# libyaml's parser when PyYAML was built with it: a 10,000-host inventory parses ~6x faster
# (bench/inventory_scale.py). Same safe constructors, same marks on nodes.
_BASE: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        line = key_node.start_mark.line + 1
        try:
            hash(key)
        except TypeError:  # a mapping or a list as a key: construct_mapping refuses it
            continue
        if key in seen:
            raise YamlProblem(f"duplicate key {short_repr(key)} (first at line {seen[key]})", line)
        seen[key] = line
    return dict(loader.construct_mapping(node))


def strict_loader(base: type[yaml.SafeLoader]) -> type[yaml.SafeLoader]:
    """`base` with duplicate keys refused (the bench builds one on the pure-Python loader)."""
    loader: type[yaml.SafeLoader] = type(f"Strict{base.__name__}", (base,), {})
    loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
    return loader


_StrictLoader = strict_loader(_BASE)


def _measure(root: yaml.Node) -> None:
    """Refuse a node graph too deep or too large once aliases are expanded (or recursive)."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, depth)
    on_path: set[int] = set()

    def visit(node: yaml.Node, depth: int) -> tuple[int, int]:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in on_path:
            raise YamlProblem("a recursive alias (an anchor used inside itself)", _line(node))
        if depth > MAX_DEPTH:
            raise YamlProblem(f"nested deeper than {MAX_DEPTH} levels", _line(node))
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = (1, 0)
            return 1, 0
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        on_path.add(key)
        total, deepest = 1, 0
        for child in children:
            n, d = visit(child, depth + 1)
            total += n
            deepest = max(deepest, d + 1)
            if total > MAX_NODES:
                raise YamlProblem(
                    f"more than {MAX_NODES:,} values once aliases are expanded "
                    "(nested aliases, a 'billion laughs' document?)",
                    _line(node),
                )
            if deepest > MAX_DEPTH:
                raise YamlProblem(f"nested deeper than {MAX_DEPTH} levels", _line(node))
        on_path.discard(key)
        sizes[key] = (total, deepest)
        return total, deepest

    total, _ = visit(root, 0)
    if total > ALIAS_FACTOR * len(sizes) + ALIAS_SLACK:
        raise YamlProblem(
            f"aliases expand {len(sizes):,} values to {total:,} "
            f"(more than {ALIAS_FACTOR}-fold: nested aliases, a 'billion laughs' document?)",
            _line(root),
        )


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def parse_yaml(text: str, loader_class: type[yaml.SafeLoader] = _StrictLoader) -> Any:
    """One YAML document from text, bounded in depth and expanded size (see the module doc)."""
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _measure(node)
        return loader.construct_document(node)
    except RecursionError as exc:  # the parser itself recurses per level
        raise YamlProblem(f"nested deeper than {MAX_DEPTH} levels") from exc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise YamlProblem(f"invalid YAML: {exc.problem or exc.context}", line) from exc
    except yaml.YAMLError as exc:
        raise YamlProblem(f"invalid YAML: {short_repr(str(exc))}") from exc
    finally:
        loader.dispose()


def load_yaml(path: Path) -> Any:
    """Parse one YAML document; `YamlProblem` on unreadable, oversized or hostile files, bad
    syntax or duplicate keys."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise YamlProblem(f"cannot read: {exc.strerror or exc}") from exc
    if len(data) > MAX_BYTES:
        raise YamlProblem(f"larger than {MAX_BYTES // 2**20} MiB; not an inventory or a recipe")
    if b"\0" in data:
        raise YamlProblem("a binary file, not YAML text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlProblem("not UTF-8 text") from exc
    return parse_yaml(text)
