"""An image or weights push reaches the nodes with its caller's whole ConnectOptions. Both pushes
used to rebuild them from the connect timeout alone, so a boot's host-key policy, keepalives and
channel budget were dropped for the push while preflight and the ranks used them."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

import orchestrator.images
import orchestrator.transport.pool
from orchestrator.images import PushOptions, push_image
from orchestrator.models.inventory import Inventory, Node
from orchestrator.recipes import resolve_recipe
from orchestrator.run.boot import BootOptions, QuietUI, ensure_image
from orchestrator.runstore import RunStore
from orchestrator.transport import Transport
from orchestrator.transport.base import ConnectOptions
from orchestrator.weights.model import WeightsOptions
from orchestrator.weights.push import push_weights
from tests.fake_transport import FakeReply, FakeTransport
from tests.inventories import inventory_of
from tests.weights_model import make_model

INVENTORY = inventory_of(
    *(
        Node(name=f"n{i}", address=f"198.18.0.{10 + i}", user="u", rank=i, fabric_iface="lo")
        for i in range(2)
    )
)
# Nothing a default would give: a test that passed the defaults through would fail.
CALLERS = ConnectOptions(
    connect_timeout_s=7.0, accept_new_host_keys=True, keepalive_interval_s=3.0, channel_budget=3
)


def _nothing_there(argv: tuple[str, ...], stdin: bytes | None) -> FakeReply:
    return FakeReply(exit_status=127, stderr="not found\n")


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[ConnectOptions]:
    """The ConnectOptions each node's transport was made with."""
    got: list[ConnectOptions] = []

    def transport_for(inventory: Inventory, node: Node, options: ConnectOptions) -> Transport:
        got.append(options)
        return FakeTransport(node, _nothing_there)

    monkeypatch.setattr(orchestrator.transport.pool, "transport_for", transport_for)
    return got


async def test_an_image_push_opens_every_node_with_the_callers_connect_options(
    seen: list[ConnectOptions],
) -> None:
    # The nodes answer nothing useful, so the push fails; only how it connected matters here.
    with contextlib.suppress(Exception):
        await push_image(INVENTORY, "img:1", options=PushOptions(connect=CALLERS))
    assert seen == [CALLERS, CALLERS]
    assert PushOptions(connect=CALLERS).connect_timeout_s == 7.0


async def test_a_weights_push_opens_every_node_with_the_callers_connect_options(
    seen: list[ConnectOptions], tmp_path: Path
) -> None:
    model = make_model(tmp_path / "org" / "m", shards=1, shard_bytes=1 << 16)
    with contextlib.suppress(Exception):
        await push_weights(
            INVENTORY, model, dest="/models/m", options=WeightsOptions(connect=CALLERS)
        )
    assert seen == [CALLERS, CALLERS]


async def test_a_boots_image_push_takes_the_boots_connect_options(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    asked: list[PushOptions] = []

    async def push(inventory: Inventory, reference: str, **kw: Any) -> Any:
        asked.append(kw["options"])
        raise RuntimeError("stop here")

    monkeypatch.setattr(orchestrator.images, "push_image", push)
    run = RunStore(tmp_path / "runs").create()
    recipe = resolve_recipe("mistral-large4-8x-sglang")
    with pytest.raises(RuntimeError, match="stop here"):
        await ensure_image(run, QuietUI(), recipe, INVENTORY, BootOptions(connect=CALLERS))
    assert [o.connect for o in asked] == [CALLERS]
