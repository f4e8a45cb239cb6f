"""Preflight's `engine-args` test (thin edge + pure parts): the image's own parser judges the argv.

On the head node, in the recipe's own image, one throwaway probe container (`--rm`: it is not a
rank, it holds no evidence; `--network none`: it reads nothing) parses the rank-0 and rank-1 argv
with the engine's parser (`engine_argv_probe.py`, passed with `python3 -c`): no GPU, no weights,
seconds. A twin (a simulated recipe) is asked the same question through its own program and
`--sim-parse-only`, so the built-in cluster and the testbed refuse what the real image would.

The verdicts go to the judge (`checks/engine.py`), which refuses the boot with the engine's own
error line and the recipe line to change.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.dockercli import DockerCli
from orchestrator.errors import ClusterError
from orchestrator.models.base import StrictModel
from orchestrator.models.recipe import Recipe
from orchestrator.plan.launch import LaunchPlan
from orchestrator.redact import is_secret_name
from orchestrator.transport import Transport

PROBE_SCRIPT = Path(__file__).with_name("engine_argv_probe.py")
MARK = "ENGINE_ARGS_PROBE "
PARSE_ONLY = "--sim-parse-only"


class ArgvVerdict(BaseModel):
    """One rank's argv as the engine's parser judged it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    rank: int = -1
    ok: bool
    error: str | None = None
    warnings: list[str] = Field(default_factory=list)
    abbreviations: list[list[str]] = Field(default_factory=list)
    version: str | None = None
    parser: str = Field(default="image", description="image: the engine's own; simulator")
    missing: str | None = Field(default=None, description="the engine is not importable there")


class EngineArgsResult(StrictModel):
    """What the probe found; `error` when it could not ask (the check then warns, not refuses)."""

    node: str
    argv: list[str] = Field(description="the probe command, for people")
    verdicts: list[ArgvVerdict] = Field(default_factory=list)
    error: str | None = None
    elapsed_s: float = 0.0


def probe_ranks(recipe: Recipe) -> list[int]:
    """Rank 0 (the head: API server flags) and rank 1 (a worker: worker_args) when there is one."""
    return [0, 1] if recipe.nodes > 1 else [0]


def _flags_of(recipe: Recipe, engine_argv: Sequence[str]) -> list[str]:
    return list(engine_argv[len(recipe.entrypoint) :])


def probe_commands(
    recipe: Recipe, launch: LaunchPlan, docker_base: Sequence[str] | None
) -> list[tuple[list[str], list[int]]]:
    """(argv to run on the head, the ranks it answers for). Pure.

    `docker_base`: the head's docker command (None: process runtime, the twin runs in place)."""
    ranks = probe_ranks(recipe)
    if recipe.simulated:
        out = []
        for rank in ranks:
            r = launch.rank(rank)
            env = {k: v for k, v in r.env.items() if not is_secret_name(k)}
            if docker_base is None:
                argv = ["env", *(f"{k}={v}" for k, v in env.items()), *r.engine_argv, PARSE_ONLY]
            else:
                argv = [*docker_base, "run", "--rm", "--network", "none"]
                for volume in recipe.docker.volumes:
                    argv += ["--volume", volume]
                for key, value in env.items():
                    argv += ["--env", f"{key}={value}"]
                argv += ["--entrypoint", r.engine_argv[0], recipe.image.reference]
                argv += [*r.engine_argv[1:], PARSE_ONLY]
            out.append((argv, [rank]))
        return out
    if docker_base is None:
        return []  # a real recipe on the process runtime: no image to ask
    argvs = [_flags_of(recipe, launch.rank(rank).engine_argv) for rank in ranks]
    env = {k: v for k, v in recipe.env.items() if not is_secret_name(k)}
    argv = [*docker_base, "run", "--rm", "--network", "none", "--platform", recipe.image.platform]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    argv += ["--entrypoint", "python3", recipe.image.reference]
    argv += ["-c", PROBE_SCRIPT.read_text(), "--batch", recipe.engine.value, json.dumps(argvs)]
    return [(argv, ranks)]


def parse_verdicts(stdout: str, ranks: Sequence[int]) -> list[ArgvVerdict]:
    """The MARK lines of a probe's output, one per rank in order. Pure."""
    answers = [ln[len(MARK) :] for ln in stdout.splitlines() if ln.startswith(MARK)]
    if len(answers) != len(ranks):
        raise ValueError(f"the probe answered {len(answers)} of {len(ranks)} argv")
    return [
        ArgvVerdict.model_validate({**json.loads(text), "rank": rank})
        for text, rank in zip(answers, ranks, strict=True)
    ]


def _shown(argv: Sequence[str]) -> list[str]:
    """The probe command for the report: the script's text replaced by its file name."""
    return [f"<{PROBE_SCRIPT.name}>" if len(a) > 200 else a for a in argv]


