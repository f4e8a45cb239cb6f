"""Kernel lines -> postmortem hits on the rank they concern, on the controller's clock.

`with_kernel_evidence` is the one call the postmortem's collection makes for a run directory:
it reads every `nodes/<node>/kernel.log` (with its `kernel.json`), finds the families' lines
(`read.py`), gives each to a rank and adds it to that rank's hits, so the kernel's lines join
the timeline and the blame through the signatures (`signatures/node-kernel.yaml`,
`host-oom-kill`): a kernel cause is a `cause` hit on the rank, as strong as any line the rank
printed itself, and earlier than the echoes its peers print after it.

Which rank a line concerns (never "the node whose shell read it": on the netns testbed every
node reads one shared kernel, and two containers can share a Spark):
- a process line (OOM kill, hung task, segfault): the rank whose container the line's cgroup
  names (`docker-<id>.scope`; a `Killed process N` line borrows the cgroup of the
  `oom-kill:... pid=N` line beside it), else the rank whose container's main PID it names,
  else, on a node whose kernel is its own, the ranks of that node;
- a hardware line (Xid, AER, link, disk): the ranks of the node, when the node's kernel is its
  own. Nodes whose `kernel.json` carry the same boot id share one kernel: hardware lines there
  belong to the host, not to a rank, and are left in a note.

Times: the node's wall time of a line (or its dmesg time plus the node's boot time) minus the
node's clock offset (node - controller) recorded when the log was collected.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.kernel.model import KERNEL_JSON, KERNEL_LOG, KernelWindow
from orchestrator.kernel.read import (
    PROCESS_FAMILIES,
    KernelEvent,
    family_events,
    signature_of,
    xid_meaning,
)
from orchestrator.postmortem.model import Evidence, Hit, RankFacts
from orchestrator.postmortem.signatures import SignatureSet

MAX_READ_BYTES = 16 * 2**20  # a kernel.log is bounded when collected; a pasted one here


@dataclass
class NodeLog:
    """One node's kernel log as the postmortem reads it."""

    node: str
    display: str  # the file as evidence names it (run-relative, or the path given)
    text: str
    window: KernelWindow | None = None
    ranks: list[int] = field(default_factory=list)  # the ranks that ran on this node

    @property
    def offset_s(self) -> float:
        return self.window.clock.offset_s if self.window and self.window.clock else 0.0

    @property
    def boot_wall(self) -> float | None:
        return self.window.position.boot_wall if self.window else None

    @property
    def boot_id(self) -> str | None:
        return self.window.position.boot_id if self.window else None


@dataclass(frozen=True)
class Owners:
    """What names a rank's process: its container's id and main PID (rank-k/inspect.json)."""

    containers: Mapping[int, str]
    pids: Mapping[int, int]

    def by_container(self, cid: str) -> list[int]:
        return sorted(k for k, full in self.containers.items() if full.startswith(cid))

    def by_pid(self, pid: int) -> list[int]:
        return sorted(k for k, p in self.pids.items() if p == pid)


def _read_text(path: Path) -> str:
    with path.open("rb") as fh:
        return fh.read(MAX_READ_BYTES).decode("utf-8", errors="replace")


def _owners(run_dir: Path, ranks: Sequence[int]) -> Owners:
    containers: dict[int, str] = {}
    pids: dict[int, int] = {}
    for k in ranks:
        path = run_dir / f"rank-{k}" / "inspect.json"
        try:
            data: Any = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except (OSError, ValueError):
            continue
        if isinstance(data, list) and data:
            data = data[0]
        if not isinstance(data, dict):
            continue
        if isinstance(data.get("Id"), str) and data["Id"]:
            containers[k] = data["Id"]
        state = data.get("State")
        if isinstance(state, dict) and isinstance(state.get("Pid"), int) and state["Pid"] > 0:
            pids[k] = state["Pid"]
    return Owners(containers, pids)


def _year(window: KernelWindow | None, fallback: float | None) -> int | None:
    when = (window.collected_at if window else None) or fallback
    return datetime.fromtimestamp(when, UTC).year if when else None


