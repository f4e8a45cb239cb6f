"""Read a YAML inventory the way Ansible does: groups, host ranges, `group_vars/`, `host_vars/`.

The same file drives `ansible-playbook`, so `cluster` must see the hosts and variables that
`ansible-inventory --list` sees (a property test in tests/ansible holds them equal). What this
module follows, from ansible-core's yaml inventory plugin, `InventoryData`, the
`host_group_vars` vars plugin and `VariableManager.get_vars`:

* a group body has `hosts`, `vars`, `children` (a string stands for a one-key mapping);
  top-level groups without a parent are children of `all`; a host in no group but `all` is in
  `ungrouped`; a group made its own ancestor is refused ("recursive dependency loop");
* a host key is a pattern: `node[0:7]`, `node[01:08]`, `db[a:c]`, `x[0:10:2]`, several ranges
  in one name; `name:port` (or `[name]:port`) sets `ansible_port` when the host is created;
* group depth is the longest path from `all`; groups merge by (depth, `ansible_group_priority`,
  name);
* variables merge, later winning per key: the file's `all` vars, the file's group vars (sorted
  as above), `group_vars/all`, `group_vars/<group>` (same order), the file's host vars,
  `host_vars/<host>`;
* `group_vars/<name>` is the first of `<name>`, `<name>.yml`, `<name>.yaml`, `<name>.json`;
  a folder is read whole, sorted, recursively, skipping hidden files, `~` backups and other
  extensions.

What Ansible would also read and we refuse with a line (docs/hostile-input.md): INI
inventories, inventory scripts, inventory folders, vault-encrypted files.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.yamlio import YamlProblem, load_yaml, short_repr

GROUP_KEYS = frozenset({"hosts", "vars", "children"})
VARS_EXTENSIONS = ("", ".yml", ".yaml", ".json")
MAX_HOSTS = 100_000
"""Ranges expand past any cluster we could boot; `node[0:99999999]` is refused, not built."""


@dataclass
class Group:
    name: str
    vars: dict[str, Any] = field(default_factory=dict)
    priority: int = 1
    parents: set[str] = field(default_factory=set)
    depth: int = 0


@dataclass
class AnsibleInventory:
    """The group graph and every host's own variables, before any cluster rule."""

    where: str
    base: Path | None
    groups: dict[str, Group] = field(default_factory=dict)
    host_vars: dict[str, dict[str, Any]] = field(default_factory=dict)
    host_groups: dict[str, set[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    files_read: list[Path] = field(default_factory=list)
    _ancestors: dict[str, frozenset[str]] = field(default_factory=dict)
    _vars_files: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    # -- building ------------------------------------------------------------------------

    def group(self, name: str) -> Group:
        if name not in self.groups:
            self.groups[name] = Group(name)
        return self.groups[name]

    def add_child(self, parent: str, child: str) -> None:
        if child == parent or child in self.ancestors(parent):
            self.problems.append(
                f"{self.where}: group '{child}': a child of '{parent}', which is already "
                f"below it (a recursive dependency loop; Ansible refuses it too)"
            )
            return
        self.groups[child].parents.add(parent)
        self._ancestors.clear()

    def add_host(self, name: str, group: str, port: int | None) -> None:
        if name not in self.host_vars:
            self.host_vars[name] = {"ansible_port": port} if port else {}
            self.host_groups[name] = set()
        self.host_groups[name].add(group)

    # -- reading ---------------------------------------------------------------------------

    def ancestors(self, group: str) -> frozenset[str]:
        """The group and every group above it."""
        found = self._ancestors.get(group)
        if found is None:
            seen = {group}
            stack = list(self.groups[group].parents) if group in self.groups else []
            while stack:
                g = stack.pop()
                if g not in seen:
                    seen.add(g)
                    stack.extend(self.groups[g].parents)
            found = self._ancestors[group] = frozenset(seen)
        return found

    def merged_vars(self, host: str) -> dict[str, Any]:
        """Ansible's precedence (module doc): later sources win, key by key."""
        names: set[str] = set()
        for name in self.host_groups[host]:
            names |= self.ancestors(name)
        names.discard("all")
        ordered = sorted(
            (self.groups[n] for n in names), key=lambda g: (g.depth, g.priority, g.name)
        )
        merged = dict(self.groups["all"].vars)
        for group in ordered:
            merged.update(group.vars)
        merged.update(self.vars_dir("group_vars", "all"))
        for group in ordered:
            merged.update(self.vars_dir("group_vars", group.name))
        merged.update(self.host_vars[host])
        merged.update(self.vars_dir("host_vars", host))
        return merged

    def vars_dir(self, subdir: str, name: str) -> dict[str, Any]:
        """`group_vars/<name>` or `host_vars/<name>` next to the inventory, merged in order."""
        key = (subdir, name)
        if key not in self._vars_files:
            self._vars_files[key] = self._read_vars_dir(subdir, name)
        return self._vars_files[key]

    def _read_vars_dir(self, subdir: str, name: str) -> dict[str, Any]:
        if self.base is None or name.startswith("/"):
            return {}
        folder = self.base / subdir
        if not folder.is_dir():
            return {}
        merged: dict[str, Any] = {}
        for path in _vars_files(folder / name):
            data = self._read_vars_file(path)
            merged.update(data)
        return merged

    def _read_vars_file(self, path: Path) -> dict[str, Any]:
        try:
            head = path.open("rb").read(14)
        except OSError as exc:
            self.problems.append(f"{path}: cannot read: {exc.strerror or exc}")
            return {}
        if head.startswith(b"$ANSIBLE_VAULT"):
            self.problems.append(
                f"{path}: vault-encrypted; cluster cannot decrypt it (keep the variables "
                "cluster uses in a plain file)"
            )
            return {}
        self.files_read.append(path)
        try:
            data = load_yaml(path)
        except YamlProblem as exc:
            loc = f"{path}:{exc.line}" if exc.line else str(path)
            self.problems.append(f"{loc}: {exc.message}")
            return {}
        if data is None or data == "":
            return {}  # Ansible ignores an empty file
        if not isinstance(data, Mapping):
            self.problems.append(
                f"{path}: expected a mapping of variables, got {type(data).__name__}"
            )
            return {}
        return {str(k): v for k, v in data.items()}


def _vars_files(stem: Path) -> list[Path]:
    """The first of `stem`, `stem.yml`, `stem.yaml`, `stem.json`; a folder is read whole."""
    for ext in VARS_EXTENSIONS:
        path = stem.with_name(stem.name + ext)
        if path.is_dir():
            return _folder_files(path)
        if path.exists():
            return [path]
    return []


def _folder_files(folder: Path) -> list[Path]:
    found: list[Path] = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or entry.name.endswith("~"):
            continue
        ext = entry.suffix
        if entry.is_dir() and not ext:
            found.extend(_folder_files(entry))
        elif entry.is_file() and ext in VARS_EXTENSIONS:
            found.append(entry)
    return found


# -- the file's group tree -----------------------------------------------------------------


def read_tree(data: Mapping[Any, Any], where: str, base: Path | None) -> AnsibleInventory:
    """The group graph of a parsed YAML inventory (every top-level key is a group)."""
    inv = AnsibleInventory(where=where, base=base)
    inv.group("all")
    for name, body in data.items():
        _parse_group(inv, str(name), body)
    for name, group in inv.groups.items():
        if name != "all" and not group.parents:
            group.parents.add("all")
    for groups in inv.host_groups.values():
        if groups <= {"all"}:
            inv.group("ungrouped").parents.add("all")
            groups.add("ungrouped")
    inv._ancestors.clear()
    _set_depths(inv)
    return inv


def _parse_group(inv: AnsibleInventory, name: str, body: Any) -> str:
    loc = f"{inv.where}: group '{name}'"
    if body is not None and not isinstance(body, Mapping):
        inv.problems.append(f"{loc}: expected a mapping, got {type(body).__name__}")
        return name
    group = inv.group(name)
    body = body or {}
    sections: dict[str, Mapping[Any, Any]] = {}
    for key, value in body.items():
        if key not in GROUP_KEYS:
            inv.problems.append(f"{loc}: unknown key '{key}' (a group has hosts, vars, children)")
            continue
        if isinstance(value, str):
            value = {value: None}  # Ansible: `hosts: spark-0` is `hosts: {spark-0: null}`
        if value is not None and not isinstance(value, Mapping):
            inv.problems.append(f"{loc}: {key} must be a mapping, got {type(value).__name__}")
            continue
        sections[key] = value or {}
    # In the file's order, as Ansible reads them: a host listed in `hosts` before a child group
    # that lists it again gets the child's values for the keys both set.
    for section, entries in sections.items():
        if section == "vars":
            _group_vars(inv, group, loc, entries)
        elif section == "children":
            for child, child_body in entries.items():
                if str(child) == "all":
                    inv.problems.append(f"{loc}: 'all' cannot be a child group (all holds all)")
                    continue
                inv.add_child(name, _parse_group(inv, str(child), child_body))
        else:
            for pattern, hvars in entries.items():
                _parse_hosts(inv, name, pattern, hvars)
    return name


def _group_vars(inv: AnsibleInventory, group: Group, loc: str, entries: Mapping[Any, Any]) -> None:
    for var, value in entries.items():
        if var == "ansible_group_priority":  # Ansible keeps it as the priority, not a variable
            try:
                group.priority = _strict_int(value)
            except ValueError:
                inv.problems.append(
                    f"{loc}: key 'ansible_group_priority': expected an integer, "
                    f"got {short_repr(value)}"
                )
        else:
            group.vars[str(var)] = value


def _parse_hosts(inv: AnsibleInventory, group: str, pattern: Any, hvars: Any) -> None:
    if not isinstance(pattern, str):
        inv.problems.append(
            f"{inv.where}: group '{group}': host {short_repr(pattern)} must be a string (quote it)"
        )
        return
    if hvars is not None and not isinstance(hvars, Mapping):
        inv.problems.append(f"{inv.where}: host '{pattern}': expected a mapping of variables")
        return
    try:
        names, port = expand_host_pattern(pattern)
    except ValueError as exc:
        inv.problems.append(f"{inv.where}: host '{pattern}': {exc}")
        return
    if len(inv.host_vars) + len(names) > MAX_HOSTS:
        inv.problems.append(f"{inv.where}: host '{pattern}': more than {MAX_HOSTS:,} hosts")
        return
    for host in names:
        inv.add_host(host, group, port)
        inv.host_vars[host].update({str(k): v for k, v in (hvars or {}).items()})


def _set_depths(inv: AnsibleInventory) -> None:
    """Depth: the longest path from `all` (Ansible pushes a group's depth down to children)."""
    done: dict[str, int] = {"all": 0}

    def depth(name: str, path: frozenset[str]) -> int:
        if name in done:
            return done[name]
        parents = [p for p in inv.groups[name].parents if p not in path]  # loops were refused
        d = max((depth(p, path | {name}) + 1 for p in parents), default=1)
        done[name] = d
        return d

    for name, group in inv.groups.items():
        group.depth = depth(name, frozenset())


def _strict_int(value: Any) -> int:
    if isinstance(value, bool | float):
        raise ValueError
    return int(value)


# -- host patterns -------------------------------------------------------------------------

_BRACKETED_PORT = re.compile(r"^\[(.+)\]:([0-9]+)$")
_HOST_PORT = re.compile(r"^((?:[^:\[\]]|\[[^\]]*\])*):([0-9]+)$")
_RANGE = r"\[(?:[a-z]:[a-z]|[0-9]+:[0-9]+)(?::[0-9]+)?\]"
_LABEL = rf"(?:\w|{_RANGE})(?:[\w-]|{_RANGE})*(?<![_-])"
_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$", re.IGNORECASE)


def expand_host_pattern(pattern: str) -> tuple[list[str], int | None]:
    """`node[0:7]` → node0 … node7; `name:2222` → port 2222 (Ansible's host patterns)."""
    host, port = pattern, None
    for regex in (_BRACKETED_PORT, _HOST_PORT):
        if m := regex.match(host):
            host, port = m.group(1), int(m.group(2))
    if port is not None and not (_HOSTNAME.match(host) or ":" in host):
        host, port = pattern, None  # not a host:port after all: Ansible keeps the whole name
    if not host:
        raise ValueError("an empty host name")
    return (expand_ranges(host) if "[" in host else [host]), port


def expand_ranges(name: str) -> list[str]:
    """Every `[begin:end(:step)]` in `name`, expanded left to right."""
    head, _, rest = name.partition("[")
    spec, closed, tail = rest.partition("]")
    if not closed:
        raise ValueError("host range must be begin:end or begin:end:step")
    bounds = spec.split(":")
    if len(bounds) not in (2, 3):
        raise ValueError("host range must be begin:end or begin:end:step")
    begin, end = bounds[0] or "0", bounds[1]
    if not end:
        raise ValueError("host range must specify end value")
    try:
        step = int(bounds[2]) if len(bounds) == 3 else 1
    except ValueError:
        raise ValueError(f"host range step {bounds[2]!r} is not a number") from None
    if step <= 0:
        raise ValueError("host range step must be positive")
    width = len(begin) if begin[0] == "0" and len(begin) > 1 else 0
    if width and width != len(end):
        raise ValueError("host range must specify equal-length begin and end formats")
    letters = string.ascii_letters
    items: list[str]
    if begin in letters and end in letters and len(begin) == len(end) == 1:
        if letters.index(begin) > letters.index(end):
            raise ValueError("host range must have begin <= end")
        items = list(letters[letters.index(begin) : letters.index(end) + 1 : step])
    else:
        try:
            lo, hi = int(begin), int(end)
        except ValueError:
            raise ValueError(f"host range [{spec}] is neither numeric nor one letter") from None
        if (hi - lo) // step + 1 > MAX_HOSTS:
            raise ValueError(f"host range [{spec}] expands to more than {MAX_HOSTS:,} hosts")
        items = [str(i).zfill(width) for i in range(lo, hi + 1, step)]
    out: list[str] = []
    for item in items:
        expanded = f"{head}{item}{tail}"
        out.extend(expand_ranges(expanded) if "[" in expanded else [expanded])
        if len(out) > MAX_HOSTS:
            raise ValueError(f"expands to more than {MAX_HOSTS:,} hosts")
    return out
