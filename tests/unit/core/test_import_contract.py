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
    "orchestrator.launch",
    "orchestrator.rendezvous",
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
    "orchestrator.boot",
    "orchestrator.status",
    "orchestrator.stop",
    "orchestrator.runctx",
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
    "orchestrator.watch",
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
        "orchestrator.launch": "from orchestrator.transport.ssh import SshTransport\n",
        "orchestrator.models.run": "def f():\n    import asyncssh\n",
        "orchestrator.probes.host": "from ..facts import gather_facts\n",
        "orchestrator.cli.main": "from orchestrator.facts import gather_facts\n",  # edge: fine
    }
    assert violations(sneaky) == [
        "orchestrator.launch -> orchestrator.transport.ssh",
        "orchestrator.launch -> orchestrator.transport.ssh.SshTransport",
        "orchestrator.models.run -> asyncssh",
        "orchestrator.probes.host -> orchestrator.facts",
        "orchestrator.probes.host -> orchestrator.facts.gather_facts",
    ]


def test_every_module_named_in_the_contract_exists() -> None:
    modules = {_module(p) for p in PACKAGE.rglob("*.py")}
    for name in (*CORE, *EDGE):
        if name.startswith("orchestrator."):
            assert any(_under(m, (name,)) for m in modules), name
