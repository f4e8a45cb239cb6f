"""What one node is, as its probes describe it: the model preflight, the planners and
`inventory check` judge. Gathering it is `orchestrator/facts.py` (the edge); this is pure.
It lives with the probes whose answers it is made of (models/ holds no probe's type)."""

from __future__ import annotations

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.probes.clock import ClockSample
from orchestrator.probes.containers import RunningContainer
from orchestrator.probes.disk import CopyFacts, DiskUsage, WeightsDir
from orchestrator.probes.gpu import GpuInfo
from orchestrator.probes.host import HostInfo
from orchestrator.probes.image import ImageFacts
from orchestrator.probes.interfaces import Interface, find_interface
from orchestrator.probes.meminfo import MemInfo
from orchestrator.probes.peers import PeerResult
from orchestrator.probes.rdma import RdmaInfo
from orchestrator.probes.runtime import DockerInfo
from orchestrator.probes.sockets import ListeningSocket


class NodeFacts(StrictModel):
    """One node as its probes describe it. A None field: not asked, or the probe failed
    (then `errors[probe]` says why)."""

    node: str
    rank: int
    address: str = Field(description="the inventory's ansible_host (management address)")
    reachable: bool
    errors: dict[str, str] = Field(default_factory=dict, description="probe name -> why")
    host: HostInfo | None = None
    memory: MemInfo | None = None
    interfaces: tuple[Interface, ...] | None = None
    rdma: RdmaInfo | None = None
    gpu: GpuInfo | None = None
    docker: DockerInfo | None = None
    containers: tuple[RunningContainer, ...] | None = None
    listening: tuple[ListeningSocket, ...] | None = None
    disks: tuple[DiskUsage, ...] | None = None
    weights: WeightsDir | None = None
    weights_copy: CopyFacts | None = None
    image: ImageFacts | None = None
    clock: ClockSample | None = None
    peers: tuple[PeerResult, ...] | None = None

    def interface(self, name: str) -> Interface | None:
        return find_interface(self.interfaces or (), name)

    def disk(self, path: str) -> DiskUsage | None:
        return next((d for d in self.disks or () if d.path == path), None)
