"""What every step of one push shares (`_Ctx`), and how they call the chain script
(`images_chain.sh`, package data): its argv, its common arguments, a node on its command line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from orchestrator.images.model import Compression, EventSink, PushOptions
from orchestrator.models.inventory import Inventory, Node
from orchestrator.transport import Transport
from orchestrator.transport.pipe import PipeOptions


def chain_script() -> str:
    """The static shell script every node runs (package data)."""
    return resources.files("orchestrator").joinpath("images_chain.sh").read_text(encoding="utf-8")


def _quint(node: Node) -> list[str]:
    return [node.name, node.user, node.address, str(node.port), node.docker_host or "-"]


@dataclass
class _Ctx:
    inventory: Inventory
    reference: str
    options: PushOptions
    transports: dict[str, Transport]
    emit: EventSink
    started: float
    script: str
    tag_base: str
    known_hosts_text: str

    def node(self, name: str) -> Node:
        return self.inventory.node(name)

    def pipe_options(self) -> PipeOptions:
        ai, ac = _alive(self.options.stall_timeout_s)
        return PipeOptions(
            connect_timeout_s=self.options.connect_timeout_s, alive_interval_s=ai, alive_count=ac
        )

    def common(self, tag: str, compression: Compression, image: str = "-") -> list[str]:
        ai, ac = _alive(self.options.stall_timeout_s)
        return [
            tag,
            compression.value,
            str(max(1, round(self.options.connect_timeout_s))),
            str(ai),
            str(ac),
            self.known_hosts_text,
            image,
        ]

    def argv(self, mode: str, args: Sequence[str]) -> list[str]:
        return ["sh", "-c", self.script, "cluster-image", self.script, mode, *args]


def _alive(stall_s: float) -> tuple[int, int]:
    """ServerAliveInterval/CountMax whose product is about the stall timeout."""
    count = 3
    return max(1, round(stall_s / count)), count
