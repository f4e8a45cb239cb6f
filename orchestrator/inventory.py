"""Read an Ansible YAML inventory with Ansible's semantics, and validate the cluster's keys.

The same file drives `ansible-playbook`, so we follow Ansible where it has an opinion:

* hosts live under `all.hosts` or `<group>.hosts` at any depth of `children`; top-level groups
  other than `all` are children of `all`;
* variables merge `all.vars` < parent group vars < child group vars (by depth, then
  `ansible_group_priority`, then name) < host vars;
* `ansible_host` (else the host name), `ansible_port` (22), `ansible_user` (else the current
  user, as Ansible does), `ansible_ssh_private_key_file`.

Every problem is reported as one line naming file, host and key; all of them at once.
"""

from __future__ import annotations

import difflib
import getpass
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.errors import InventoryError
from orchestrator.models.inventory import (
    CLUSTER_VAR_NAMES,
    HOST_VAR_NAMES,
    ClusterVars,
    HostVars,
    Inventory,
    Node,
)
from orchestrator.paths import builtin_simulated_inventory
from orchestrator.yamlio import YamlProblem, load_yaml

GROUP_KEYS = frozenset({"hosts", "vars", "children"})
INVENTORY_ENV = "CLUSTER_INVENTORY"


@dataclass
class _Group:
    name: str
    depth: int
    priority: int
    vars: dict[str, Any]
    parents: set[str] = field(default_factory=set)


@dataclass
class _Walk:
    """What the group tree says, before any cluster rule is applied."""

    groups: dict[str, _Group] = field(default_factory=dict)
    host_groups: dict[str, set[str]] = field(default_factory=dict)
    host_vars: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def resolve_inventory_path(explicit: str | Path | None) -> tuple[Path, str]:
    """`-i/--inventory`, else `$CLUSTER_INVENTORY`, else the built-in simulated cluster.

    Returns the path and a one-line note saying which source chose it.
    """
    if explicit:
        return Path(explicit), f"inventory {explicit} (from --inventory)"
    env = os.environ.get(INVENTORY_ENV)
    if env:
        return Path(env), f"inventory {env} (from ${INVENTORY_ENV})"
    path = builtin_simulated_inventory()
    return path, "inventory: the built-in simulated 8-node cluster (pass -i to use your own)"


def load_inventory(path: str | Path) -> Inventory:
    """Load and validate; raises one `InventoryError` carrying every problem found."""
    path = Path(path)
    where = str(path)
    if not path.exists():
        raise InventoryError(
            "no such file", where=where, hint="pass -i PATH or set $CLUSTER_INVENTORY"
        )
    try:
        raw_bytes = path.read_bytes()
        data = load_yaml(path)
    except YamlProblem as exc:
        loc = f"{where}:{exc.line}" if exc.line else where
        raise InventoryError(exc.message, where=loc) from exc
    if not isinstance(data, Mapping) or not data:
        raise InventoryError(
            "not an Ansible YAML inventory (expected a mapping with an `all` group)", where=where
        )

    walk = _walk_tree(data, where)
    if not walk.host_groups and not walk.problems:
        walk.problems.append(f"{where}: no hosts (expected all.hosts or all.children.*.hosts)")
    nodes, cluster_vars = _validate_hosts(walk, where)
    problems = walk.problems
    if not problems:
        problems.extend(_cluster_rules(nodes, where))
    if problems:
        raise InventoryError(problems[0], more=tuple(problems[1:]))
    assert cluster_vars is not None
    base = path.resolve().parent
    return Inventory(
        path=path.resolve(),
        sha256=hashlib.sha256(raw_bytes).hexdigest(),
        name=cluster_vars.cluster_name,
        connection=cluster_vars.cluster_connection,
        known_hosts=_resolve(base, cluster_vars.cluster_known_hosts),
        runs_dir=_resolve(base, cluster_vars.cluster_runs_dir),
        weights_root=cluster_vars.cluster_weights_root,
        nodes=tuple(sorted(nodes, key=lambda n: n.rank)),
    )


def _resolve(base: Path, value: str | None) -> Path | None:
    if value is None:
        return None
    p = Path(value).expanduser()
    return p if p.is_absolute() else base / p


