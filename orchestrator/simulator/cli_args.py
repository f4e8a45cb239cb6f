"""The engines' command lines, as far as the orchestrator uses them; everything else is echoed.

The simulator runs as `python -m orchestrator.simulator ENGINE [SUBCOMMAND] ARGS...`:

    sglang [serve | launch_server] --model-path P --tp 8 --nnodes 8 --node-rank R
           --dist-init-addr HEAD:PORT --host H --port N [--watchdog-timeout S]
           [--dist-timeout S] ...
    vllm serve MODEL --tensor-parallel-size 8 --nnodes 8 --node-rank R --master-addr HEAD
           --master-port P [--headless] --port N ...

so a recipe's `args` pass through unchanged; only the program in front differs. Flags the
simulator does not interpret are shown in the server-args dump, the way the real engines print
every argument at startup. Flags `--sim-*` belong to the simulator and are never echoed.

A twin plays one release of its engine: with `CLUSTER_SIM_ENGINE_RELEASE` set (make_twin sets it
from the recipe's `engine_version`), the flags are first judged as that release's argparse would
judge them (flag_tables.py: the flags and choices extracted from the real parser), and a refusal
ends the rank with argparse's own error line and status 2, as the real engine's would.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.simulator.flag_tables import (
    ENV_BEYOND,
    ENV_RELEASE,
    TableError,
    check,
    load_table,
)

ENGINES = ("sglang", "vllm")

# Flags that never take a value. A flag not listed here takes the next token as its value unless
# that token is another flag (`--enable-prefix-caching --tool-call-parser mistral`).
_BOOLEAN_FLAGS = frozenset(
    {
        "--headless",
        "--enable-expert-parallel",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--enable-auto-tool-choice",
        "--trust-remote-code",
        "--enforce-eager",
        "--disable-cuda-graph",
        "--disable-radix-cache",
        "--enable-multimodal",
        "--skip-server-warmup",
        "--language-model-only",
        "--disable-custom-all-reduce",
        "--enable-torch-compile",
        "--enable-dp-attention",
        "--disable-log-requests",
        "--disable-log-stats",
        "--enable-chunked-prefill",
    }
)
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


class ArgsError(ValueError):
    """A command line the simulator cannot run; argparse would exit 2 the same way."""


class EngineRefusal(ArgsError):
    """The release the twin plays refuses the flags: `line` is argparse's own error line."""

    def __init__(self, line: str, prog: str) -> None:
        super().__init__(line)
        self.line = line
        self.prog = prog


def _imitate(engine: str, flags: list[str], env: Mapping[str, str]) -> None:
    """Refuse what the played release's parser refuses (nothing when no release is set)."""
    release = env.get(ENV_RELEASE)
    if not release:
        return
    try:
        table = load_table(engine, release)
    except TableError as exc:
        raise ArgsError(str(exc)) from None
    beyond = [f for f in env.get(ENV_BEYOND, "").split(",") if f]
    verdict = check(table, flags, beyond)
    if verdict.error is not None:
        raise EngineRefusal(verdict.error, table.prog)


