"""`python -m orchestrator.simulator ENGINE [SUBCOMMAND] ARGS...`: one simulated rank.

Exit codes: 0 after a clean stop; 1 when the rank fails (every Python exception the real
engines raise ends their process with 1 too, and the barrier ValueError is one of them); 2 for
a command line or fault spec that does not parse (argparse's code); a signal's own status when
a fault asks for one (`exit-at=...:signal=KILL`). SIGTERM and SIGINT end a rank as they end the
real ones.
"""

from __future__ import annotations

import json
import os
import sys

from orchestrator.simulator.cli_args import ArgsError, EngineRefusal, parse
from orchestrator.simulator.faults import FaultError, faults_for, parse_rate, phases_of
from orchestrator.simulator.flag_tables import ENV_RELEASE
from orchestrator.simulator.runner import DEFAULT_READ_RATE, ENV_READ_RATE, Rank, describe
from orchestrator.simulator.timescale import ScaleError, resolve_scale
from orchestrator.simulator.weights import WeightsError, find_weights


def _usage(message: str) -> int:
    sys.stderr.write(f"[cluster-sim] error: {message}\n")
    return 2


PARSE_ONLY = "--sim-parse-only"
PROBE_MARK = "ENGINE_ARGS_PROBE "
"""The line preflight's engine-args probe reads (orchestrator/preflight/engine_argv_probe.py)."""


def _parse_only(argv: list[str], env: dict[str, str]) -> int:
    """`--sim-parse-only`: judge the flags as the played release would, print the verdict line
    preflight's `engine-args` check reads, start nothing. Exit 0 whatever the verdict."""
    verdict: dict[str, object] = {
        "engine": argv[0] if argv else None,
        "ok": True,
        "error": None,
        "warnings": [],
        "abbreviations": [],
        "version": env.get(ENV_RELEASE),
        "parser": "simulator",
    }
    try:
        parse(argv, env)
    except EngineRefusal as refusal:
        verdict.update(ok=False, error=refusal.line)
    except ArgsError as exc:
        verdict.update(ok=False, error=f"[cluster-sim] error: {exc}")
    sys.stdout.write(PROBE_MARK + json.dumps(verdict) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    env = dict(os.environ)
    if PARSE_ONLY in argv:
        return _parse_only([a for a in argv if a != PARSE_ONLY], env)
    try:
        args = parse(argv, env)
        scale = resolve_scale(args.sim_scale, env)
        faults = faults_for(args.node_rank, args.sim_faults, env)
        rate_text = args.sim_read_rate or env.get(ENV_READ_RATE)
        read_rate = parse_rate(rate_text) if rate_text else DEFAULT_READ_RATE
    except EngineRefusal as refusal:
        # As argparse ends the real engine: a usage line, its error line, status 2.
        sys.stderr.write(f"usage: {refusal.prog} [-h] [options]\n{refusal.line}\n")
        return 2
    except (ArgsError, FaultError, ScaleError) as exc:
        return _usage(str(exc))
    phases = phases_of(args.engine)
    for fault in faults:
        if fault.phase is not None and fault.phase not in phases:
            return _usage(
                f"fault {fault.raw!r}: {args.engine} has no phase {fault.phase!r} "
                f"(its phases: {', '.join(phases)})"
            )
        if fault.action == "slow-read" and fault.rate is not None:
            read_rate = min(read_rate, fault.rate) if read_rate else fault.rate
    try:
        weights = find_weights(args.model_path, env)
    except WeightsError as exc:
        sys.stderr.write(f"[cluster-sim] {exc}\n")
        return 1
    rank = Rank(args, scale, faults, weights, read_rate, env)
    sys.stderr.write(describe(rank) + "\n")
    sys.stderr.flush()
    return rank.run()


if __name__ == "__main__":
    sys.exit(main())
