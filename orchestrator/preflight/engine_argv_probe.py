"""Parse one rank's engine argv with the engine's own parser, and say what it made of it.

A standalone script (standard library plus the engine; it never imports `orchestrator`): it runs
inside the recipe's own image in a throwaway probe container (`cluster preflight`, check
`engine-args`), and under the test tier's side environments (tests/engines/) with the public
release a recipe declares. Parse only: no GPU, no weights, no server.

    python3 engine_argv_probe.py ENGINE ARG...        (or python3 -c "$(cat it)" ENGINE ARG...)
    python3 engine_argv_probe.py --batch ENGINE [JSON]  (argv lists; JSON on stdin when absent)
    python3 engine_argv_probe.py --flags ENGINE         (the serve parser's options, as data)

ENGINE is `sglang` or `vllm`; ARG... are the flags after the program (`vllm serve` takes the
model as its positional argument). The last stdout line is `ENGINE_ARGS_PROBE {json}`:
ok, engine, version, error (the parser's own error line), warnings (what the engine logged or
warned while parsing: its deprecations), abbreviations ([given, full] for a flag argparse
prefix-matched: accepted today, an error the day another flag shares the prefix) and parsed
(dest -> value). The exit status is 0 when the probe ran, whatever the verdict; 3 when the
engine is not importable here (the simulator's imitation answers instead, when present).

How each engine parses (read from their sources, pinned in tests/engines/parsers/):
- SGLang: `prepare_server_args()` builds `argparse.ArgumentParser(prog="sglang serve")`, calls
  `ServerArgs.add_cli_args(parser)` and `parser.parse_args(argv)`, then `ServerArgs(...)`, whose
  `__post_init__` reads the model's config and the GPU. The probe stops after `parse_args`.
- vLLM: `vllm` is `vllm.entrypoints.cli.main:main`, which builds the subcommand parsers, parses,
  calls the subcommand's `validate(args)` and then its `cmd(args)`. The probe replaces
  `ServeSubcommand.cmd` (which would start the server) and keeps the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import warnings
from typing import Any

MARK = "ENGINE_ARGS_PROBE "


class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.lines.append(record.getMessage())


def _record_abbreviations(found: list[list[str]]) -> None:
    """Note every optional argparse accepted by prefix (`--tp` for `--tp-size`)."""
    original = argparse.ArgumentParser._parse_optional

    def parse_optional(self: argparse.ArgumentParser, arg_string: str) -> Any:
        result = original(self, arg_string)
        first = result[0] if isinstance(result, list) and result else result
        if isinstance(first, tuple) and first and first[0] is not None:
            given = arg_string.split("=", 1)[0]
            if given not in self._option_string_actions:
                full = first[1] if len(first) > 1 and isinstance(first[1], str) else "?"
                found.append([given, full])
        return result

    argparse.ArgumentParser._parse_optional = parse_optional  # type: ignore[method-assign]


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


def _parse_sglang(argv: list[str]) -> dict[str, Any]:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return vars(parser.parse_args(argv))


class _Parsed(Exception):
    def __init__(self, args: dict[str, Any]) -> None:
        super().__init__("parsed")
        self.args_seen = args


def _parse_vllm(argv: list[str]) -> dict[str, Any]:
    # Import first: modules that load kernels at import (vllm._custom_ops) must not see the CPU
    # platform forced below, whose kernels a CPU-only torch may lack.
    import vllm.entrypoints.cli.serve as serve
    from vllm import platforms
    from vllm.entrypoints.cli.main import main

    # The probe container has no GPU, so vLLM's platform detection finds none and argument
    # defaults that ask it would raise "Failed to infer device type". vLLM's own `vllm bench`
    # path falls back to the CPU platform the same way; parsing does not depend on it.
    if platforms.current_platform.is_unspecified():
        from vllm.platforms.cpu import CpuPlatform

        platforms.current_platform = CpuPlatform()

    def stop(args: argparse.Namespace) -> None:
        raise _Parsed(vars(args))

    serve.ServeSubcommand.cmd = staticmethod(stop)
    sys.argv = ["vllm", "serve", *argv]
    try:
        main()
    except _Parsed as done:
        return done.args_seen
    raise RuntimeError("vllm's main() returned without reaching the serve subcommand")


def _version(engine: str) -> str | None:
    with contextlib.suppress(Exception):
        from importlib.metadata import version

        return version(engine)
    return None


_HANDLER = _Captured()


def _listen(engine: str) -> None:
    """Hear the engine's own loggers (after its import: vLLM's dictConfig resets handlers)."""
    for name in (engine, "sglang.srt"):
        logger = logging.getLogger(name)
        if _HANDLER not in logger.handlers:
            logger.addHandler(_HANDLER)


def probe(engine: str, argv: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = {"engine": engine, "ok": False, "error": None, "warnings": []}
    abbreviations: list[list[str]] = []
    _record_abbreviations(abbreviations)
    _listen(engine)
    stderr = io.StringIO()
    parsed: dict[str, Any] | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with contextlib.redirect_stderr(stderr):
                parsed = _parse_sglang(argv) if engine == "sglang" else _parse_vllm(argv)
        except SystemExit as exc:
            lines = [ln for ln in stderr.getvalue().splitlines() if ln.strip()]
            errors = [ln for ln in lines if "error:" in ln]
            result["error"] = (errors or lines or [f"exit status {exc.code}"])[-1]
        except Exception as exc:  # the engine's validate() raises its own types
            result["error"] = f"{type(exc).__name__}: {exc}"
    # Only what the engine itself said: its loggers, and Python warnings raised from its files.
    said = [*_HANDLER.lines, *(str(w.message) for w in caught if f"/{engine}/" in w.filename)]
    result["warnings"] = list(dict.fromkeys(said))
    result["version"] = _version(engine)
    result["abbreviations"] = abbreviations
    if parsed is not None:
        result["ok"] = True
        result["parsed"] = {k: _jsonable(v) for k, v in parsed.items() if not callable(v)}
    return result


def _preload(engine: str) -> None:
    """Import the parser's modules once, before forking one child per argv (batch mode)."""
    if engine == "sglang":
        import sglang.srt.server_args  # noqa: F401
    else:
        import vllm.entrypoints.cli.main
        import vllm.entrypoints.cli.serve  # noqa: F401