async def probe_engine_args(
    recipe: Recipe,
    launch: LaunchPlan,
    head: Transport,
    *,
    docker: bool,
    timeout_s: float,
) -> EngineArgsResult:
    """Ask the head. Never raises for what it finds: a failure to ask is `error`."""
    started = time.monotonic()
    node = head.node
    base = list(DockerCli.of(node).base) if docker else None
    commands = probe_commands(recipe, launch, base)
    shown = _shown(commands[0][0]) if commands else []
    verdicts: list[ArgvVerdict] = []
    try:
        for argv, ranks in commands:
            done = await head.run(argv, timeout_s=timeout_s)
            try:
                verdicts += parse_verdicts(done.stdout, ranks)
            except ValueError as exc:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                raise ClusterError(f"{exc} (exit {done.exit_status}): {' | '.join(tail)}") from None
    except ClusterError as exc:
        return EngineArgsResult(
            node=node.name,
            argv=shown,
            verdicts=verdicts,
            error=str(exc),
            elapsed_s=round(time.monotonic() - started, 3),
        )
    return EngineArgsResult(
        node=node.name,
        argv=shown,
        verdicts=verdicts,
        elapsed_s=round(time.monotonic() - started, 3),
    )


_ARGUMENT = re.compile(
    r"argument ((?:-{1,2}[\w-]+/?)+)|(?:unrecognized arguments|option): (-{1,2}[\w-]+)"
)
_REQUIRES = re.compile(r"(--[\w-]+)")


def offending_flag(error: str) -> str | None:
    """The flag an engine's error line names: `argument --x: ...`, `unrecognized arguments: --x`,
    `ambiguous option: --x ...`, or the first `--flag` of a validate() message."""
    m = _ARGUMENT.search(error)
    if m:
        return (m.group(1) or m.group(2)).split("/")[0]
    m = _REQUIRES.search(error)
    return m.group(1) if m else None


def recipe_line(path: Path | None, flag: str | None) -> str | None:
    """`FILE:LINE` of the recipe line that passes `flag` (the first), or None."""
    if path is None or flag is None or not path.is_file():
        return None
    pattern = re.compile(rf"(^|[\s\[,'\"]){re.escape(flag)}($|[\s\],='\"])")
    lines = path.read_text(encoding="utf-8").splitlines()
    found = [n for n, line in enumerate(lines, start=1) if pattern.search(line.split("#", 1)[0])]
    # An `args` item (`- [--flag, value]`) before any other mention (engine_version's notes).
    items = [n for n in found if lines[n - 1].lstrip().startswith("- ")]
    best = items or found
    return f"{path}:{best[0]}" if best else None


def verdict_problems(
    result: EngineArgsResult, recipe: Recipe, recipe_path: Path | None
) -> list[tuple[str, str, str, str]]:
    """(severity, what, evidence, fix) for each thing the parser said. Pure."""
    out: list[tuple[str, str, str, str]] = []
    engine = recipe.engine.value
    if result.error is not None:
        out.append(
            (
                "warning",
                f"could not ask the image's {engine} parser on {result.node}: argv unchecked",
                result.error,
                "make sure the head holds the image and can `docker run` it",
            )
        )
        return out
    for v in result.verdicts:
        who = f"{engine} {v.version or '?'}" + (" (simulated)" if v.parser == "simulator" else "")
        if v.missing:
            out.append(
                (
                    "warning",
                    f"the image has no importable {engine}: rank {v.rank}'s argv is unchecked",
                    v.missing,
                    "check image.reference and engine: the probe imports the recipe's engine",
                )
            )
            continue
        if not v.ok:
            flag = offending_flag(v.error or "")
            where = recipe_line(recipe_path, flag)
            change = (
                f"change {flag} at {where}" if where else f"change {flag or 'the flag'} in args"
            )
            out.append(
                (
                    "error",
                    f"the image's {who} refuses rank {v.rank}'s argv",
                    v.error or "?",
                    f"{change} (the engine would exit 2 before loading anything)",
                )
            )
        for given, full in v.abbreviations:
            out.append(
                (
                    "warning",
                    f"{given} is not a flag of {who}: argparse prefix-matched it to {full}",
                    f"rank {v.rank}: {given} -> {full}",
                    f"write {full} (one more flag starting {given} would make it an error)",
                )
            )
        for text in v.warnings:
            if "deprecat" in text.lower() or "will be removed" in text.lower():
                out.append(("warning", f"{who} reports a deprecation", text, "follow the engine"))
    return out


def recipe_path_of(recipe: Recipe, paths: Mapping[str, Path]) -> Path | None:
    return paths.get(recipe.name)
