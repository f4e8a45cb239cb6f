"""Preflight: refuse a doomed boot in seconds, before any weight is read.

`judge` is pure: facts of every node, the rendezvous plan and the result of the real TCP test in,
every problem out, at once, each with its node, the evidence and the fix. Errors refuse the boot
(`PreflightRefused`, exit 4); warnings are printed and kept in the run directory.
`run_preflight` is thin: gather facts, plan, run the one real test (a temporary listener on the
head's fabric address and rendezvous port, a connect from every node over the fabric), judge,
write the report. `docs/preflight.md` has the table of checks for people.
"""

from orchestrator.preflight.checks import CHECKS
from orchestrator.preflight.checks.cluster import PROBE_COMMANDS
from orchestrator.preflight.judge import judge
from orchestrator.preflight.model import (
    GIB,
    NotChecked,
    PreflightLimits,
    PreflightReport,
    PreflightResult,
    Problem,
    Reachability,
    Runtime,
    Severity,
    gib,
)
from orchestrator.preflight.reachability import probe_reachability
from orchestrator.preflight.runner import run_preflight, runtime_of, write_preflight

__all__ = [
    "CHECKS",
    "GIB",
    "PROBE_COMMANDS",
    "NotChecked",
    "PreflightLimits",
    "PreflightReport",
    "PreflightResult",
    "Problem",
    "Reachability",
    "Runtime",
    "Severity",
    "gib",
    "judge",
    "probe_reachability",
    "run_preflight",
    "runtime_of",
    "write_preflight",
]
