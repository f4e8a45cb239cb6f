"""The preflight's question about a node's staged copy (a `Probe`): the node program's `probe`
of the recipe's model.host_dir, read into `CopyFacts` (pure parse)."""

from __future__ import annotations

import json

from orchestrator.errors import ProbeParseError
from orchestrator.probes.base import Probe
from orchestrator.probes.disk import CopyFacts
from orchestrator.weights.manifest import manifest_of
from orchestrator.weights.program import node_program

NAME = "weights-copy"


def parse_copy(stdout: str) -> CopyFacts:
    try:
        doc = json.loads(stdout.strip().splitlines()[-1])
        assert isinstance(doc, dict)
    except (ValueError, IndexError, AssertionError):
        raise ProbeParseError("not the node program's JSON line", probe=NAME) from None
    manifest = manifest_of(doc.get("manifest"))
    files = doc.get("files") or {}
    return CopyFacts(
        dest=str(doc.get("dest", "")),
        manifest_id=manifest.id() if manifest is not None else None,
        model=manifest.model if manifest is not None else None,
        complete=bool(doc.get("complete")),
        total_bytes=manifest.total_bytes if manifest is not None else None,
        off={str(p): str(s) for p, s in files.items() if s != "held"},
    )


def copy_probe(dest: str) -> Probe[CopyFacts]:
    spec = json.dumps({"dest": dest}, separators=(",", ":"))
    return Probe(
        name=NAME,
        argv=("python3", "-c", node_program(), "probe", spec),
        parse=parse_copy,
    )
