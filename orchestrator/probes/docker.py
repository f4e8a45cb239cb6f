"""`docker version --format '{{json .}}'`: is Docker there, is its daemon up, what platform is it.

The daemon's platform decides which image variant a node can run (`linux/arm64` on a Spark).

When the client cannot reach the daemon, `docker version` still prints the client half as JSON
(`"Server":null`) and exits 1 with `Cannot connect to the Docker daemon at ...` on stderr
(captured: `tests/fixtures/probes/docker_version/client-only-daemon-down.*`). That is an answer,
not a broken probe: `docker_version_probe` returns a `DockerVersion` with `server_version=None`
and the daemon's complaint in `server_error`, so preflight can say "docker daemon down on node
X" instead of "probe failed". Output that is not the client's JSON still raises `ProbeParseError`
(for instance `docker: command not found`).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.dockercli import DockerCli
from orchestrator.errors import tail
from orchestrator.probes.base import Probe, excerpt, fail

NAME = "docker_version"


class DockerVersion(BaseModel):
    """The Docker client on a node and, when reachable, its daemon."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    client_version: str = Field(min_length=1)
    server_version: str | None = Field(default=None, description="None: daemon not reachable")
    api_version: str = Field(description="the daemon's API version, else the client's")
    os: str = Field(description="the daemon's OS, else the client's (GOOS: linux)")
    arch: str = Field(description="the daemon's arch, else the client's (GOARCH: arm64, amd64)")
    containerd_version: str | None = Field(default=None, description="from the daemon's components")
    server_error: str | None = Field(default=None, description="why the daemon did not answer")

    @property
    def reachable(self) -> bool:
        return self.server_version is not None

    @property
    def platform(self) -> str:
        """The OCI platform of the daemon (or of the client when the daemon is down)."""
        return f"{self.os}/{self.arch}"


def _text(section: dict[str, Any], key: str, where: str) -> str:
    value = section.get(key)
    if not isinstance(value, str) or not value:
        raise fail(NAME, f"{where}.{key} is missing or not a string")
    return value


def _containerd(server: dict[str, Any]) -> str | None:
    for component in server.get("Components") or []:
        if isinstance(component, dict) and component.get("Name") == "containerd":
            version = component.get("Version")
            return version if isinstance(version, str) else None
    return None


def parse_docker_version(stdout: str, server_error: str | None = None) -> DockerVersion:
    """The JSON of `docker version --format '{{json .}}'` -> `DockerVersion`."""
    try:
        document = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise fail(NAME, f"not JSON ({exc.msg}): {excerpt(stdout)!r}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("Client"), dict):
        raise fail(NAME, f"no Client section: {excerpt(stdout)!r}")
    client: dict[str, Any] = document["Client"]
    server = document.get("Server")
    if server is not None and not isinstance(server, dict):
        raise fail(NAME, f"Server is neither an object nor null: {excerpt(stdout)!r}")
    answering = server if server else client
    where = "Server" if server else "Client"
    return DockerVersion(
        client_version=_text(client, "Version", "Client"),
        server_version=_text(server, "Version", "Server") if server else None,
        api_version=_text(answering, "ApiVersion", where),
        os=_text(answering, "Os", where),
        arch=_text(answering, "Arch", where),
        containerd_version=_containerd(server) if server else None,
        server_error=None if server else server_error,
    )


def _daemon_unreachable(exit_status: int | None, stdout: str, stderr: str) -> DockerVersion | None:
    """Exit 1 with the client's JSON on stdout: the client works, the daemon did not answer."""
    if exit_status != 1 or not stdout.strip().startswith("{"):
        return None
    complaint = tail(stderr, 1).strip() or "the docker daemon did not answer"
    return parse_docker_version(stdout, server_error=complaint)


def docker_version_probe(docker: DockerCli) -> Probe[DockerVersion]:
    """`docker version` of the client and of the daemon `docker` is aimed at."""
    return Probe(
        name=NAME,
        argv=docker("version", "--format", "{{json .}}"),
        parse=parse_docker_version,
        on_failure=_daemon_unreachable,
    )
