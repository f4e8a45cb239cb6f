"""The import contract of docs/architecture.md: the edge imports the core, never the reverse.

The core decides and is pure (models, probe parsers, plans, judges, reducers, dialects); the edge
acts (the CLI, transports, runtimes, run store, fan-outs that ask nodes, the boot's sequencing).
A core module that imports an edge module (at the top or inside a function) fails this test, so
a decision can always be tested with plain values, without SSH, Docker, a terminal or a disk.
A package's `__init__` that re-exports its edge side is edge itself, so it is not listed.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "orchestrator"

CORE = (
    "orchestrator.models",
    "orchestrator.probes",
    "orchestrator.dialects",
    "orchestrator.errors",
    "orchestrator.redact",
    "orchestrator.wording",
    "orchestrator.dockercli",
    "orchestrator.plan",
    "orchestrator.preflight.model",
    "orchestrator.preflight.judge",
    "orchestrator.preflight.checks",
    "orchestrator.supervisor.state",
    "orchestrator.supervisor.watchers",
    "orchestrator.supervisor.serving",
    "orchestrator.supervisor.restart",
    "orchestrator.supervisor.view",
    "orchestrator.images.model",
    "orchestrator.images.plan",
    "orchestrator.images.rounds",
    "orchestrator.postmortem.model",
    "orchestrator.postmortem.diagnose",
    "orchestrator.postmortem.exit_rules",
    "orchestrator.deadlines",
    "orchestrator.run_files",
    "orchestrator.kernel.read",
    "orchestrator.kernel.model",
)
"""Pure modules (and packages: every module below them but their `__init__`)."""

EDGE = (
    "asyncssh",
    "typer",
    "rich",
    "httpx",
    "psutil",
    "subprocess",
    "orchestrator.cli",
    "orchestrator.transport.ssh",
    "orchestrator.transport.local",
    "orchestrator.transport.pipe",
    "orchestrator.transport.pool",
    "orchestrator.facts",
    "orchestrator.fanout",
    "orchestrator.runstore",
    "orchestrator.runtime",
    "orchestrator.nccl_check",
    "orchestrator.check",
    "orchestrator.supervisor.supervise",
    "orchestrator.supervisor.follower",
    "orchestrator.preflight.runner",
    "orchestrator.preflight.reachability",
    "orchestrator.images.push",
    "orchestrator.images.chain",
    "orchestrator.images.nodes",
    "orchestrator.postmortem.collect",
    "orchestrator.kernel.collect",
    "orchestrator.kernel.hooks",
    "orchestrator.run",
)
"""What acts on the world: SSH, processes, terminals, HTTP, the disk of runs."""


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(source: str, module: str) -> set[str]:
    """Every module `source` imports, top level or inside functions (relative ones resolved)."""
    names: set[str] = set()
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base]) if base else ".".join(up)
            names.add(base)
            names |= {f"{base}.{a.name}" for a in node.names}
    return names


def violations(sources: dict[str, str]) -> list[str]:
    """`core module -> edge module` for every import that breaks the contract."""
    found = []
    for module, source in sorted(sources.items()):
        if not _under(module, CORE):
            continue
        for name in sorted(imported(source, module)):
            if _under(name, EDGE):
                found.append(f"{module} -> {name}")
    return found


def core_sources() -> dict[str, str]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        module = _module(path)
        if _under(module, CORE) and path.name != "__init__.py":
            out[module] = path.read_text()
    return out


def test_no_core_module_imports_the_edge() -> None:
    sources = core_sources()
    assert len(sources) > 40  # the list above still names real modules
    assert violations(sources) == []


def test_the_contract_catches_a_core_module_that_reaches_for_the_edge() -> None:
    sneaky = {
        "orchestrator.plan.launch": "from orchestrator.transport.ssh import SshTransport\n",
        "orchestrator.models.run": "def f():\n    import asyncssh\n",
        "orchestrator.probes.host": "from ..facts import gather_facts\n",
        "orchestrator.cli.main": "from orchestrator.facts import gather_facts\n",  # edge: fine
    }
    assert violations(sneaky) == [
        "orchestrator.models.run -> asyncssh",
        "orchestrator.plan.launch -> orchestrator.transport.ssh",
        "orchestrator.plan.launch -> orchestrator.transport.ssh.SshTransport",
        "orchestrator.probes.host -> orchestrator.facts",
        "orchestrator.probes.host -> orchestrator.facts.gather_facts",
    ]


def test_every_module_named_in_the_contract_exists() -> None:
    modules = {_module(p) for p in PACKAGE.rglob("*.py")}
    for name in (*CORE, *EDGE):
        if name.startswith("orchestrator."):
            assert any(_under(m, (name,)) for m in modules), name


def room_of(module: str) -> str | None:
    """The room a module stands in, as docs/architecture.md draws the house: a package below
    `orchestrator` (`orchestrator.run.boot` -> `run`) or a module standing alone at its top."""
    parts = module.split(".")
    if parts[0] != "orchestrator" or len(parts) < 2:
        return None
    return parts[1]


def _is_room(name: str) -> bool:
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()


def room_arrows(sources: dict[str, str]) -> dict[str, set[str]]:
    """room -> the other rooms it imports (top level or inside functions)."""
    arrows: dict[str, set[str]] = {}
    for module, source in sources.items():
        room = room_of(module)
        if room is None:
            continue
        for name in imported(source, module):
            other = room_of(name)
            if other is not None and other != room and _is_room(other):
                arrows.setdefault(room, set()).add(other)
    return arrows


def circle(arrows: dict[str, set[str]]) -> list[str]:
    """One circle of rooms (each imports the next, the last the first), or [] where none is."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(room: str) -> list[str]:
        state[room] = 1
        path.append(room)
        for other in sorted(arrows.get(room, ())):
            if state.get(other) == 1:
                return path[path.index(other) :]
            if other not in state and (found := visit(other)):
                return found
        path.pop()
        state[room] = 2
        return []

    for room in sorted(arrows):
        if room not in state and (found := visit(room)):
            return found
    return []