def batch(engine: str, argvs: list[list[str]]) -> list[dict[str, Any]]:
    """Each argv parsed in a forked child of one process that imported the engine once, so one
    argv's state (vLLM's warn-once caches, a patched subcommand) never leaks into the next."""
    _preload(engine)
    results: list[dict[str, Any]] = []
    for argv in argvs:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: parse, report, leave without running the parent's cleanup
            os.close(read)
            try:
                out = json.dumps(probe(engine, argv)).encode()
            except BaseException as exc:
                out = json.dumps({"engine": engine, "ok": False, "error": repr(exc)}).encode()
            with os.fdopen(write, "wb") as w:
                w.write(out)
            os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as r:
            data = r.read()
        os.waitpid(pid, 0)
        results.append(json.loads(data) if data else {"engine": engine, "ok": False, "error": "?"})
    return results


def _takes(action: argparse.Action) -> Any:
    """How many values an option consumes: 0, 1, or argparse's `?`, `*`, `+` (or a count)."""
    if action.nargs is None:
        return 0 if isinstance(action, _NO_VALUE_ACTIONS) else 1
    return action.nargs


_NO_VALUE_ACTIONS = (
    argparse._StoreConstAction,
    argparse._CountAction,
    argparse._HelpAction,
    argparse._VersionAction,
    argparse.BooleanOptionalAction,
)


def flag_table(engine: str) -> dict[str, Any]:
    """The serve parser's options: what the simulator imitates (tests/engines keeps it equal)."""
    seen: list[argparse.ArgumentParser] = []
    original = argparse.ArgumentParser.parse_known_args

    def record(self: argparse.ArgumentParser, *a: Any, **k: Any) -> Any:
        seen.append(self)
        return original(self, *a, **k)

    _preload(engine)
    argparse.ArgumentParser.parse_known_args = record  # type: ignore[method-assign]
    with contextlib.redirect_stderr(io.StringIO()):
        if engine == "sglang":
            _parse_sglang(["--model-path", "/m"])
        else:
            _parse_vllm(["/m"])
    parser = seen[-1]
    options: list[dict[str, Any]] = []
    positionals: list[dict[str, Any]] = []
    for action in parser._actions:
        kind = getattr(action.type, "__name__", None)
        choices = action.choices
        if isinstance(choices, set | frozenset | dict):  # no order of their own: sorted
            choices = sorted(choices, key=str)
        entry = {
            "options": list(action.option_strings),
            "dest": action.dest,
            "takes": _takes(action),
            "choices": _jsonable(list(choices)) if choices is not None else None,
            "type": kind if kind in ("int", "float") else None,
            "required": bool(action.required),
        }
        (options if action.option_strings else positionals).append(entry)
    return {
        "engine": engine,
        "version": _version(engine),
        "prog": parser.prog,
        "allow_abbrev": parser.allow_abbrev,
        "positionals": positionals,
        "options": sorted(options, key=lambda e: e["options"][0]),
    }


def main(args: list[str]) -> int:
    mode = args[0] if args and args[0] in ("--flags", "--batch") else None
    if mode:
        args = args[1:]
    if not args or args[0] not in ("sglang", "vllm"):
        print("usage: engine_argv_probe.py [--flags | --batch] sglang|vllm ARG...", file=sys.stderr)
        return 2
    engine, argv = args[0], args[1:]
    if mode == "--flags":
        print(MARK + json.dumps(flag_table(engine), sort_keys=True))
        return 0
    if mode == "--batch":  # argv lists as one JSON array (argument or stdin); a MARK line each
        for one in batch(engine, json.loads(argv[0] if argv else sys.stdin.read())):
            print(MARK + json.dumps(one))
        return 0
    try:
        __import__(engine)
    except ImportError as exc:
        print(MARK + json.dumps({"engine": engine, "ok": False, "missing": str(exc)}))
        return 3
    _preload(engine)
    print(MARK + json.dumps(probe(engine, argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
