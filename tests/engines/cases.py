"""What the engines tier parses: every shipped recipe, every rank, as `cluster boot` renders it."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.models.recipe import Recipe, render
from orchestrator.recipes import list_recipes

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
