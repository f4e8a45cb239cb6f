"""`uname -n -r -m`: the node's hostname, kernel release and machine architecture.

`uname` prints the fields in its own fixed order (nodename, kernel release, machine) whatever
the order of the options. The machine name is the kernel's (`aarch64`, `x86_64`); `platform` is
the same thing as Docker and OCI spell it (`linux/arm64`, `linux/amd64`), which is what image
selection compares against.
"""

from __future__ import annotations

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.probes.base import Probe, excerpt, fail

NAME = "host"

# Kernel machine name -> OCI/GOARCH architecture where the two differ. Anything else (`arm64`
# as some kernels print it, `amd64`, `riscv64`) passes through unchanged.
_OCI_ARCH = {"aarch64": "arm64", "x86_64": "amd64"}


class HostInfo(StrictModel):
    """Who a node says it is."""

    hostname: str = Field(min_length=1)
    kernel: str = Field(min_length=1, description="kernel release, e.g. 6.17.0-1008-nvidia")
    arch: str = Field(min_length=1, description="kernel machine name: aarch64, x86_64")
    platform: str = Field(min_length=1, description="OCI platform: linux/arm64, linux/amd64")


def oci_arch(machine: str) -> str:
    """`aarch64` -> `arm64`, `x86_64` -> `amd64`; other names are returned as they are."""
    return _OCI_ARCH.get(machine, machine)


def parse_uname(stdout: str) -> HostInfo:
    """`uname -n -r -m` -> `HostInfo`."""
    words = stdout.split()
    if len(words) != 3:
        raise fail(NAME, f"expected `hostname kernel machine`, got {excerpt(stdout)!r}")
    hostname, kernel, machine = words
    return HostInfo(
        hostname=hostname, kernel=kernel, arch=machine, platform=f"linux/{oci_arch(machine)}"
    )


HOST: Probe[HostInfo] = Probe(name=NAME, argv=("uname", "-n", "-r", "-m"), parse=parse_uname)