def run_node_logs(run_dir: Path, ranks: Sequence[RankFacts], notes: list[str]) -> list[NodeLog]:
    """Every `nodes/<node>/kernel.log` of a run, with its window and the node's ranks."""
    folder = run_dir / "nodes"
    if not folder.is_dir():
        return []
    by_node: dict[str, list[int]] = {}
    for r in ranks:
        if r.node:
            by_node.setdefault(r.node, []).append(r.rank)
    logs: list[NodeLog] = []
    for entry in sorted(folder.iterdir()):
        if not entry.is_dir():
            continue
        window: KernelWindow | None = None
        if (entry / KERNEL_JSON).is_file():
            try:
                window = KernelWindow.model_validate_json((entry / KERNEL_JSON).read_bytes())
            except (OSError, ValidationError) as exc:
                notes.append(f"nodes/{entry.name}/{KERNEL_JSON}: unreadable ({exc}); times unmoved")
        if window is not None and (window.error or window.position.error):
            why = window.error or window.position.error
            hint = window.hint or window.position.hint
            notes.append(
                f"{entry.name}: kernel log not read: {why}" + (f" ({hint})" if hint else "")
            )
        log = entry / KERNEL_LOG
        if not log.is_file():
            continue
        try:
            text = _read_text(log)
        except OSError as exc:
            notes.append(f"nodes/{entry.name}/{KERNEL_LOG}: unreadable ({exc})")
            continue
        logs.append(
            NodeLog(
                node=entry.name,
                display=f"nodes/{entry.name}/{KERNEL_LOG}",
                text=text,
                window=window,
                ranks=sorted(by_node.get(entry.name, [])),
            )
        )
    return logs


def _shared_kernels(logs: Sequence[NodeLog]) -> set[str]:
    """Boot ids that more than one node reported: one kernel under several 'nodes'."""
    seen: dict[str, int] = {}
    for log in logs:
        if log.boot_id:
            seen[log.boot_id] = seen.get(log.boot_id, 0) + 1
    return {b for b, n in seen.items() if n > 1}


def _targets(
    ev: KernelEvent, log: NodeLog, owners: Owners, pid_cgroup: Mapping[int, str], shared: bool
) -> list[int]:
    if ev.family in PROCESS_FAMILIES:
        cid = ev.container or (pid_cgroup.get(ev.pid) if ev.pid is not None else None)
        if cid:
            found = owners.by_container(cid)
            if found or shared:
                return found
        if ev.pid is not None and (found := owners.by_pid(ev.pid)):
            return found
    return [] if shared else list(log.ranks)


def kernel_hits(
    logs: Sequence[NodeLog],
    sigs: SignatureSet,
    owners: Owners,
    *,
    year_fallback: float | None = None,
) -> tuple[dict[int, list[Hit]], list[str]]:
    """Each node log's family lines as hits on the ranks they concern; notes for the rest."""
    shared_ids = _shared_kernels(logs)
    out: dict[int, list[Hit]] = {}
    notes: list[str] = []
    # (kernel, message, rank) -> the hit: a line of a shared kernel once, from the log of the
    # rank's own node when that log holds it (evidence where an operator would look)
    given: dict[tuple[str, str, int], tuple[Hit, bool]] = {}
    host_only: dict[str, int] = {}
    context: dict[tuple[str, str], int] = {}
    for log in logs:
        shared = log.boot_id in shared_ids
        kernel = log.boot_id or log.node
        evs = list(family_events(log.text, year=_year(log.window, year_fallback)))
        pid_cgroup = {e.pid: e.container for e in evs if e.pid is not None and e.container}
        for ev in evs:
            signature = signature_of(ev)
            if signature not in sigs.by_id:
                continue
            if not ev.cause:  # a link back up, a corrected PCIe error: context, not evidence
                context[(log.node, ev.family)] = context.get((log.node, ev.family), 0) + 1
                continue
            compiled = sigs.by_id[signature]
            node_ts = ev.line.node_time(log.boot_wall)
            ts = node_ts - log.offset_s if node_ts is not None else None
            targets = _targets(ev, log, owners, pid_cgroup, shared)
            if not targets and ev.cause:
                host_only[ev.family] = host_only.get(ev.family, 0) + 1
            for k in targets:
                key = (kernel, ev.line.message, k)
                own = k in log.ranks
                if key in given and (given[key][1] or not own):
                    continue
                evidence = Evidence(
                    file=log.display, line=ev.line.n, text=ev.line.text[:2000], ts=ts, rank=k
                )
                hit = Hit(
                    signature=compiled.id,
                    category=compiled.sig.category,
                    role=compiled.sig.role,
                    evidence=evidence,
                )
                first = key not in given
                given[key] = (hit, own)
                if first and ev.family == "xid" and ev.xid is not None:
                    notes.append(
                        f"rank {k} ({log.node}): Xid {ev.xid} on GPU {ev.device}: "
                        f"{xid_meaning(ev.xid)} ({log.display}:{ev.line.n})"
                    )
    for (_kernel, _message, k), (hit, _own) in given.items():
        out.setdefault(k, []).append(hit)
    for (node, family), n in sorted(context.items()):
        what = "corrected PCIe error(s)" if family == "aer" else "link-up line(s)"
        notes.append(f"{node}: {n} {what} in its kernel log (context, not blamed)")
    for family, n in sorted(host_only.items()):
        notes.append(
            f"{n} kernel line(s) of family {family} name no rank's container or PID (a kernel "
            "shared by several nodes, or another process): kept in nodes/*/kernel.log, not blamed"
        )
    return out, notes


