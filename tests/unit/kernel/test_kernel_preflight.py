"""Preflight learns from the kernel (issue 28): logind RemoveIPC refused, a fabric port below its
rated speed and a kernel log already holding Xid/AER/link-down lines warned, both figures shown."""

from __future__ import annotations

import asyncio
import base64
from datetime import UTC, datetime

from orchestrator.kernel.health import parse_health, probe_kernel_health, rated_speed
from orchestrator.kernel.model import KernelHealth
from orchestrator.kernel.read import parse_line
from orchestrator.models.inventory import Node
from orchestrator.preflight.checks.kernel import KERNEL_CHECKS, kernel_problems
from orchestrator.preflight.model import Severity
from orchestrator.transport.base import Transport
from tests.engine_lines import by_id
from tests.fake_transport import FakeReply, FakeTransport

# The shape `ethtool IFACE` prints for a ConnectX port (ethtool's own layout: a key, then the
# link modes continued on indented lines), here negotiated at 100 of its 200 Gb/s.
ETHTOOL = "".join(
    [
        "Settings for enp1s0f0np0:\n",
        "\tSupported ports: [ Backplane ]\n",
        "\tSupported link modes:   1000baseKX/Full\n",
        "\t                        10000baseKR/Full\n",
        "\t                        100000baseCR4/Full\n",
        "\t                        200000baseCR4/Full\n",
        "\tSupported pause frame use: Symmetric\n",
        "\tSupports auto-negotiation: Yes\n",
        "\tAdvertised link modes:  100000baseCR4/Full\n",
        "\tSpeed: 100000Mb/s\n",
        "\tDuplex: Full\n",
        "\tLink detected: yes\n",
    ]
)


def _node(name: str = "spark-3", rank: int = 3) -> Node:
    return Node(name=name, address="198.18.0.4", user="root", rank=rank, fabric_iface="enp1s0f0np0")


def _both(config: str, recent: str) -> str:
    return f"{config}\n@@cluster-kernel-recent@@\n{recent}"


def _health_out(removeipc: list[str], speed: str = "100000", ethtool: str = ETHTOOL) -> str:
    lines = [f"removeipc={v}" for v in removeipc] + [
        f"speed={speed}",
        "ethtool<<",
        ethtool,
        ">>ethtool",
    ]
    return "\n".join(lines) + "\n"


def test_ethtool_rated_speed_is_the_fastest_supported_mode() -> None:
    assert rated_speed(ETHTOOL) == 200000
    assert rated_speed("Settings for veth0:\n\tSupported link modes:   Not reported\n") is None


def test_removeipc_yes_in_logind_conf_is_refused_with_the_fix() -> None:
    h = parse_health("spark-3", "enp1s0f0np0", _health_out(["yes /etc/systemd/logind.conf"]))
    problems = kernel_problems([_node()], {"spark-3": h})
    refused = [p for p in problems if p.check == "logind-removeipc"]
    assert len(refused) == 1 and refused[0].severity is Severity.error
    assert refused[0].rank == 3 and "RemoveIPC=yes" in refused[0].evidence
    assert "RemoveIPC=no" in refused[0].fix and "systemctl restart systemd-logind" in refused[0].fix


def test_a_later_drop_in_with_removeipc_no_wins_and_unset_is_not_refused() -> None:
    h = parse_health(
        "spark-3",
        "enp1s0f0np0",
        _health_out(["yes /etc/systemd/logind.conf", "no /etc/systemd/logind.conf.d/90.conf"]),
    )
    assert not [p for p in kernel_problems([_node()], {"spark-3": h}) if p.severity == "error"]
    unset = parse_health("spark-3", "enp1s0f0np0", _health_out([]))
    assert unset.remove_ipc == ()
    assert not [
        p for p in kernel_problems([_node()], {"spark-3": unset}) if p.check.startswith("logind")
    ]


