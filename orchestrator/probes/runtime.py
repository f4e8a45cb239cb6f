"""`docker info --format '{{json .}}'`: the daemon's runtimes (`nvidia`?), data root and driver.

`--gpus all` and `--runtime=nvidia` need the NVIDIA Container Toolkit registered with the daemon
(`nvidia-ctk runtime configure --runtime=docker`); it shows as a `nvidia` entry in `Runtimes`.
The data root (`DockerRootDir`) is where a loaded image lands, so free disk is measured there
(`probes/disk.py`). The storage driver tells overlay2 from the containerd image store
(`io.containerd.snapshotter.v1`), whose image Ids differ (sparkrun#152).

A daemon that does not answer is an answer too: Docker 20.10's client prints
`{"ServerErrors": ["Cannot connect ..."]}` and exits 0; Docker 28's prints the empty server
fields, exits 1 and says why on stderr (both captured in
`tests/fixtures/fabric_probes/docker_info/`).
Either way the result is `DockerInfo(reachable=False, error=...)`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from orchestrator.dockercli import DockerCli
from orchestrator.errors import tail
from orchestrator.models.base import StrictModel
from orchestrator.probes.base import Probe, excerpt, fail, parse_json

NAME = "docker_info"


class DockerInfo(StrictModel):
    """What the daemon on one node says about itself."""

    reachable: bool
    error: str | None = Field(default=None, description="why the daemon did not answer")
    server_version: str | None = None
    root_dir: str | None = Field(default=None, description="DockerRootDir: where images live")
    driver: str | None = Field(default=None, description="storage driver: overlay2, overlayfs, …")
    runtimes: tuple[str, ...] = Field(default=(), description="registered OCI runtimes")
    default_runtime: str | None = None
    containers_running: int | None = None
    mem_total: int | None = Field(default=None, description="bytes, as the daemon sees them")
    ncpu: int | None = None
    architecture: str | None = None
    os: str | None = Field(default=None, description="OperatingSystem, e.g. Ubuntu 24.04.3 LTS")
    name: str | None = Field(default=None, description="the daemon host's name")

    @property
    def nvidia_runtime(self) -> bool:
        return "nvidia" in self.runtimes


def _str(doc: dict[str, Any], key: str) -> str | None:
    value = doc.get(key)
    return value if isinstance(value, str) and value else None


def _int(doc: dict[str, Any], key: str) -> int | None:
    value = doc.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_docker_info(stdout: str, stderr: str = "") -> DockerInfo:
    """The JSON of `docker info --format '{{json .}}'` -> `DockerInfo`."""
    doc = parse_json(NAME, stdout)
    if not isinstance(doc, dict):
        raise fail(NAME, f"expected a JSON object, got {excerpt(stdout)!r}")
    errors = doc.get("ServerErrors") or []
    version = _str(doc, "ServerVersion")
    if errors or version is None:
        why = "; ".join(str(e) for e in errors) or tail(stderr, 1).strip()
        return DockerInfo(reachable=False, error=why or "the docker daemon did not answer")
    runtimes = doc.get("Runtimes")
    return DockerInfo(
        reachable=True,
        server_version=version,
        root_dir=_str(doc, "DockerRootDir"),
        driver=_str(doc, "Driver"),
        runtimes=tuple(sorted(runtimes)) if isinstance(runtimes, dict) else (),
        default_runtime=_str(doc, "DefaultRuntime"),
        containers_running=_int(doc, "ContainersRunning"),
        mem_total=_int(doc, "MemTotal"),
        ncpu=_int(doc, "NCPU"),
        architecture=_str(doc, "Architecture"),
        os=_str(doc, "OperatingSystem"),
        name=_str(doc, "Name"),
    )


def docker_info_down(exit_status: int | None, stdout: str, stderr: str) -> DockerInfo | None:
    """Docker 28's client: exit 1, the empty server fields as JSON, the reason on stderr."""
    if exit_status == 1 and stdout.strip().startswith("{"):
        return parse_docker_info(stdout, stderr)
    return None


def docker_info_probe(docker: DockerCli) -> Probe[DockerInfo]:
    """`docker info` of the daemon `docker` is aimed at."""
    return Probe(
        name=NAME,
        argv=docker("info", "--format", "{{json .}}"),
        parse=parse_docker_info,
        on_failure=docker_info_down,
    )
