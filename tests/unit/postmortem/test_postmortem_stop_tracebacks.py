"""The tracebacks ranks print once `cluster stop` began are the stop's doing, like its failure
lines: a READY boot that was stopped stays `ready` (the built-in cluster's sim test met it once
the boot's smoke request moved the stop into the same second as the peers' Gloo errors)."""

from __future__ import annotations

from orchestrator.postmortem.diagnose import diagnose
from orchestrator.postmortem.model import Evidence, ExitInfo
from tests.unit.postmortem.test_postmortem_diagnose import RUN, SIGS, _lost_peer, facts


def _raised(rank: int, ts: float) -> Evidence:
    text = "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.10]:29500"
    return Evidence(file=f"rank-{rank}/full-stderr.log", line=16, text=text, ts=ts, rank=rank)


def test_a_traceback_printed_after_the_stop_began_does_not_fail_a_ready_boot() -> None:
    served = {"outcome": "READY"}
    run = RUN.model_copy(update={"supervisor_verdict": served, "stopped_at": 500.0})
    ranks = [
        facts(0, phase="serving", exit=ExitInfo(status="exited", exit_code=143, finished_at=501.0))
    ]
    ranks += [
        facts(
            k,
            phase="warming",
            hits=(_lost_peer(k, 500.4),),
            exceptions=(_raised(k, 500.4),),
            exit=ExitInfo(status="exited", exit_code=143, finished_at=500.5),
        )
        for k in range(1, 4)
    ]
    d = diagnose(run, ranks, SIGS)
    assert d.category == "ready" and d.root_cause is None, d.verdict
    assert "`cluster stop` stopped it at" in d.verdict
    # Raised before the stop began, the same traceback is a failure.
    early = [r.model_copy(update={"exceptions": (_raised(r.rank, 400.0),)}) for r in ranks[1:]]
    assert diagnose(run, [ranks[0], *early], SIGS).category != "ready"
