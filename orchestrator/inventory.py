"""Load the inventory: Ansible's reading of the file, then the cluster's own rules.

`orchestrator/ansible_inventory.py` reads the YAML exactly as `ansible-inventory` does (groups,
host ranges, `group_vars/`, `host_vars/`, precedence); this module refuses what is not a YAML
inventory file with one line (a folder, a symlink loop, INI, a script, a vault), then checks
what `cluster` needs of the merged variables:

* `ansible_host` (else the host name), `ansible_port` (22; an integer 1-65535, never `true` or
  `2.5`), `ansible_user` (else the current user, as Ansible does),
  `ansible_ssh_private_key_file`; a Jinja `{{ }}` in one of these is refused (we do not
  evaluate templates, so we would use another address than Ansible);
* the cluster's host variables (`rank`, `fabric_iface`, …) and `cluster_*` variables, strictly;
* ranks exactly 0..N-1, each (address, port) once.

Every problem is reported as one line naming file, host and key; all of them at once.
"""

from __future__ import annotations

import difflib
import errno
import getpass
import hashlib
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.ansible_inventory import AnsibleInventory, read_tree
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
from orchestrator.yamlio import MAX_BYTES, YamlProblem, parse_yaml, short_repr

INVENTORY_ENV = "CLUSTER_INVENTORY"


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
    raw_bytes = _read_inventory_file(path)
    try:
        data = parse_yaml(_text(raw_bytes, where))
    except YamlProblem as exc:
        if _looks_like_ini(raw_bytes):
            raise _ini_refusal(where) from exc
        loc = f"{where}:{exc.line}" if exc.line else where
        raise InventoryError(exc.message, where=loc) from exc
    if not isinstance(data, Mapping) or not data:
        if _looks_like_ini(raw_bytes):
            raise _ini_refusal(where)
        raise InventoryError(
            "not an Ansible YAML inventory (expected a mapping with an `all` group)", where=where
        )
    if data.get("plugin"):
        raise InventoryError(
            f"an inventory plugin's configuration (plugin: {short_repr(data['plugin'])}), not "
            "a YAML inventory; cluster reads YAML inventories only",
            where=where,
            hint="write its hosts out with `ansible-inventory -i FILE --list --yaml --export`",
        )

    base = path.resolve().parent
    walk = read_tree(data, where, base)
    if not walk.host_groups and not walk.problems:
        walk.problems.append(f"{where}: no hosts (expected all.hosts or all.children.*.hosts)")
    nodes, cluster_vars = _validate_hosts(walk, where)
    problems = walk.problems
    if not problems:
        problems.extend(_cluster_rules(nodes, where))
    if problems:
        raise InventoryError(problems[0], more=tuple(problems[1:]))
    assert cluster_vars is not None
    known_hosts = _resolve(base, cluster_vars.cluster_known_hosts)
    if known_hosts is not None and (why := _not_known_hosts(known_hosts)):
        raise InventoryError(
            f"key 'cluster_known_hosts': {known_hosts} {why}",
            where=where,
            hint="name an OpenSSH known_hosts file (it may not exist yet with "
            "--accept-new-host-keys)",
        )
    digest = hashlib.sha256(raw_bytes)
    for vars_file in walk.files_read:  # group_vars/, host_vars/: part of what the nodes are
        digest.update(str(vars_file.relative_to(base)).encode() + b"\0" + vars_file.read_bytes())
    return Inventory(
        path=path.resolve(),
        sha256=digest.hexdigest(),
        name=cluster_vars.cluster_name,
        connection=cluster_vars.cluster_connection,
        known_hosts=known_hosts,
        runs_dir=_resolve(base, cluster_vars.cluster_runs_dir),
        weights_root=cluster_vars.cluster_weights_root,
        nodes=tuple(sorted(nodes, key=lambda n: n.rank)),
    )


def _not_known_hosts(path: Path) -> str | None:
    """Why `path` cannot be a known_hosts file, else None. A configuration mistake is exit 2
    before any node is asked, not every node's failure (exit 3)."""
    if path.is_dir():
        return "is a directory, not a known_hosts file"
    if not path.exists():
        return None
    try:
        with path.open("rb") as fh:
            head = fh.read(65536)
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    if b"\0" in head:
        return "is a binary file, not a known_hosts file"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not a character cut at the end of the sample
            return "is not text, not a known_hosts file"
    return None