def _walk_tree(data: Mapping[str, Any], where: str) -> _Walk:
    walk = _Walk()
    top = dict(data)
    all_group = top.pop("all", None) or {}
    # Ansible: a top-level group other than `all` is a child of `all`.
    if top:
        if not isinstance(all_group, Mapping):
            walk.problems.append(f"{where}: group 'all': expected a mapping")
            return walk
        children = dict(all_group.get("children") or {})
        children.update(top)
        all_group = {**all_group, "children": children}
    _visit(walk, "all", all_group, parent=None, depth=0, where=where)
    return walk


def _visit(
    walk: _Walk, name: str, body: Any, *, parent: str | None, depth: int, where: str
) -> None:
    if body is None:
        body = {}
    if not isinstance(body, Mapping):
        walk.problems.append(f"{where}: group '{name}': expected a mapping, got {_kind(body)}")
        return
    for key in body:
        if key not in GROUP_KEYS:
            walk.problems.append(
                f"{where}: group '{name}': unknown key '{key}' (a group has hosts, vars, children)"
            )
    gvars = body.get("vars") or {}
    if not isinstance(gvars, Mapping):
        walk.problems.append(f"{where}: group '{name}': vars must be a mapping")
        gvars = {}
    group = walk.groups.get(name)
    if group is None:
        priority = gvars.get("ansible_group_priority", 1)
        group = _Group(name, depth, priority if isinstance(priority, int) else 1, dict(gvars))
        walk.groups[name] = group
    else:  # the same group reached twice: Ansible merges, and its depth is the deepest path
        group.depth = max(group.depth, depth)
        group.vars.update(gvars)
    if parent:
        group.parents.add(parent)

    hosts = body.get("hosts") or {}
    if not isinstance(hosts, Mapping):
        walk.problems.append(f"{where}: group '{name}': hosts must be a mapping of name: vars")
        hosts = {}
    for host, hvars in hosts.items():
        host = str(host)
        if hvars is not None and not isinstance(hvars, Mapping):
            walk.problems.append(f"{where}: host '{host}': expected a mapping of variables")
            continue
        walk.host_groups.setdefault(host, set()).add(name)
        walk.host_vars.setdefault(host, {}).update(hvars or {})

    children = body.get("children") or {}
    if not isinstance(children, Mapping):
        walk.problems.append(f"{where}: group '{name}': children must be a mapping")
        return
    for child, child_body in children.items():
        _visit(walk, str(child), child_body, parent=name, depth=depth + 1, where=where)


def _kind(value: Any) -> str:
    return type(value).__name__


def _ancestors(walk: _Walk, group: str) -> set[str]:
    seen: set[str] = set()
    stack = [group]
    while stack:
        g = stack.pop()
        if g in seen:
            continue
        seen.add(g)
        stack.extend(walk.groups[g].parents if g in walk.groups else ())
    return seen


def merged_vars(walk: _Walk, host: str) -> dict[str, Any]:
    """Ansible's precedence: shallow groups first, deeper groups override, host vars last."""
    groups: set[str] = {"all"}
    for g in walk.host_groups[host]:
        groups |= _ancestors(walk, g)
    ordered = sorted(
        (walk.groups[g] for g in groups if g in walk.groups),
        key=lambda g: (g.depth, g.priority, g.name),
    )
    merged: dict[str, Any] = {}
    for group in ordered:
        merged.update(group.vars)
    merged.update(walk.host_vars[host])
    return merged