def merge_hits(ranks: Sequence[RankFacts], extra: Mapping[int, list[Hit]]) -> list[RankFacts]:
    """The ranks with the kernel's hits added (in time order, counted), and a rank for any hit
    on a rank that printed nothing we kept."""
    out: list[RankFacts] = []
    seen: set[int] = set()
    for r in ranks:
        seen.add(r.rank)
        more = extra.get(r.rank, [])
        if not more:
            out.append(r)
            continue
        counts = dict(r.counts)
        for h in more:
            counts[h.signature] = counts.get(h.signature, 0) + 1
        hits = sorted(
            (*r.hits, *more),
            key=lambda h: (h.evidence.ts is None, h.evidence.ts or 0.0, h.evidence.line),
        )
        out.append(r.model_copy(update={"hits": tuple(hits), "counts": counts}))
    for k in sorted(set(extra) - seen):
        only: dict[str, int] = {}
        for h in extra[k]:
            only[h.signature] = only.get(h.signature, 0) + 1
        out.append(RankFacts(rank=k, hits=tuple(extra[k]), counts=only))
    return sorted(out, key=lambda r: r.rank)


def with_kernel_evidence(
    run_dir: Path, ranks: Sequence[RankFacts], sigs: SignatureSet
) -> tuple[list[RankFacts], list[str]]:
    """The one call of `postmortem.collect.collect_run`: the run's kernel logs into its ranks."""
    notes: list[str] = []
    logs = run_node_logs(run_dir, ranks, notes)
    if not logs:
        return list(ranks), notes
    owners = _owners(run_dir, [r.rank for r in ranks])
    hits, more = kernel_hits(logs, sigs, owners)
    return merge_hits(ranks, hits), notes + more


def with_pasted_kernel_logs(
    ranks: Sequence[RankFacts], files: Mapping[int, Path], sigs: SignatureSet
) -> tuple[list[RankFacts], list[str]]:
    """`cluster postmortem --logs ... --kernel-log RANK=FILE`: a node's `journalctl -k` or
    `dmesg` pasted beside the rank logs. Everything in it concerns that rank (the on-call
    engineer says whose node it is); its times are taken as they are (no offset known)."""
    logs: list[NodeLog] = []
    for k, path in sorted(files.items()):
        logs.append(NodeLog(node=f"rank-{k}", display=str(path), text=_read_text(path), ranks=[k]))
    mtime = max((p.stat().st_mtime for p in files.values()), default=None)
    hits, notes = kernel_hits(logs, sigs, Owners({}, {}), year_fallback=mtime)
    return merge_hits(ranks, hits), notes
