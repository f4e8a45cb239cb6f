"""Find, read and validate recipes. Every problem is a `RecipeError` naming the file and key.

A recipe file is one YAML mapping (`docs/recipes.md`). Its `name` defaults to the file's stem
and, when written, must equal it: `cluster boot NAME` finds `recipes/NAME.yaml`, and a run named
after one recipe must not have been booted from another.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from orchestrator.errors import RecipeError
from orchestrator.models.recipe import RankCommand, Recipe, render
from orchestrator.paths import builtin_recipes_dir
from orchestrator.yamlio import YamlProblem, load_yaml

__all__ = [
    "RankCommand",
    "Recipe",
    "find_recipe",
    "list_recipes",
    "load_recipe",
    "recipe_names",
    "render",
    "resolve_recipe",
]

SUFFIXES = (".yaml", ".yml")


def load_recipe(path: Path | str) -> Recipe:
    """Read and validate one recipe file. `RecipeError` (exit 2) lists every problem at once."""
    path = Path(path)
    shown = str(path)
    try:
        data = load_yaml(path)
    except YamlProblem as exc:
        where = f"{shown}:{exc.line}" if exc.line else shown
        raise RecipeError(exc.message, where=where) from exc
    if not isinstance(data, dict):
        raise RecipeError(
            f"expected a mapping of recipe keys, got {_kind(data)}",
            where=shown,
            hint="docs/recipes.md has an annotated example",
        )
    name = data.get("name", path.stem)
    if name != path.stem:
        raise RecipeError(
            f"name {name!r} differs from the file name {path.name!r}",
            where=f"{shown}: key 'name'",
            hint="`cluster boot NAME` finds NAME.yaml: rename one of them",
        )
    try:
        return Recipe.model_validate({**data, "name": name})
    except ValidationError as exc:
        problems = [_problem(err) for err in exc.errors()]
    keys = {key for key, _ in problems}
    # `tp` defaults to `nodes`: when `nodes` itself is wrong, "tp: required" is not a second
    # mistake of the user's, only an echo of the first.
    if "nodes" in keys and "tp" not in data:
        problems = [(k, m) for k, m in problems if k != "tp"]
    key, msg = problems[0]
    lines = [f"{shown}: key '{k}': {m}" if k else f"{shown}: {m}" for k, m in problems[1:]]
    raise RecipeError(
        msg, where=f"{shown}: key '{key}'" if key else shown, more=tuple(lines)
    ) from None


def find_recipe(name_or_path: Path | str) -> Path:
    """A path that exists, else the built-in recipe of that name; `RecipeError` if neither."""
    candidate = Path(name_or_path)
    if candidate.is_file():
        return candidate
    if candidate.exists():
        raise RecipeError("not a file", where=str(candidate))
    text = str(name_or_path)
    if "/" in text or text.endswith(SUFFIXES):
        raise RecipeError("no such file", where=text)
    builtin = builtin_recipes_dir() / f"{text}.yaml"
    if builtin.is_file():
        return builtin
    names = recipe_names()
    close = difflib.get_close_matches(text, names, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise RecipeError(
        f"unknown recipe {text!r}",
        hint=f"{hint}available: {', '.join(names) or '(none)'}; or give a path to a .yaml file",
    )


def resolve_recipe(name_or_path: Path | str) -> Recipe:
    """`load_recipe(find_recipe(name_or_path))`: what `cluster boot NAME` does."""
    return load_recipe(find_recipe(name_or_path))


def recipe_names() -> list[str]:
    """The built-in recipes' names, sorted."""
    directory = builtin_recipes_dir()
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.yaml") if p.is_file())


def list_recipes() -> list[Recipe]:
    """Every built-in recipe, validated, sorted by name. A bad shipped recipe is an error."""
    return [load_recipe(builtin_recipes_dir() / f"{name}.yaml") for name in recipe_names()]


# ---------------------------------------------------------------------------------------------
# pydantic errors, one line each


def _problem(err: Any) -> tuple[str, str]:
    """(key path, message) of one pydantic error, e.g. ('image.digest', "...")."""
    loc: tuple[int | str, ...] = tuple(err["loc"])
    key = _key(loc)
    kind: str = err["type"]
    msg: str = err["msg"]
    if kind == "value_error":
        msg = msg.removeprefix("Value error, ")
    elif kind == "extra_forbidden":
        known = _known_keys(loc[:-1])
        msg = "unknown key" + (f" (known here: {', '.join(known)})" if known else "")
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        if close:
            msg += f"; did you mean {close[0]!r}?"
    elif kind in ("enum", "literal_error"):
        msg = f"{msg}, got {err.get('input')!r}"
    elif kind == "missing":
        msg = "required key is missing"
    elif kind in ("string_type", "int_type", "float_type", "bool_type", "dict_type", "list_type"):
        msg = f"{msg}, got {_kind(err.get('input'))}"
        if kind == "string_type" and loc and loc[0] in ("args", "worker_args", "env", "entrypoint"):
            msg += (
                " (quote it: YAML reads 8 as a number, true as a boolean and an unquoted "
                "{placeholder} as a mapping)"
            )
    return key, msg


def _key(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if part == "[key]":  # pydantic's marker for a bad mapping key
            out += " (the key itself)"
        elif isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _known_keys(loc: tuple[int | str, ...]) -> list[str]:
    """The keys the model at `loc` accepts (nested models only)."""
    model: type[BaseModel] = Recipe
    for part in loc:
        if not isinstance(part, str) or part not in model.model_fields:
            return []
        annotation = model.model_fields[part].annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)
