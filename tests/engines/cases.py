"""What the engines tier parses: every shipped recipe, every rank, as `cluster boot` renders it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from orchestrator.models.recipe import Recipe, render
from orchestrator.recipes import list_recipes
from orchestrator.simulator.flag_tables import table_path

HEAD_ADDR = "10.0.0.1"  # any address: the parsers only read it


@dataclass(frozen=True)
class RankArgv:
    recipe: Recipe
    rank: int
    argv: list[str]  # the flags after the program (entrypoint)

    @property
    def id(self) -> str:
        return f"{self.recipe.name}-rank{self.rank}"

    @property
    def release(self) -> tuple[str, str]:
        assert self.recipe.engine_version is not None
        return self.recipe.engine.value, self.recipe.engine_version.release


def rank_argvs() -> list[RankArgv]:
    out = []
    for recipe in list_recipes():
        for rank in range(recipe.nodes):
            cmd = render(recipe, rank, recipe.nodes, HEAD_ADDR, recipe.ports.rendezvous)
            out.append(RankArgv(recipe, rank, cmd.argv_tail[len(recipe.entrypoint) :]))
    return out


def without(argv: list[str], flags: list[str]) -> list[str]:
    """`argv` less each of `flags` and its value (`--flag value` or `--flag=value`)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.partition("=")[0]
        if name in flags:
            skip = "=" not in arg
            continue
        out.append(arg)
    return out


def imitation_argvs(engine: str, release: str) -> list[list[str]]:
    """What the simulator's imitation of a release is checked on: every shipped rank argv that
    release should accept (less its beyond_release flags), and mutations of the first: an unknown
    flag, an invalid choice, a non-number, a missing value, a prefix of a flag, stray positionals.
    Empty when no shipped recipe declares the release."""
    bases = []
    for case in rank_argvs():
        if case.release == (engine, release):
            version = case.recipe.engine_version
            assert version is not None
            bases.append(without(case.argv, version.beyond_release))
    return [*bases, *_mutations(engine, release, bases[0])] if bases else []


def _mutations(engine: str, release: str, base: list[str]) -> list[list[str]]:
    table = json.loads(table_path(engine, release).read_text())
    options = table["options"]
    used = {a.partition("=")[0] for a in base if a.startswith("-")}

    def first(pred: Any) -> str:
        for o in options:
            if pred(o) and not used & set(o["options"]):
                return str(o["options"][-1])
        raise AssertionError("no such option")

    choice = first(lambda o: o["choices"] and o["takes"] == 1 and o["type"] is None)
    number = first(lambda o: o["type"] == "int" and o["takes"] == 1)
    valued = first(lambda o: o["takes"] == 1 and o["options"][-1].startswith("--"))
    long_flag = max((o["options"][-1] for o in options), key=len)
    return [
        [*base, "--no-such-flag", "1"],
        [*base, choice, "not-a-choice"],
        [*base, f"{choice}=not-a-choice"],
        [*base, number, "eight"],
        [*base, valued],
        [*base, long_flag[:-3]] + ([] if _is_boolean(options, long_flag) else ["1"]),
        [*base, "stray-positional", "another"],
    ]


def _is_boolean(options: list[dict[str, Any]], flag: str) -> bool:
    return any(flag in o["options"] and o["takes"] == 0 for o in options)
