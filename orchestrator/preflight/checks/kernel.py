"""Checks of what a node's kernel and fabric already say before a boot (issue 28). Pure.

- `logind-removeipc` (error): systemd-logind set to `RemoveIPC=yes` deletes a user's System V
  and POSIX shared memory when that user's last session ends, under NCCL's feet: silent hangs
  on Sparks (eugr/spark-vllm-docker#352). Refused only where a logind.conf sets it: systemd's
  compiled default is also yes, but it spares root and system users, as the rank containers
  are, and refusing every stock node would teach people to skip preflight.
- `fabric-speed` (warning): a fabric port negotiated below its rated speed (a CX-7 port stuck
  at a fraction of its rate), with both figures.
- `kernel-recent` (warning): the last hour of the kernel log already holds Xid, PCIe AER or
  NIC link-down lines: the node was unhealthy before we started.

The facts come from `orchestrator/kernel/health.py` (`KernelHealth` per node).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from orchestrator.kernel.model import KernelHealth
from orchestrator.models.inventory import Node
from orchestrator.preflight.model import Problem, Severity

if TYPE_CHECKING:
    from orchestrator.preflight.checks.context import Judge

KERNEL_CHECKS: dict[str, str] = {
    "logind-removeipc": "systemd-logind does not remove the shared memory NCCL uses "
    "(no RemoveIPC=yes in logind.conf)",
    "fabric-speed": "every fabric port runs at its rated speed (ethtool's fastest supported "
    "link mode vs /sys/class/net/IFACE/speed)",
    "kernel-recent": "the last hour of each node's kernel log holds no Xid, PCIe AER or NIC "
    "link-down line",
}
"""The checks' names and descriptions (rows for preflight's CHECK_TABLE)."""

_YES = {"yes", "true", "on", "1"}


def _problem(check: str, severity: Severity, node: Node, what: str, ev: str, fix: str) -> Problem:
    return Problem(
        check=check,
        severity=severity,
        node=node.name,
        rank=node.rank,
        what=what,
        evidence=ev,
        fix=fix,
    )


def check_remove_ipc(node: Node, h: KernelHealth) -> list[Problem]:
    if not h.remove_ipc:
        return []
    value, file = h.remove_ipc[-1]  # logind reads the drop-ins after logind.conf: last wins
    if value.lower() not in _YES:
        return []
    return [
        _problem(
            "logind-removeipc",
            Severity.error,
            node,
            f"{node.name}: systemd-logind removes a user's shared memory when its last "
            "session ends (RemoveIPC=yes): NCCL's segments vanish and the ranks hang silently",
            f"{file}: RemoveIPC={value}",
            f"on {node.name}: set `RemoveIPC=no` in {file} (or a drop-in "
            "/etc/systemd/logind.conf.d/90-cluster.conf with `[Login]` and `RemoveIPC=no`), "
            "then `sudo systemctl restart systemd-logind`",
        )
    ]


def check_fabric_speed(node: Node, h: KernelHealth) -> list[Problem]:
    if h.speed_mbps is None or h.rated_mbps is None or h.speed_mbps >= h.rated_mbps:
        return []
    return [
        _problem(
            "fabric-speed",
            Severity.warning,
            node,
            f"{node.name}: the fabric port {h.iface} runs at {h.speed_mbps // 1000} Gb/s, "
            f"{h.speed_mbps / h.rated_mbps:.0%} of its rated {h.rated_mbps // 1000} Gb/s",
            f"/sys/class/net/{h.iface}/speed: {h.speed_mbps} Mb/s; ethtool {h.iface}: fastest "
            f"supported link mode {h.rated_mbps} Mb/s",
            f"reseat or replace the cable/transceiver of {h.iface} on {node.name}, check the "
            f"peer port's speed, then `sudo ethtool {h.iface}` (Speed) again",
        )
    ]


def check_recent_kernel(node: Node, h: KernelHealth) -> list[Problem]:
    found = [
        f"{n} {what}"
        for n, what in ((h.xid, "Xid"), (h.aer, "PCIe AER"), (h.link_down, "link-down"))
        if n
    ]
    if not found:
        return []
    return [
        _problem(
            "kernel-recent",
            Severity.warning,
            node,
            f"{node.name}'s kernel logged {', '.join(found)} line(s) in the last hour: the "
            "node was unhealthy before this boot",
            " | ".join(h.evidence) or f"{h.recent_source}: {', '.join(found)}",
            f"read `journalctl -k --since '1 hour ago'` (or `dmesg -T`) on {node.name}; an Xid "
            "or a flapping link usually needs the node fixed (or rebooted) before it joins",
        )
    ]


def kernel_problems(nodes: Sequence[Node], health: Mapping[str, KernelHealth]) -> list[Problem]:
    """Every kernel and fabric problem of the nodes that answered (pure)."""
    problems: list[Problem] = []
    for node in nodes:
        h = health.get(node.name)
        if h is None:
            continue
        problems += check_remove_ipc(node, h)
        problems += check_fabric_speed(node, h)
        problems += check_recent_kernel(node, h)
    return problems


_BY_NAME = {
    "logind-removeipc": check_remove_ipc,
    "fabric-speed": check_fabric_speed,
    "kernel-recent": check_recent_kernel,
}


def check_kernel(j: Judge, name: str, health: Mapping[str, KernelHealth] | None) -> None:
    """The judge's entry for the three checks (`name` one of KERNEL_CHECKS), over the health
    the runner handed it; nodes that did not answer are the `probe` check's business."""
    for node, _facts in j.reachable():
        h = (health or {}).get(node.name)
        if h is not None:
            j.problems.extend(_BY_NAME[name](node, h))
