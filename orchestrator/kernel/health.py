"""Preflight's questions to each node about its kernel and fabric (async, bounded).

Two commands per node, at once: the kernel log's last hour (`command.py`'s one command, mode
`recent`), and a fixed script that reads logind's `RemoveIPC=` settings, the fabric
interface's negotiated speed (`/sys/class/net/IFACE/speed`) and its supported link modes
(`ethtool IFACE`). The answers become one `KernelHealth` per node; the judging is pure
(`preflight/checks/kernel.py`).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping, Sequence

from orchestrator.errors import ClusterError
from orchestrator.kernel.collect import since
from orchestrator.kernel.command import argv, parse_answer, position_of
from orchestrator.kernel.model import KernelHealth
from orchestrator.kernel.read import family_events
from orchestrator.models.inventory import Node
from orchestrator.transport import Transport

HEALTH_DEADLINE_S = 15.0
RECENT_BYTES = 2**20
RECENT_S = 3600.0

# $1: the fabric interface. logind reads logind.conf, then the drop-ins (later wins).
HEALTH_SCRIPT = r"""
iface=$1
for f in /etc/systemd/logind.conf /usr/lib/systemd/logind.conf.d/*.conf \
         /run/systemd/logind.conf.d/*.conf /etc/systemd/logind.conf.d/*.conf; do
  [ -r "$f" ] || continue
  sed -n "s|^[[:space:]]*RemoveIPC[[:space:]]*=[[:space:]]*\([^[:space:]#]*\).*|removeipc=\1 $f|p" \
    "$f"
done
printf 'speed=%s\n' "$(cat "/sys/class/net/$iface/speed" 2>/dev/null)"
if command -v ethtool >/dev/null 2>&1; then
  echo 'ethtool<<'
  ethtool "$iface" 2>/dev/null
  echo '>>ethtool'
fi
"""

_MODE = re.compile(r"(\d+)base")


def rated_speed(ethtool: str) -> int | None:
    """The fastest supported link mode ethtool lists (Mb/s), or None when it lists none."""
    speeds: list[int] = []
    inside = False
    for line in ethtool.splitlines():
        stripped = line.strip()
        if stripped.startswith("Supported link modes:"):
            inside = True
            stripped = stripped.removeprefix("Supported link modes:")
        elif inside and ":" in stripped:
            inside = False
        if inside:
            speeds.extend(int(m) for m in _MODE.findall(stripped))
    return max(speeds) if speeds else None


def parse_health(node: str, iface: str, stdout: str) -> KernelHealth:
    """The health script's answer (pure)."""
    remove: list[tuple[str, str]] = []
    speed: int | None = None
    ethtool = ""
    head, _, rest = stdout.partition("ethtool<<\n")
    if rest:
        ethtool = rest.partition(">>ethtool")[0]
    for line in head.splitlines():
        if line.startswith("removeipc="):
            value, _, file = line.removeprefix("removeipc=").partition(" ")
            remove.append((value, file))
        elif line.startswith("speed="):
            raw = line.removeprefix("speed=").strip()
            speed = int(raw) if raw.isdigit() and int(raw) > 0 else None
    return KernelHealth(
        node=node,
        remove_ipc=tuple(remove),
        iface=iface,
        speed_mbps=speed,
        rated_mbps=rated_speed(ethtool),
    )


def recent_counts(health: KernelHealth, stdout: str, now: float) -> KernelHealth:
    """The last hour of the kernel log: Xid, AER and link-down lines, counted (pure)."""
    answer = parse_answer(stdout)
    pos = position_of(answer, now)
    if answer.body is None:
        return health.model_copy(
            update={"recent_source": pos.source, "error": pos.error, "hint": pos.hint}
        )
    body = answer.body
    if pos.source == "dmesg":
        uptime = float(answer.fields.get("uptime") or 0.0)
        body, _ = since(body, max(0.0, uptime - RECENT_S))
    found = [
        ev
        for ev in family_events(body.decode("utf-8", errors="replace"))
        if ev.family in ("xid", "aer") or (ev.family == "link" and ev.cause)
    ]
    return health.model_copy(
        update={
            "recent_source": pos.source,
            "xid": sum(1 for e in found if e.family == "xid"),
            "aer": sum(1 for e in found if e.family == "aer"),
            "link_down": sum(1 for e in found if e.family == "link"),
            "evidence": tuple(e.line.text[:300] for e in found[:3]),
        }
    )


# One command a node (a login shell costs 0.2 s on a conda box, and preflight counts them): the
# configuration script, a marker line, then the kernel command's `recent` mode in its place.
_RECENT_MARK = "@@cluster-kernel-recent@@"
_BOTH = HEALTH_SCRIPT + f'printf "\\n%s\\n" "{_RECENT_MARK}"\nshift\nexec "$@"\n'


async def _one(node: Node, transport: Transport, deadline_s: float) -> KernelHealth:
    started = time.time()
    recent_argv = argv(node.name, "recent", max_bytes=RECENT_BYTES)
    try:
        both = await transport.run(
            ["sh", "-c", _BOTH, "sh", node.fabric_iface, *recent_argv], timeout_s=deadline_s
        )
    except ClusterError as exc:
        return KernelHealth(node=node.name, iface=node.fabric_iface, error=exc.line())
    config, _mark, recent = both.stdout.partition(f"\n{_RECENT_MARK}\n")
    health = parse_health(node.name, node.fabric_iface, config)
    return recent_counts(health, recent, started)


async def probe_kernel_health(
    nodes: Sequence[Node],
    transports: Mapping[str, Transport],
    *,
    deadline_s: float = HEALTH_DEADLINE_S,
) -> dict[str, KernelHealth]:
    """Every reachable node's kernel and fabric health, at once, within `deadline_s`."""
    asked = [n for n in nodes if n.name in transports]
    tasks = {n.name: asyncio.ensure_future(_one(n, transports[n.name], deadline_s)) for n in asked}
    done, pending = (
        await asyncio.wait(tasks.values(), timeout=deadline_s + 1.0) if tasks else (set(), set())
    )
    for task in pending:
        task.cancel()
    out: dict[str, KernelHealth] = {}
    for n in asked:
        task = tasks[n.name]
        if task in done and not task.cancelled() and task.exception() is None:
            out[n.name] = task.result()
        else:
            out[n.name] = KernelHealth(
                node=n.name, iface=n.fabric_iface, error=f"no answer within {deadline_s:.0f} s"
            )
    return out
