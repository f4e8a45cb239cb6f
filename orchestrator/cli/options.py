"""Options and arguments that several commands share: one declaration, so the flag, its help
and its completion read the same in every command that takes it."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.cli.complete import complete_recipe

RecipeArg = Annotated[
    str,
    typer.Argument(
        help="a built-in recipe's name, or a path to a .yaml", autocompletion=complete_recipe
    ),
]
WideOpt = Annotated[bool, typer.Option("--wide", help="every column of the table, however wide")]
ConnectOpt = Annotated[
    float, typer.Option("--connect-timeout", help="seconds for TCP + SSH handshake per node")
]
StallOpt = Annotated[
    float,
    typer.Option("--stall-timeout", help="seconds without an answer before a hop is dead"),
]
