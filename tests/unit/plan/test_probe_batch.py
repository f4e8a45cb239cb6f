"""Probes in one command per node (probes/batch.py): each probe's answer is what it would have
been alone, a slow or hung probe costs only itself, and a node is asked in few commands.

The batch runs in a real `sh` here (LocalTransport); the netns tier runs it through real sshd
with a slow login shell (tests/netns/test_docker_host_netns.py counts the shell start-ups).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.check import check_node
from orchestrator.facts import FactsRequest, ask_batch, gather_node_facts
from orchestrator.models.inventory import Node
from orchestrator.probes.base import Probe
from orchestrator.probes.batch import batch_argv, batch_output, split_batch, unbatch
from orchestrator.transport.base import CommandResult
from orchestrator.transport.local import LocalTransport
from tests.fake_transport import FakeReply, FakeTransport
from tests.inventories import inventory_of

NODE = Node(name="n1", address="127.0.0.10", user="u", rank=0, fabric_iface="lo")
COMMANDS: dict[str, tuple[str, ...]] = {
    "plain": ("echo", "hello there"),
    "quoted": ("sh", "-c", "x='a b'\necho \"$x\" '$(not run)' $(echo ran)"),
    "fails": ("sh", "-c", "echo half; echo 'it broke' >&2; exit 3"),
    "no-newline": ("printf", "%s", "no newline at the end"),
    "missing": ("cat", "/nonexistent/file"),
}


def text(stdout: str) -> str:
    return stdout


def probe(name: str, argv: tuple[str, ...]) -> Probe[str]:
    return Probe(
        name=name, argv=argv, parse=text, on_failure=lambda code, out, err: f"{code}:{err}"
    )


async def test_every_probe_answers_as_if_it_had_run_alone() -> None:
    local = LocalTransport(NODE)
    batch = batch_argv(COMMANDS, timeout_s=10)
    together = split_batch(batch, NODE.name, (await local.run(batch.argv)).stdout, 0.0)
    for name, argv in COMMANDS.items():
        alone = await local.run(argv)
        got = together[name]
        assert (got.exit_status, got.stdout, got.stderr) == (
            alone.exit_status,
            alone.stdout,
            alone.stderr,
        ), name
    assert together["quoted"].stdout == "a b $(not run) ran\n"  # quoting survives, once


async def test_a_probe_past_its_deadline_costs_only_itself() -> None:
    probes = {
        "quick": probe("quick", ("echo", "fine")),
        "hung": probe("hung", ("sleep", "30")),
    }
    values, errors = await ask_batch(LocalTransport(NODE), probes, timeout_s=1)
    assert values == {"quick": "fine\n"}
    assert list(errors) == ["hung"] and "did not finish within 1 s" in errors["hung"]


def test_a_shells_chatter_before_the_batch_and_a_cut_off_end_are_read_safely() -> None:
    batch = batch_argv({"a": ("true",), "b": ("true",)}, 5, token="@@T")
    full = batch_output("@@T", [(0, "one\n", ""), (2, "", "two\n")])
    noisy = "conda: base activated\n" + full
    got = split_batch(batch, "n", noisy, 0.0)
    assert (got["a"].stdout, got["b"].exit_status, got["b"].stderr) == ("one\n", 2, "two\n")
    cut = full[: full.index("\n@@T 1 2 rc")]  # b's exit status never arrived
    assert set(split_batch(batch, "n", cut, 0.0)) == {"a"}


def test_the_fake_transport_reads_the_commands_back_out_of_a_batch() -> None:
    batch = batch_argv(COMMANDS, 5)
    found = unbatch(batch.argv)
    assert found is not None and found[0] == batch.token
    assert found[1] == list(COMMANDS.values())


@dataclass
class Counting(FakeTransport):
    """A fake node that counts the commands it was sent (a batch counts once)."""

    sent: list[tuple[str, ...]] = field(default_factory=list)

    async def run(self, argv: Any, **kw: Any) -> CommandResult:
        self.sent.append(tuple(argv))
        return await super().run(argv, **kw)


def answer(argv: tuple[str, ...], stdin: bytes | None) -> FakeReply:
    return FakeReply(exit_status=1, stderr="not on this fake\n")


async def test_preflight_facts_take_three_commands_and_the_check_one() -> None:
    node = NODE.model_copy(update={"docker_host": None})
    t = Counting(node, answer)
    facts = await gather_node_facts(node, t, FactsRequest(image="img:1", weights_dir="/w"))
    # The probes in one batch, the clock beside it, free disk after (it needs docker's root).
    assert len(t.sent) == 3, t.sent
    assert len(t.calls) > 10  # ... while every probe was asked
    assert set(facts.errors) >= {"host", "memory", "interfaces", "docker", "clock", "disks"}
    inv = inventory_of(node)
    t2 = Counting(node, answer)
    row = await check_node(inv, node, t2)
    assert len(t2.sent) == 1 and {c[0] for c in t2.calls} >= {"uname", "cat", "ip", "docker"}
    assert row.reachable and row.problems  # every probe failed, and each says so
