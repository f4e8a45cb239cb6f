"""A pasted log, as `cluster postmortem --logs FILE` reads it: shared by the tests of the rules
mined from the unseen sets."""

from __future__ import annotations

from pathlib import Path

from orchestrator.postmortem import postmortem_logs
from orchestrator.postmortem.model import Diagnosis


def diagnose_paste(tmp_path: Path, *lines: str) -> Diagnosis:
    """The postmortem of `lines` written as one rank's log file."""
    path = tmp_path / "rank-0.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return postmortem_logs([path])