def _without_sim_flags(argv: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg.startswith("--sim-"):
            skip = "=" not in arg
        else:
            out.append(arg)
    return out


@dataclass
class EngineArgs:
    engine: str
    subcommand: str | None
    model_path: str
    served_model_name: str
    host: str
    port: int
    tp: int
    nnodes: int
    node_rank: int
    dist_addr: str
    dist_port: int
    dist_timeout_s: float | None  # --dist-timeout when given (SGLang)
    watchdog_timeout_s: float | None  # --watchdog-timeout when given (SGLang)
    max_len: int | None  # --context-length / --max-model-len
    mem_fraction: float | None  # --mem-fraction-static / --gpu-memory-utilization
    headless: bool
    given: list[tuple[str, object]] = field(default_factory=list)  # every engine flag, in order
    sim_faults: list[str] = field(default_factory=list)
    sim_scale: str | None = None
    sim_read_rate: str | None = None

    @property
    def world(self) -> int:
        """Ranks in the rendezvous: one process per node (one GB10 GPU per Spark)."""
        return self.nnodes

    @property
    def tp_rank(self) -> int:
        """This node's first TP rank (TP spans the nodes; one GPU per node)."""
        return self.node_rank * max(self.tp // self.nnodes, 1)

    def value(self, name: str) -> object | None:
        """The last value given to `name` (dashes or underscores), or None."""
        key = name.lstrip("-").replace("-", "_")
        found: object | None = None
        for k, v in self.given:
            if k == key:
                found = v
        return found


def _coerce(value: str) -> object:
    if _NUMBER.match(value):
        return float(value) if "." in value else int(value)
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


def _is_flag(arg: str) -> bool:
    return arg.startswith("-") and arg not in ("-", "--") and not _NUMBER.match(arg)


def _tokens(argv: list[str]) -> tuple[list[str], list[tuple[str, str | None]]]:
    """Positionals, and (flag, value-or-None) pairs in order."""
    positionals: list[str] = []
    flags: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if _is_flag(arg):
            name, eq, value = arg.partition("=")
            if eq:
                flags.append((name, value))
            elif name in _BOOLEAN_FLAGS:
                flags.append((name, None))
            elif i + 1 < len(argv) and not _is_flag(argv[i + 1]):
                flags.append((name, argv[i + 1]))
                i += 1
            else:
                flags.append((name, None))
        else:
            positionals.append(arg)
        i += 1
    return positionals, flags


def parse(argv: list[str], env: Mapping[str, str] | None = None) -> EngineArgs:
    """`ENGINE [SUBCOMMAND] ARGS` -> EngineArgs; ArgsError names the problem.

    `env`: the rank's environment; its CLUSTER_SIM_ENGINE_RELEASE makes the played release's
    parser judge the flags first (EngineRefusal)."""
    if not argv or argv[0] not in ENGINES:
        raise ArgsError(
            f"the first argument names the engine to imitate: {' or '.join(ENGINES)} "
            f"(got {argv[0] if argv else 'nothing'!r})"
        )
    engine, rest = argv[0], list(argv[1:])
    subcommand: str | None = None
    if rest and rest[0] in ("serve", "launch_server", "sglang.launch_server"):
        subcommand = rest.pop(0)
    elif engine == "vllm":
        raise ArgsError("vllm: expected the `serve` subcommand (vllm serve MODEL ...)")
    _imitate(engine, _without_sim_flags(rest), env or {})
    positionals, flags = _tokens(rest)

    given: list[tuple[str, object]] = []
    sim_faults: list[str] = []
    sim: dict[str, str] = {}
    for name, value in flags:
        if name == "--sim-fault":
            if not value:
                raise ArgsError("--sim-fault needs a spec (see orchestrator/simulator/faults.py)")
            sim_faults.append(value)
        elif name in ("--sim-scale", "--sim-read-rate"):
            if not value:
                raise ArgsError(f"{name} needs a value")
            sim[name] = value
        elif name.startswith("--sim-"):
            raise ArgsError(
                f"unknown simulator flag {name} (known: --sim-fault, --sim-scale, --sim-read-rate)"
            )
        else:
            given.append(
                (name.lstrip("-").replace("-", "_"), True if value is None else _coerce(value))
            )

    def last(*names: str) -> str | None:
        keys = {n.lstrip("-").replace("-", "_") for n in names}
        found: str | None = None
        for k, v in given:
            if k in keys:
                found = str(v)
        return found

    def number(text: str | None, flag: str, kind: type[float] = float) -> float | None:
        """`text` as `kind`, with argparse's complaint ("invalid int value") when it is not."""
        if text is None:
            return None
        try:
            return kind(text)
        except ValueError:
            raise ArgsError(f"{flag}: invalid {kind.__name__} value: {text!r}") from None

    def integer(text: str | None, flag: str, default: int) -> int:
        value = number(text, flag, int)
        return default if value is None else int(value)

    if engine == "sglang":
        model = last("--model-path", "--model")
        if model is None:
            raise ArgsError("sglang: the following arguments are required: --model-path")
        tp = integer(last("--tp", "--tp-size", "--tensor-parallel-size"), "--tp", 1)
        default_port = 30000
        addr_text = last("--dist-init-addr")
        dist_addr, dist_port = "127.0.0.1", 20000
        if addr_text:
            host, colon, port = addr_text.rpartition(":")
            if not colon or not port.isdigit():
                raise ArgsError(f"--dist-init-addr {addr_text!r}: expected HOST:PORT")
            dist_addr, dist_port = host.strip("[]"), int(port)
        max_len = last("--context-length")
        mem = last("--mem-fraction-static")
        headless = False
    else:
        model = last("--model")
        if positionals:
            model = positionals[0]
            given.insert(0, ("model_tag", model))
        if model is None:
            raise ArgsError("vllm serve: a model is required (positional or --model)")
        tp = integer(last("--tensor-parallel-size", "-tp"), "--tensor-parallel-size", 1)
        default_port = 8000
        dist_addr = last("--master-addr") or "127.0.0.1"
        dist_port = integer(last("--master-port"), "--master-port", 29501)
        max_len = last("--max-model-len")
        mem = last("--gpu-memory-utilization")
        headless = last("--headless") is not None
    nnodes = integer(last("--nnodes"), "--nnodes", 1)
    node_rank = integer(last("--node-rank"), "--node-rank", 0)
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise ArgsError(f"--node-rank {node_rank} is outside 0..{nnodes - 1} (--nnodes {nnodes})")
    if tp < nnodes or tp % nnodes:
        raise ArgsError(f"tensor parallel size {tp} must be a multiple of --nnodes {nnodes}")
    return EngineArgs(
        engine=engine,
        subcommand=subcommand,
        model_path=model,
        served_model_name=last("--served-model-name") or model,
        # The engines' defaults: SGLang binds loopback, vLLM every interface.
        host=last("--host") or ("127.0.0.1" if engine == "sglang" else "0.0.0.0"),  # noqa: S104
        port=integer(last("--port"), "--port", default_port),
        tp=tp,
        nnodes=nnodes,
        node_rank=node_rank,
        dist_addr=dist_addr,
        dist_port=dist_port,
        dist_timeout_s=number(last("--dist-timeout"), "--dist-timeout"),
        watchdog_timeout_s=number(last("--watchdog-timeout"), "--watchdog-timeout"),
        max_len=integer(max_len, "--context-length/--max-model-len", 0) or None,
        mem_fraction=number(mem, "--mem-fraction-static/--gpu-memory-utilization"),
        headless=headless,
        given=given,
        sim_faults=sim_faults,
        sim_scale=sim.get("--sim-scale"),
        sim_read_rate=sim.get("--sim-read-rate"),
    )
