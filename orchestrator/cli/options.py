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
InventoryOpt = Annotated[
    str | None,
    typer.Option(
        "--inventory",
        "-i",
        help="Ansible YAML inventory (default: $CLUSTER_INVENTORY, else the built-in simulated "
        "8-node cluster)",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="one JSON document on stdout")]
WideOpt = Annotated[bool, typer.Option("--wide", help="every column of the table, however wide")]
ConnectOpt = Annotated[
    float,
    typer.Option("--connect-timeout", help="seconds for TCP + SSH handshake per node (> 0)"),
]
AcceptKeysOpt = Annotated[
    bool,
    typer.Option(
        "--accept-new-host-keys",
        help="record host keys of nodes not yet in known_hosts (a changed key is still refused)",
    ),
]
StallOpt = Annotated[
    float,
    typer.Option("--stall-timeout", help="seconds without an answer before a hop is dead"),
]
