"""`cluster recipes`: list, show and validate recipes. Read-only; `--json` on every read command.

Problems are `RecipeError`s (exit 2), printed once by `cli.main` as one line.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
import yaml
from rich.table import Table

from orchestrator.cli.options import JsonOpt, RecipeArg
from orchestrator.cli.output import console, print_json
from orchestrator.models.recipe import Recipe
from orchestrator.recipes import find_recipe, list_recipes, load_recipe
from orchestrator.redact import redact

app = typer.Typer(
    help="The recipes: what to serve, with which engine, image, flags and timeouts.",
    no_args_is_help=True,
)


@app.command("list")
def list_cmd(as_json: JsonOpt = False) -> None:
    """The built-in recipes: name, engine, nodes, image and the seed each comes from."""
    recipes = list_recipes()
    if as_json:
        print_json(recipes)
        return
    console.print(render_table(recipes))


@app.command("show")
def show_cmd(
    name: RecipeArg,
    as_json: JsonOpt = False,
) -> None:
    """The recipe as the orchestrator sees it: every key, defaults filled in."""
    path = find_recipe(name)
    recipe = load_recipe(path)
    if as_json:
        print_json(recipe)
        return
    console.print(f"# {path} (resolved: every default filled in)", markup=False, soft_wrap=True)
    console.print(render_yaml(recipe), markup=False, soft_wrap=True)


@app.command("validate")
def validate_cmd(
    path: Annotated[str, typer.Argument(help="a recipe file (or a built-in recipe's name)")],
) -> None:
    """Check one recipe; prints `ok: NAME`, or one line per problem and exits 2."""
    recipe = load_recipe(find_recipe(path))
    console.print(f"ok: {recipe.name}", markup=False)


def render_table(recipes: list[Recipe]) -> Table:
    table = Table(title="recipes", title_justify="left")
    for column in ("name", "engine", "nodes", "image", "seed"):
        table.add_column(column, overflow="fold")
    for r in recipes:
        name = r.name + (" (simulated)" if r.simulated else "")
        table.add_row(name, r.engine.value, str(r.nodes), r.image.reference, r.seed or "")
    return table


class _Flow(list[str]):
    """A list YAML writes on one line: one flag and its values."""


class _Dumper(yaml.SafeDumper):
    pass


def _flow(dumper: yaml.SafeDumper, data: _Flow) -> yaml.Node:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)


_Dumper.add_representer(_Flow, _flow)


def group_flags(argv: list[str]) -> list[str | _Flow]:
    """`[--tp, 8, --enable-x]` -> `[[--tp, 8], --enable-x]`: a flag with its values per line.

    The recipe loader flattens such groups, so the output of `show` is itself a valid recipe.
    """
    out: list[str | _Flow] = []
    for arg in argv:
        last = out[-1] if out else None
        if not arg.startswith("-") and last is not None:
            if isinstance(last, _Flow):
                last.append(arg)
                continue
            if last.startswith("-"):
                out[-1] = _Flow([last, arg])
                continue
        out.append(arg)
    return out


def render_yaml(recipe: Recipe) -> str:
    """The resolved recipe as YAML, keys in the model's order, one flag and its values a line."""
    data: dict[str, Any] = redact(recipe.model_dump(mode="json"))
    for key in ("args", "worker_args"):
        data[key] = group_flags(data[key])
    data["entrypoint"] = _Flow(data["entrypoint"])
    text = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
    return text.rstrip()
