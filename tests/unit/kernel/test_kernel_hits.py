"""Kernel evidence in the postmortem (issue 28): a node's kernel.log joins the rank it concerns,
on the controller's clock, and takes the blame from the ranks that only echo the failure."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.kernel.model import (
    KERNEL_JSON,
    KERNEL_LOG,
    ClockOffset,
    KernelWindow,
    Position,
)
from orchestrator.kernel.read import parse_line
from orchestrator.postmortem import postmortem_run
from orchestrator.postmortem.collect import collect_logs
from orchestrator.postmortem.kernel_hits import with_pasted_kernel_logs
from orchestrator.postmortem.signatures import load_signatures
from orchestrator.runstore import Run, RunStore
from tests.engine_lines import by_id

SIGS = load_signatures()
T0 = 1_796_000_000.0  # 2026-11-30
OOM_CONTAINER = "00748bf4e957f82c239a1db8a88579059b7d40c7b5fbd3f43617d31d3f646f12"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds")


def _docker_line(ts: float, text: str) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z") + " " + text


def _message(entry_id: str) -> str:
    """The kernel's message of a corpus line (its prefix read off)."""
    return parse_line(1, by_id(entry_id).text).message


def _journal(node: str, ts: float, entry_id: str) -> str:
    """The message behind the prefix `journalctl -k -o short-iso-precise` prints now."""
    return f"{_iso(ts)} {node} kernel: {_message(entry_id)}"


def _run(tmp_path: Path, ranks: int) -> Run:
    run = RunStore(tmp_path).create()
    run.write_status({"ranks": [{"rank": k, "node": f"spark-{k}"} for k in range(ranks)]})
    for k in range(ranks):
        run.rank_dir(k)
    return run


def _rank_log(run: Run, rank: int, lines: list[tuple[float, str]]) -> None:
    text = "".join(_docker_line(ts, t) + "\n" for ts, t in lines)
    (run.dir / f"rank-{rank}" / "stderr.log").write_text(text)


def _kernel(
    run: Run,
    node: str,
    lines: list[str],
    *,
    offset_s: float = 0.0,
    boot_id: str | None = None,
    error: str | None = None,
    hint: str | None = None,
) -> None:
    folder = run.dir / "nodes" / node
    folder.mkdir(parents=True, exist_ok=True)
    if error is None:
        (folder / KERNEL_LOG).write_text("".join(line + "\n" for line in lines))
    window = KernelWindow(
        node=node,
        position=Position(
            source="denied" if error else "journal",
            cursor=None if error else "s=abc;i=1",
            boot_id=boot_id,
            noted_at=T0,
            error=error,
            hint=hint,
        ),
        clock=ClockOffset(offset_s=offset_s, uncertainty_s=0.01),
        collected_at=T0 + 60,
        lines=len(lines),
    )
    (folder / KERNEL_JSON).write_text(window.model_dump_json())


def _cascade_text() -> str:
    return by_id(SIGS["nccl-watchdog-collective-timeout"].sig.fixtures[0]).text


def test_an_xid_on_node_5_while_rank_5_hangs_blames_node_5_with_gpu_fault(tmp_path: Path) -> None:
    run = _run(tmp_path, 8)
    for k in range(8):
        lines = [(T0 + 1, "Load weight begin.")]
        if k != 5:  # the others time out in a collective, after rank 5 fell silent
            lines.append((T0 + 40 + k, _cascade_text()))
        _rank_log(run, k, lines)
    # the Xid is LATER than rank 0's first echo: blame goes on evidence strength, not order
    _kernel(run, "spark-5", [_journal("spark-5", T0 + 45, "nvrm-xid-79-fallen-off-the-bus")])
    d = postmortem_run(run, SIGS, workers=1)
    assert d.first_failing_rank == 5
    assert d.category == "gpu-fault"
    assert d.root_cause is not None and d.root_cause.signature == "nvrm-xid"
    assert any(e.file == "nodes/spark-5/kernel.log" and e.line == 1 for e in d.root_cause.evidence)
    assert 5 not in d.cascade_ranks and 0 in d.cascade_ranks
    assert any("Xid 79" in n and "fallen off the bus" in n for n in d.source.notes)
    xid = [e for e in d.timeline if e.what == "nvrm-xid"]
    assert [(e.rank, e.file) for e in xid] == [(5, "nodes/spark-5/kernel.log")]