def _validate_hosts(walk: _Walk, where: str) -> tuple[list[Node], ClusterVars | None]:
    nodes: list[Node] = []
    cluster_seen: dict[str, tuple[str, Any]] = {}
    cluster_vars: ClusterVars | None = None
    for host in walk.host_groups:
        merged = merged_vars(walk, host)
        loc = f"{where}: host '{host}'"
        mine = {k: v for k, v in merged.items() if k in HOST_VAR_NAMES}
        ours = {k: v for k, v in merged.items() if k.startswith("cluster_")}
        extra = {k: v for k, v in merged.items() if k not in mine and k not in ours}

        for key in ours:
            if key not in CLUSTER_VAR_NAMES:
                # `cluster_rnak`: a host variable given the cluster prefix by mistake.
                bare = key.removeprefix("cluster_")
                hint = _suggest(bare, HOST_VAR_NAMES) or _suggest(key, CLUSTER_VAR_NAMES)
                walk.problems.append(
                    f"{loc}: key '{key}': unknown cluster variable{hint}"
                    f" (known: {', '.join(sorted(CLUSTER_VAR_NAMES))})"
                )
        for key in extra:
            if not key.startswith("ansible_") and (hint := _suggest(key, HOST_VAR_NAMES)):
                walk.problems.append(f"{loc}: key '{key}': unknown host variable{hint}")

        known_ours = {k: v for k, v in ours.items() if k in CLUSTER_VAR_NAMES}
        for key, value in known_ours.items():
            first = cluster_seen.setdefault(key, (host, value))
            if first[1] != value:
                walk.problems.append(
                    f"{loc}: key '{key}': differs from host '{first[0]}' "
                    "(cluster_* variables are cluster-wide)"
                )
        try:
            cv = ClusterVars.model_validate(known_ours)
            cluster_vars = cluster_vars or cv
        except ValidationError as exc:
            walk.problems.extend(_pydantic_lines(loc, exc))
        try:
            hv = HostVars.model_validate(mine)
        except ValidationError as exc:
            walk.problems.extend(_pydantic_lines(loc, exc))
            continue
        node = _node(host, hv, extra, loc, walk.problems)
        if node is not None:
            nodes.append(node)
    return nodes, cluster_vars if cluster_vars is not None else ClusterVars()


def _node(
    host: str, hv: HostVars, extra: dict[str, Any], loc: str, problems: list[str]
) -> Node | None:
    port_raw = extra.get("ansible_port", 22)
    try:
        port = int(port_raw)
        if not 0 < port < 65536:
            raise ValueError
    except (TypeError, ValueError):
        problems.append(f"{loc}: key 'ansible_port': expected a TCP port, got {port_raw!r}")
        return None
    key_file = extra.get("ansible_ssh_private_key_file") or extra.get("ansible_private_key_file")
    return Node(
        name=host,
        address=str(extra.get("ansible_host", host)),
        port=port,
        user=str(extra.get("ansible_user") or getpass.getuser()),
        private_key=Path(str(key_file)).expanduser() if key_file else None,
        rank=hv.rank,
        fabric_iface=hv.fabric_iface,
        mgmt_iface=hv.mgmt_iface,
        ib_hca=hv.ib_hca,
        docker_host=hv.docker_host,
        extra_vars=extra,
    )


def _suggest(key: str, names: frozenset[str]) -> str:
    close = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.75)
    return f" — did you mean '{close[0]}'?" if close else ""


def _pydantic_lines(loc: str, exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "?"
        msg = err["msg"]
        if err["type"] == "missing":
            msg = "required, missing"
        elif err["type"] == "extra_forbidden":
            msg = "unknown key"
        got = err.get("input")
        shown = f" (got {got!r})" if err["type"] != "missing" and not isinstance(got, dict) else ""
        lines.append(f"{loc}: key '{key}': {msg}{shown}")
    return lines


def _cluster_rules(nodes: list[Node], where: str) -> list[str]:
    """Ranks exactly 0..N-1 with rank 0 present; each (address, port) reached once."""
    problems: list[str] = []
    by_rank: dict[int, str] = {}
    for node in sorted(nodes, key=lambda n: n.name):
        if node.rank in by_rank:
            problems.append(
                f"{where}: host '{node.name}': key 'rank': rank {node.rank} is already "
                f"host '{by_rank[node.rank]}' (ranks must be unique)"
            )
        else:
            by_rank[node.rank] = node.name
    n = len(nodes)
    if 0 not in by_rank:
        problems.append(f"{where}: no host has rank 0 (rank 0's node is the head)")
    for node in nodes:
        if node.rank >= n:
            problems.append(
                f"{where}: host '{node.name}': key 'rank': {node.rank} is out of range "
                f"for {n} hosts (ranks are 0..{n - 1})"
            )
    missing = sorted(set(range(n)) - set(by_rank))
    if missing and not problems:
        problems.append(f"{where}: ranks {missing} are missing (ranks are 0..{n - 1})")
    by_addr: dict[tuple[str, int], str] = {}
    for node in nodes:
        other = by_addr.setdefault((node.address, node.port), node.name)
        if other != node.name:
            problems.append(
                f"{where}: host '{node.name}': key 'ansible_host': {node.address}:{node.port} "
                f"is also host '{other}' (each node needs its own address and port)"
            )
    return problems
