"""Containers already running on a node, and the memory each holds.

Seed 001: another model was still being served on the node and had to be stopped first. On a
GB10 the GPU and the CPU share one 128 GB pool, so a forgotten container holding tens of GB
starves the new boot in a way nvidia-smi cannot show. Preflight names every running container
with its memory (`docker stats`), and rank containers of an earlier `cluster` run by their
`cluster.run` label.

One constant script: `docker ps` as JSON lines, then, only when something runs (`docker stats`
samples for about a second), a `--- stats` marker and `docker stats --no-stream` as JSON lines.
The docker client (with the node's `--host`) arrives as the script's arguments, never pasted
into its text.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import Field

from orchestrator.dockercli import DockerCli
from orchestrator.models.base import StrictModel
from orchestrator.probes.base import Probe, excerpt, fail, parse_json

NAME = "containers"
STATS_MARK = "--- stats"

SCRIPT = f""""$@" ps --no-trunc --format '{{{{json .}}}}' || exit $?
ids=$("$@" ps -q) || exit $?
[ -n "$ids" ] || exit 0
echo '{STATS_MARK}'
"$@" stats --no-stream --no-trunc --format '{{{{json .}}}}' $ids
"""

_UNITS = {
    "b": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


class RunningContainer(StrictModel):
    """One running container as `docker ps` and `docker stats` see it."""

    id: str = Field(min_length=1)
    name: str
    image: str
    status: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    memory_bytes: int | None = Field(default=None, description="docker stats MemUsage, in bytes")

    @property
    def cluster_run(self) -> str | None:
        """The `cluster.run` label: a rank container started by `cluster`."""
        return self.labels.get("cluster.run")


def parse_size(text: str) -> int:
    """`1.5GiB` -> 1610612736, `12MB` -> 12000000 (Docker prints both unit families)."""
    match = _SIZE.match(text)
    if match is None or match.group(2).lower() not in _UNITS:
        raise fail(NAME, f"not a size: {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_labels(text: str) -> dict[str, str]:
    """`docker ps`'s `a=b,c=d` -> {"a": "b", "c": "d"} (a value without `=` maps to "")."""
    labels: dict[str, str] = {}
    for item in text.split(","):
        if not item:
            continue
        key, _, value = item.partition("=")
        labels[key] = value
    return labels


def _json_line(line: str, number: int) -> dict[str, Any]:
    doc = parse_json(NAME, line, f"line {number} is ")
    if not isinstance(doc, dict):
        raise fail(NAME, f"line {number} is not a JSON object: {excerpt(line)!r}")
    return doc


def parse_containers(stdout: str) -> tuple[RunningContainer, ...]:
    """The output of `SCRIPT` -> the running containers, with memory when stats came back."""
    ps: list[dict[str, Any]] = []
    memory: dict[str, int] = {}
    in_stats = False
    for number, raw in enumerate(stdout.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line == STATS_MARK:
            in_stats = True
            continue
        doc = _json_line(line, number)
        if in_stats:
            usage = str(doc.get("MemUsage", ""))
            ident = str(doc.get("ID") or doc.get("Container") or "")
            if usage and ident:
                memory[ident] = parse_size(usage.split("/")[0])
        else:
            ps.append(doc)
    found = []
    for doc in ps:
        ident = str(doc.get("ID") or "")
        if not ident:
            raise fail(NAME, f"a docker ps entry has no ID: {excerpt(json.dumps(doc))!r}")
        mem = memory.get(ident)
        if mem is None:  # stats may print a short ID
            mem = next((v for k, v in memory.items() if ident.startswith(k)), None)
        found.append(
            RunningContainer(
                id=ident,
                name=str(doc.get("Names", "")),
                image=str(doc.get("Image", "")),
                status=str(doc.get("Status", "")),
                labels=parse_labels(str(doc.get("Labels", ""))),
                memory_bytes=mem,
            )
        )
    return tuple(found)


def containers_probe(docker: DockerCli) -> Probe[tuple[RunningContainer, ...]]:
    """The running containers of the daemon `docker` is aimed at, with their memory."""
    return Probe(name=NAME, argv=("sh", "-c", SCRIPT, "sh", *docker.base), parse=parse_containers)
