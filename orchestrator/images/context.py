"""What every step of one push shares (`ChainContext`), and how they call the chain script
(`images_chain.sh`, package data): its argv, its common arguments, a node on its command line."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from orchestrator.images.known_hosts import chain_known_hosts
from orchestrator.images.model import Compression, EventSink, PushOptions
from orchestrator.models.inventory import Inventory, Node
from orchestrator.transport import Transport
from orchestrator.transport.pipe import PipeOptions


def chain_script() -> str:
    """The static shell script every node runs (package data)."""
    return resources.files("orchestrator").joinpath("images_chain.sh").read_text(encoding="utf-8")


def _quint(node: Node) -> list[str]:
    return [node.name, node.user, node.address, str(node.port), node.docker_host or "-"]


@dataclass(frozen=True)
class ChainKind:
    """What travels the chain: an image (`docker save` / `docker load`), or another payload whose
    node program replaces them (the script's `wchain`/`wsource` modes, e.g. a model's weights).
    `extra` follows IMAGE on the command line of the payload modes; the words name the two ends
    in a node's evidence."""

    prefix: str = ""
    extra: tuple[str, ...] = ()
    load_word: str = "docker load"
    save_word: str = "docker save"


IMAGE_KIND = ChainKind()


@dataclass
class ChainContext:
    """What every step of one push shares. The chain script, a fresh tag for the push's temporary
    names on the nodes, and the host keys its hops trust are made here, once per push."""

    inventory: Inventory
    options: PushOptions
    transports: dict[str, Transport]
    emit: EventSink
    started: float
    reference: str = ""
    kind: ChainKind = IMAGE_KIND
    # Opens a fresh source stream for a later fan-out wave (default: the image's `_open_source`).
    opener: Callable[[ChainContext, Any], Awaitable[Any]] | None = None
    # Diff ids the controller's source stream leaves out this round (the layer plan), and where
    # the filter writes what it kept and dropped.
    drop: tuple[str, ...] = ()
    filter_report: Path | None = None
    script: str = field(init=False, default_factory=chain_script)
    tag_base: str = field(init=False, default_factory=lambda: secrets.token_hex(6))
    known_hosts_text: str = field(init=False)

    def __post_init__(self) -> None:
        self.known_hosts_text = chain_known_hosts(self.inventory)

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
        if mode in ("chain", "source") and self.kind.prefix:
            # the payload's extra arguments follow the seven common ones (IMAGE is the 7th)
            mode, args = self.kind.prefix + mode, [*args[:7], *self.kind.extra, *args[7:]]
        return ["sh", "-c", self.script, "cluster-image", self.script, mode, *args]


def _alive(stall_s: float) -> tuple[int, int]:
    """ServerAliveInterval/CountMax whose product is about the stall timeout."""
    count = 3
    return max(1, round(stall_s / count)), count
