"""`cluster postmortem`: which rank failed first, why, and what to change, from preserved logs.

    signatures/*.yaml  failure signatures as data (patterns, meaning, remedy, sources, fixtures)
    signatures.py      load, validate (pydantic) and compile them; `to_ere` for grep -E
    timeline.py        stream rank logs: keyword prefilter, regexes, milestones, normalised times
    collect.py         read a run directory (or loose log files) into facts
    model.py           the facts and the diagnosis (pydantic; the --json document)
    diagnose.py        pure: first failure, root cause vs cascade, recipe changes, verdict
    report.py          rich, Markdown and JSON renderings of the diagnosis

`postmortem_run` and `postmortem_logs` are the two entry points the CLI uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.postmortem.collect import collect_logs, collect_run
from orchestrator.postmortem.diagnose import diagnose
from orchestrator.postmortem.incidents import explain_run
from orchestrator.postmortem.model import Diagnosis
from orchestrator.postmortem.signatures import SignatureSet, load_signatures
from orchestrator.runstore import Run

__all__ = ["Diagnosis", "load_signatures", "postmortem_logs", "postmortem_run"]


def postmortem_run(
    run: Run, sigs: SignatureSet | None = None, *, workers: int | None = None
) -> Diagnosis:
    """Diagnose one run directory."""
    sigs = sigs or load_signatures()
    collected = collect_run(run, sigs, workers=workers)
    # After READY, the serving watch's incidents come first (postmortem/incidents.py).
    return explain_run(run, diagnose(collected.run, collected.ranks, sigs))


def postmortem_logs(
    paths: Sequence[Path], sigs: SignatureSet | None = None, *, workers: int | None = None
) -> Diagnosis:
    """Diagnose loose rank log files (rank from the name when it says, else the order given)."""
    sigs = sigs or load_signatures()
    collected = collect_logs(paths, sigs, workers=workers)
    return diagnose(collected.run, collected.ranks, sigs)
