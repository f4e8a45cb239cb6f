"""How long a node has to answer the weights' probe: minutes when it re-hashes every file
(`--verify`), seconds otherwise, the same for `weights push` and `weights status`. A push used to
give a verifying probe 30 s (a large model's re-hash timed out as "unreachable") and a node cut
off mid-push 30 s to answer its re-probe whatever `--connect-timeout` said."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.models.inventory import Node
from orchestrator.transport.base import CommandResult, ConnectOptions
from orchestrator.weights.model import WeightsOptions
from orchestrator.weights.nodes import VERIFY_PROBE_S, probe_timeout_s
from orchestrator.weights.push import push_weights
from orchestrator.weights.status import weights_status
from tests.fake_transport import FakeReply, FakeTransport
from tests.inventories import inventory_of
from tests.weights_model import make_model

NODES = tuple(
    Node(name=f"n{i}", address=f"198.18.0.{10 + i}", user="u", rank=i, fabric_iface="lo")
    for i in range(2)
)
INVENTORY = inventory_of(*NODES)


@dataclass
class Timed(FakeTransport):
    """A node whose node program is not there; it notes the deadline of every command."""

    deadlines: list[float | None] = field(default_factory=list)

    async def run(self, argv: Any, **kw: Any) -> CommandResult:
        self.deadlines.append(kw.get("timeout_s"))
        return await super().run(argv, **kw)


def _absent(argv: tuple[str, ...], stdin: bytes | None) -> FakeReply:
    return FakeReply(exit_status=127, stderr="python3: not found\n")


def _fleet() -> tuple[dict[str, Timed], Any]:
    made: dict[str, Timed] = {}

    def factory(node: Node) -> Timed:
        made[node.name] = Timed(node, _absent)
        return made[node.name]

    return made, factory


def test_a_verifying_probe_has_minutes_and_a_plain_one_three_connect_timeouts() -> None:
    assert probe_timeout_s(verify=True, connect_timeout_s=3) == VERIFY_PROBE_S >= 600
    assert probe_timeout_s(verify=False, connect_timeout_s=3) == 10.0
    assert probe_timeout_s(verify=False, connect_timeout_s=20) == 60.0


@pytest.mark.parametrize(("verify", "connect", "want"), [(True, 3.0, 600.0), (False, 3.0, 10.0)])
async def test_weights_status_gives_each_node_the_probe_deadline(
    verify: bool, connect: float, want: float
) -> None:
    made, factory = _fleet()
    rows = await weights_status(
        INVENTORY, "/models/m", verify=verify, connect_timeout_s=connect, factory=factory
    )
    assert [r.reachable for r in rows] == [False, False]
    assert {n: t.deadlines for n, t in made.items()} == {"n0": [want], "n1": [want]}


@pytest.mark.parametrize(("verify", "want"), [(True, 600.0), (False, 10.0)])
async def test_weights_push_gives_its_first_probe_the_same_deadline(
    tmp_path: Path, verify: bool, want: float
) -> None:
    made, factory = _fleet()
    model = make_model(tmp_path / "org" / "m", shards=1, shard_bytes=1 << 16)
    options = WeightsOptions(verify=verify, connect=ConnectOptions(connect_timeout_s=3.0))
    await push_weights(INVENTORY, model, dest="/models/m", options=options, factory=factory)
    assert {n: t.deadlines[0] for n, t in made.items()} == {"n0": want, "n1": want}