def test_a_cgroup_oom_in_a_shared_kernel_goes_to_the_container_it_names_not_the_reader(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path, 2)
    for k, cid in ((0, "f" * 64), (1, OOM_CONTAINER)):
        (run.dir / f"rank-{k}" / "inspect.json").write_text(
            json.dumps([{"Id": cid, "State": {"Pid": 4000 + k, "Status": "running"}}])
        )
        _rank_log(run, k, [(T0 + 1, "Load weight begin.")])
    (run.dir / "rank-1" / "exit.json").write_text(
        json.dumps({"status": "exited", "exit_code": 137, "finished_at": T0 + 31})
    )
    shared = [_journal("host", T0 + 30, "kernel-oom-kill-constraint-docker-scope")]
    for node in ("spark-0", "spark-1"):  # both "nodes" read the one kernel: the same line
        _kernel(run, node, shared, boot_id="6be3c0c5-021c-48ba-91e1-3d3e4dcea794")
    d = postmortem_run(run, SIGS, workers=1)
    assert d.first_failing_rank == 1
    assert d.category == "out-of-memory"
    assert d.root_cause is not None and d.root_cause.signature == "host-oom-kill"
    assert d.root_cause.confidence == "high"
    ranks = {r.rank: r for r in d.ranks}
    assert "host-oom-kill" not in ranks[0].signatures
    oom = [e for e in d.timeline if e.what == "host-oom-kill"]
    # once, though two nodes' logs hold it, and from the log of the rank's own node
    assert [(e.rank, e.file) for e in oom] == [(1, "nodes/spark-1/kernel.log")]


def test_a_kernel_line_moves_onto_the_controllers_clock_by_the_recorded_offset(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path, 2)
    _rank_log(run, 0, [(T0 + 1, "Load weight begin."), (T0 + 50, _cascade_text())])
    _rank_log(run, 1, [(T0 + 1, "Load weight begin.")])
    # spark-1's clock is 100 s ahead: its line says T0+140, which is T0+40 on ours
    _kernel(run, "spark-1", [_journal("spark-1", T0 + 140, "mlx5-core-link-down")], offset_s=100.0)
    d = postmortem_run(run, SIGS, workers=1)
    link = next(e for e in d.timeline if e.what == "nic-link-down")
    assert link.ts is not None and abs(link.ts - (T0 + 40)) < 1e-3
    assert link.rank == 1
    order = [e.what for e in d.timeline if e.ts is not None and e.ts > T0 + 2]
    assert order.index("nic-link-down") < order.index("nccl-watchdog-collective-timeout")
    assert d.first_failing_rank == 1 and d.category == "rendezvous-network"


def test_a_dmesg_time_is_placed_by_the_nodes_boot_time_and_offset(tmp_path: Path) -> None:
    run = _run(tmp_path, 1)
    folder = run.dir / "nodes" / "spark-0"
    folder.mkdir(parents=True)
    (folder / KERNEL_LOG).write_text(by_id("kernel-hung-task-blocked-120s").text + "\n")
    window = KernelWindow(
        node="spark-0",
        position=Position(source="dmesg", mono_s=10.0, boot_wall=T0, noted_at=T0),
        clock=ClockOffset(offset_s=2.0, uncertainty_s=0.01),
    )
    (folder / KERNEL_JSON).write_text(window.model_dump_json())
    d = postmortem_run(run, SIGS, workers=1)
    hung = next(e for e in d.timeline if e.what == "kernel-hung-task")
    assert hung.ts is not None and abs(hung.ts - (T0 + 242.664114 - 2.0)) < 1e-3
    assert d.category == "disk" and d.first_failing_rank == 0


def test_a_node_whose_kernel_log_was_not_readable_says_why_and_how_to_grant_it(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path, 1)
    _rank_log(run, 0, [(T0 + 1, "Load weight begin.")])
    _kernel(
        run,
        "spark-0",
        [],
        error="dmesg: read kernel buffer failed: Operation not permitted",
        hint="add the user to the systemd-journal group",
    )
    d = postmortem_run(run, SIGS, workers=1)
    notes = [n for n in d.source.notes if "kernel log not read" in n]
    assert len(notes) == 1 and "systemd-journal" in notes[0]


def test_a_corrected_pcie_error_alone_blames_nobody(tmp_path: Path) -> None:
    run = _run(tmp_path, 1)
    _rank_log(run, 0, [(T0 + 1, "Load weight begin.")])
    _kernel(run, "spark-0", [_journal("spark-0", T0 + 5, "pcie-aer-corrected-physical-layer")])
    d = postmortem_run(run, SIGS, workers=1)
    assert d.root_cause is None or d.root_cause.signature != "pcie-aer"
    assert d.category != "gpu-fault"
    assert "spark-0: 1 corrected PCIe error(s) in its kernel log (context, not blamed)" in (
        d.source.notes
    )


def test_a_pasted_journal_beside_rank_logs_names_the_rank_it_was_given_for(
    tmp_path: Path,
) -> None:
    logs = []
    for k in range(3):
        p = tmp_path / f"rank-{k}.log"
        text = _docker_line(T0 + 1, "Load weight begin.") + "\n"
        if k != 2:
            text += _docker_line(T0 + 40, _cascade_text()) + "\n"
        p.write_text(text)
        logs.append(p)
    pasted = tmp_path / "node2-journal.txt"
    pasted.write_text(by_id("segfault-python3-journal").text + "\n")
    collected = collect_logs(logs, SIGS, workers=1)
    ranks, notes = with_pasted_kernel_logs(collected.ranks, {2: pasted}, SIGS)
    r2 = next(r for r in ranks if r.rank == 2)
    assert [h.signature for h in r2.hits] == ["process-segfault"]
    assert r2.hits[0].evidence.file == str(pasted)
    assert all("process-segfault" not in r.counts for r in ranks if r.rank != 2)
    assert notes == []
