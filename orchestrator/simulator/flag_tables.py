"""The engines' own serve flags, per release, as data; and argparse's verdict on an argv, imitated.

A twin plays one release of its engine (the recipe's `engine_version`), so it must refuse what that
release refuses: an unknown flag, a value outside a flag's choices, a number that is not one, a
missing value or a missing required flag. The tables under `engine_flags/` were extracted from the
real parsers (`orchestrator/preflight/engine_argv_probe.py --flags`, run by the engines test tier
against the pinned release), and `tests/engines/` holds each table equal to its release's parser,
and this imitation's verdicts equal to the parser's on the shipped recipes and their mutations.

What is imitated is argparse itself (both engines use it): exact or unique-prefix option matching
(SGLang allows prefixes; vLLM's parser does not), `--flag=value`, the number of values each action
takes, `choices`, and `type=int`/`float`; the error lines are argparse's own wording. Not imitated:
the engines' checks after parsing (vLLM's `validate`: "--enable-auto-tool-choice requires
--tool-call-parser"); preflight's `engine-args` check runs the real ones.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

TABLES_DIR = Path(__file__).with_name("engine_flags")
ENV_RELEASE = "CLUSTER_SIM_ENGINE_RELEASE"
"""The release a twin plays (from the recipe's engine_version.release); unset: no imitation."""
ENV_BEYOND = "CLUSTER_SIM_BEYOND_RELEASE"
"""Comma-separated flags the image's build accepts beyond that release (engine_version)."""

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


class TableError(ValueError):
    """No table for that engine and release."""


@dataclass(frozen=True)
class Action:
    options: tuple[str, ...]
    dest: str
    takes: int | str  # 0, 1, n, or argparse's "?", "*", "+"
    choices: tuple[Any, ...] | None
    type: str | None  # "int", "float" or None (a string, or a converter not imitated)
    required: bool

    @property
    def name(self) -> str:
        """argparse's name for the action in errors: its option strings joined by '/'."""
        return "/".join(self.options) if self.options else self.dest


@dataclass(frozen=True)
class FlagTable:
    engine: str
    release: str
    prog: str
    allow_abbrev: bool
    options: dict[str, Action]
    positionals: tuple[Action, ...]


@dataclass
class Verdict:
    """argparse's outcome: `error` is its whole error line (`PROG: error: ...`), or None."""

    error: str | None
    abbreviations: list[tuple[str, str]] = field(default_factory=list)
    values: dict[str, object] = field(default_factory=dict)


def _action(entry: dict[str, Any]) -> Action:
    choices = entry.get("choices")
    return Action(
        options=tuple(entry.get("options", ())),
        dest=str(entry["dest"]),
        takes=entry["takes"],
        choices=tuple(choices) if choices is not None else None,
        type=entry.get("type"),
        required=bool(entry.get("required", False)),
    )


def table_path(engine: str, release: str) -> Path:
    return TABLES_DIR / f"{engine}-{release}.json"


def releases(engine: str) -> list[str]:
    """The releases a table is stored for, e.g. ['0.5.10', '0.5.23']."""
    found = [p.stem.removeprefix(engine + "-") for p in TABLES_DIR.glob(f"{engine}-*.json")]
    return sorted(found, key=lambda v: tuple(int(x) for x in v.split(".") if x.isdigit()))


@cache
def load_table(engine: str, release: str) -> FlagTable:
    path = table_path(engine, release)
    if not path.is_file():
        known = ", ".join(releases(engine)) or "none"
        raise TableError(
            f"no flag table for {engine} {release} (stored: {known}); extract it with "
            "tests/engines/flagtables.py after pinning it in tests/engines/parsers/"
        )
    data = json.loads(path.read_text())
    options: dict[str, Action] = {}
    for entry in data["options"]:
        action = _action(entry)
        for option in action.options:
            options[option] = action
    return FlagTable(
        engine=engine,
        release=release,
        prog=str(data["prog"]),
        allow_abbrev=bool(data["allow_abbrev"]),
        options=options,
        positionals=tuple(_action(e) for e in data["positionals"]),
    )


def _is_flag(arg: str) -> bool:
    return arg.startswith("-") and arg != "-" and not _NEGATIVE_NUMBER.match(arg)


class _Refused(Exception):
    pass


def _convert(action: Action, value: str) -> object:
    if action.type in ("int", "float"):
        try:
            converted: object = int(value) if action.type == "int" else float(value)
        except ValueError:
            raise _Refused(
                f"argument {action.name}: invalid {action.type} value: {value!r}"
            ) from None
    else:
        converted = value
    if action.choices is not None and converted not in action.choices:
        shown = ", ".join(repr(c) for c in action.choices)
        raise _Refused(f"argument {action.name}: invalid choice: {value!r} (choose from {shown})")
    return converted


def _match(table: FlagTable, name: str, abbreviations: list[tuple[str, str]]) -> Action | None:
    exact = table.options.get(name)
    if exact is not None:
        return exact
    if not (table.allow_abbrev and name.startswith("--")):
        return None
    found = sorted(o for o in table.options if o.startswith(name) and o.startswith("--"))
    if len(found) > 1:
        raise _Refused(f"ambiguous option: {name} could match {', '.join(found)}")
    if found:
        abbreviations.append((name, found[0]))
        return table.options[found[0]]
    return None


def _take(action: Action, args: Sequence[str], i: int) -> tuple[list[str], int]:
    """The values `action` consumes from args[i:], and the index after them."""
    free: list[str] = []
    j = i
    while j < len(args) and not _is_flag(args[j]):
        free.append(args[j])
        j += 1
    takes = action.takes
    if takes == 0:
        return [], i
    if takes in (1, "?"):
        if free:
            return free[:1], i + 1
        if takes == 1:
            raise _Refused(f"argument {action.name}: expected one argument")
        return [], i
    if takes in ("*", "+"):
        if takes == "+" and not free:
            raise _Refused(f"argument {action.name}: expected at least one argument")
        return free, j
    count = int(takes)
    if len(free) < count:
        raise _Refused(f"argument {action.name}: expected {count} arguments")
    return free[:count], i + count


def check(table: FlagTable, argv: Sequence[str], beyond: Iterable[str] = ()) -> Verdict:
    """argparse's verdict on `argv` (the flags after the program), imitated from `table`.

    `beyond`: flags the image's build accepts that the release does not know; their values pass
    unchecked (the recipe's engine_version.beyond_release)."""
    skip = set(beyond)
    abbreviations: list[tuple[str, str]] = []
    values: dict[str, object] = {}
    extras: list[str] = []
    positionals: list[str] = []
    seen: set[str] = set()
    args = list(argv)
    try:
        i = 0
        while i < len(args):
            arg = args[i]
            i += 1
            if arg == "--":
                positionals.extend(args[i:])
                break
            if not _is_flag(arg):
                positionals.append(arg)
                continue
            name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
            if name in skip:
                if not eq and i < len(args) and not _is_flag(args[i]):
                    i += 1
                continue
            action = _match(table, name, abbreviations)
            if action is None:
                extras.append(arg)
                while not eq and i < len(args) and not _is_flag(args[i]):
                    extras.append(args[i])
                    i += 1
                continue
            seen.add(action.dest)
            if eq:
                if action.takes == 0:
                    raise _Refused(f"argument {action.name}: ignored explicit argument {inline!r}")
                given = [inline]
            else:
                given, i = _take(action, args, i)
            converted = [_convert(action, v) for v in given]
            values[action.dest] = (
                True if action.takes == 0 else converted[0] if len(converted) == 1 else converted
            )
        for action in table.positionals:
            if positionals and action.takes in (1, "?"):
                values[action.dest] = _convert(action, positionals.pop(0))
            elif action.takes in ("*", "+"):
                values[action.dest] = [_convert(action, v) for v in positionals]
                positionals = []
        missing = [a.name for a in table.options.values() if a.required and a.dest not in seen]
        if missing:
            names = ", ".join(dict.fromkeys(missing))
            raise _Refused(f"the following arguments are required: {names}")
    except _Refused as refused:
        return Verdict(f"{table.prog}: error: {refused}", abbreviations, values)
    extras.extend(positionals)
    if extras:
        # vLLM's `serve` is a subcommand: its extras are reported by the top parser, `vllm`.
        prog = table.prog.split()[0] if table.engine == "vllm" else table.prog
        return Verdict(f"{prog}: error: unrecognized arguments: {' '.join(extras)}", abbreviations)
    return Verdict(None, abbreviations, values)