def _read_inventory_file(path: Path) -> bytes:
    """The file's bytes, or one line saying why this is not an inventory file we read."""
    where = str(path)
    try:
        st = path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InventoryError("a symbolic link loop", where=where) from exc
        if path.is_symlink():
            raise InventoryError(
                f"a symbolic link to {os.readlink(path)}, which does not exist", where=where
            ) from exc
        if exc.errno == errno.ENOENT:
            raise InventoryError(
                "no such file", where=where, hint="pass -i PATH or set $CLUSTER_INVENTORY"
            ) from exc
        raise InventoryError(f"cannot read: {exc.strerror or exc}", where=where) from exc
    if stat.S_ISDIR(st.st_mode):
        raise InventoryError(
            "a directory; cluster reads one YAML inventory file (Ansible's inventory "
            "directories are not supported)",
            where=where,
            hint="pass the inventory file in it; its group_vars/ and host_vars/ are read",
        )
    if not stat.S_ISREG(st.st_mode):
        raise InventoryError("not a regular file", where=where)
    if st.st_size > MAX_BYTES:
        raise InventoryError(
            f"{st.st_size:,} bytes, more than {MAX_BYTES // 2**20} MiB; not an inventory",
            where=where,
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InventoryError(f"cannot read: {exc.strerror or exc}", where=where) from exc
    if data.startswith(b"#!"):
        raise InventoryError(
            "an inventory script; cluster reads YAML inventories only",
            where=where,
            hint="write its hosts out with `ansible-inventory -i FILE --list --yaml --export`",
        )
    if data.startswith(b"$ANSIBLE_VAULT"):
        raise InventoryError(
            "vault-encrypted; cluster cannot decrypt it",
            where=where,
            hint="keep the variables cluster uses in a plain file (group_vars/ may hold "
            "the encrypted rest)",
        )
    return data


def _text(data: bytes, where: str) -> str:
    if b"\0" in data:
        raise InventoryError("a binary file, not YAML text", where=where)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InventoryError("not UTF-8 text", where=where) from exc


_INI_SECTION = re.compile(rb"^\s*\[[^\]\n]+\]\s*$", re.MULTILINE)


def _looks_like_ini(data: bytes) -> bool:
    """An INI inventory: a `[group]` header alone on a line, or `host key=value` lines."""
    return bool(_INI_SECTION.search(data)) or bool(re.search(rb"^\S+\s+\w+=\S", data, re.MULTILINE))


def _ini_refusal(where: str) -> InventoryError:
    return InventoryError(
        "an INI inventory; cluster reads YAML inventories only",
        where=where,
        hint="convert it once: `ansible-inventory -i FILE --list --yaml --export > "
        "inventory.yaml` (Ansible reads the YAML just the same)",
    )


def _resolve(base: Path, value: str | None) -> Path | None:
    if value is None:
        return None
    p = Path(value).expanduser()
    return p if p.is_absolute() else base / p


def _validate_hosts(walk: AnsibleInventory, where: str) -> tuple[list[Node], ClusterVars | None]:
    nodes: list[Node] = []
    cluster_seen: dict[str, tuple[str, Any]] = {}
    cluster_vars: ClusterVars | None = None
    for host in walk.host_groups:
        merged = walk.merged_vars(host)
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
    for key in CONNECTION_VARS:
        if isinstance(extra.get(key), str) and "{{" in extra[key]:
            problems.append(
                f"{loc}: key '{key}': a Jinja template ({short_repr(extra[key])}); cluster does "
                "not evaluate templates, so write the value itself"
            )
            return None
    port_raw = extra.get("ansible_port", 22)
    port = _port(port_raw)
    if port is None:
        problems.append(
            f"{loc}: key 'ansible_port': expected a TCP port 1-65535, got {short_repr(port_raw)}"
        )
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


CONNECTION_VARS = (
    "ansible_host",
    "ansible_port",
    "ansible_user",
    "ansible_ssh_private_key_file",
    "ansible_private_key_file",
)


def _port(value: Any) -> int | None:
    """A TCP port from an integer or a string of digits; `true` and `2.5` are not ports
    (Python's int() would make them 1 and 2)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    if isinstance(value, str) and not value.strip().isdigit():
        return None
    port = int(value)
    return port if 0 < port < 65536 else None


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
        shown = (
            f" (got {short_repr(got)})"
            if err["type"] != "missing" and not isinstance(got, dict)
            else ""
        )
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
    if missing:
        problems.append(
            f"{where}: rank{'s' if len(missing) > 1 else ''} "
            f"{', '.join(map(str, missing[:20]))}{' …' if len(missing) > 20 else ''} "
            f"missing (ranks are 0..{n - 1}, one per host)"
        )
    by_addr: dict[tuple[str, int], str] = {}
    for node in nodes:
        other = by_addr.setdefault((node.address, node.port), node.name)
        if other != node.name:
            problems.append(
                f"{where}: host '{node.name}': key 'ansible_host': {node.address}:{node.port} "
                f"is also host '{other}' (each node needs its own address and port)"
            )
    return problems