def test_a_port_below_its_rated_speed_is_warned_with_both_figures() -> None:
    h = parse_health("spark-3", "enp1s0f0np0", _health_out([]))
    (p,) = [p for p in kernel_problems([_node()], {"spark-3": h}) if p.check == "fabric-speed"]
    assert p.severity is Severity.warning
    assert "100 Gb/s" in p.what and "200 Gb/s" in p.what and "50%" in p.what
    assert "100000 Mb/s" in p.evidence and "200000 Mb/s" in p.evidence
    full = parse_health("spark-3", "enp1s0f0np0", _health_out([], speed="200000"))
    assert not kernel_problems([_node()], {"spark-3": full})


def _journal(ts: float, entry_id: str) -> str:
    iso = datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds")
    return f"{iso} spark-3 kernel: {parse_line(1, by_id(entry_id).text).message}"


def _recent_reply(body: str, source: str = "journal") -> str:
    b64 = base64.b64encode(body.encode()).decode()
    return f"boot_id=b\nuptime=100.0\nnow=200.0\nsource={source}\n---\n{b64}\n"


def test_the_last_hours_xid_aer_and_link_down_lines_are_warned_and_quoted() -> None:
    now = datetime.now(UTC).timestamp()
    body = "\n".join(
        [
            _journal(now - 600, "nvrm-xid-79-fallen-off-the-bus"),
            _journal(now - 500, "mlx5-core-link-down"),
            _journal(now - 400, "pcie-aer-multiple-corrected"),
        ]
    )

    def handler(argv: tuple[str, ...], stdin: bytes | None) -> FakeReply:
        # One command a node: the configuration, a marker, then the `recent` answer.
        assert "recent" in argv
        return FakeReply(stdout=_both(_health_out([], speed="200000"), _recent_reply(body + "\n")))

    node = _node()
    transports: dict[str, Transport] = {node.name: FakeTransport(node, handler)}
    health = asyncio.run(probe_kernel_health([node], transports))
    h = health["spark-3"]
    assert (h.xid, h.link_down, h.aer, h.recent_source) == (1, 1, 1, "journal")
    (p,) = kernel_problems([node], health)
    assert p.check == "kernel-recent" and p.severity is Severity.warning
    assert "1 Xid, 1 PCIe AER, 1 link-down" in p.what
    assert "NVRM: Xid (PCI:0000:44:00): 79" in p.evidence


def test_dmesg_lines_older_than_an_hour_are_not_counted() -> None:
    body = "[  100.000000] mlx5_core 0000:01:00.0 enp1s0f0np0: Link down\n"

    def handler(argv: tuple[str, ...], stdin: bytes | None) -> FakeReply:
        # up 5000 s: the line at 100 s is 81 min old
        recent = _recent_reply(body, "dmesg").replace("uptime=100.0", "uptime=5000.0")
        return FakeReply(stdout=_both(_health_out([], speed="200000"), recent))

    node = _node()
    health = asyncio.run(probe_kernel_health([node], {node.name: FakeTransport(node, handler)}))
    assert health["spark-3"].link_down == 0 and not kernel_problems([node], health)


def test_a_node_that_does_not_answer_is_no_problem_of_these_checks_but_says_why() -> None:
    h = KernelHealth(node="spark-3", error="no answer within 15 s")
    assert kernel_problems([_node()], {"spark-3": h}) == []
    assert set(KERNEL_CHECKS) == {"logind-removeipc", "fabric-speed", "kernel-recent"}


def test_the_judge_entry_runs_one_check_over_the_nodes_that_answered() -> None:
    from orchestrator.preflight.checks.kernel import check_kernel

    class J:  # the judge's surface the entry uses
        def __init__(self) -> None:
            self.problems: list[object] = []

        def reachable(self) -> list[tuple[Node, object]]:
            return [(_node(), object()), (_node("spark-4", 4), object())]

    j = J()
    bad = parse_health("spark-3", "enp1s0f0np0", _health_out(["yes /etc/systemd/logind.conf"]))
    check_kernel(j, "logind-removeipc", {"spark-3": bad})  # type: ignore[arg-type]
    check_kernel(j, "fabric-speed", None)  # type: ignore[arg-type]
    assert [p.check for p in j.problems] == ["logind-removeipc"]  # type: ignore[attr-defined]