def all_sources() -> dict[str, str]:
    return {_module(p): p.read_text() for p in PACKAGE.rglob("*.py")}


def test_the_rooms_of_the_house_import_one_another_in_no_circle() -> None:
    """Issue 26: the floors are level. A room (a package or a lone module of orchestrator/) that
    imports, even inside a function, a room that imports it back would put one of them on a
    floor above what it needs; the plan and the run's lifecycle have rooms of their own, so
    `run` (boot, watch, status, stop, bench) stands above everything it sequences."""
    arrows = room_arrows(all_sources())
    assert {"plan", "run", "supervisor", "runstore"} <= set(arrows)  # the rooms are read
    assert circle(arrows) == []
    assert "run" not in set().union(*(v for k, v in arrows.items() if k not in ("cli", "run")))


def test_the_circle_check_names_a_circle_of_rooms() -> None:
    sources = {
        "orchestrator.supervisor.state": "from orchestrator.run.boot import boot\n",
        "orchestrator.run.boot": "from orchestrator.supervisor import state\n",
        "orchestrator.cli.main": "from orchestrator.run.boot import boot\n",
    }
    assert circle(room_arrows(sources)) == ["run", "supervisor"]
    del sources["orchestrator.supervisor.state"]
    assert circle(room_arrows(sources)) == []


def private_imports_across_rooms(sources: dict[str, str]) -> list[str]:
    """`module -> module.name` for every underscore name imported from another room."""
    found = []
    for module, source in sorted(sources.items()):
        room = room_of(module)
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.ImportFrom) and node.module):
                continue
            other = room_of(node.module)
            if other is None or other == room:
                continue
            found += [
                f"{module} -> {node.module}.{a.name}"
                for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__")
            ]
    return found


def test_no_room_imports_another_rooms_private_names() -> None:
    """Issue 26: what a room shares it names in public (weights/ pushes over images/' chain
    through run_round, check_hops, stop_round_leftovers, SourceStream, spawn_stream)."""
    assert private_imports_across_rooms(all_sources()) == []


def test_the_private_import_check_names_one() -> None:
    sources = {"orchestrator.weights.push": "from orchestrator.images.chain import _x, y\n"}
    assert private_imports_across_rooms(sources) == [
        "orchestrator.weights.push -> orchestrator.images.chain._x"
    ]
