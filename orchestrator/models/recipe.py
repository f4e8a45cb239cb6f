"""What to serve and how: one recipe per lane. Strict, frozen, inert.

A recipe names the engine, the image, the program the image runs (`entrypoint`, always explicit),
the engine flags (`args`, passed through unchanged), the `docker run` options of a rank
container, the model, the ports and the phase timeouts. It decides nothing about nodes: the
rendezvous plan picks the head address and each node's NCCL environment, then `render()` fills
the recipe's per-rank placeholders.

Every refusal below is a lesson from the seeds (`shared/seeds/`); `docs/recipes.md` is the
reference for people. Cross-field checks live in field validators (fields are validated in
declaration order, so `args` sees `nodes`, `tp`, `ports` and `model`); that way each problem is
reported under its own key and all of them at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    BeforeValidator,
    Field,
    Strict,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from orchestrator.models.base import StrictModel


class Engine(StrEnum):
    sglang = "sglang"
    vllm = "vllm"


# --------------------------------------------------------------------------------------------
# Templating: the only values that differ between ranks of one boot.

PLACEHOLDERS: frozenset[str] = frozenset({"node_rank", "nnodes", "head_addr", "head_port", "tp"})
"""`{name}` placeholders allowed in `args`, `worker_args` and `env` values.

`{{name}}` is a literal `{name}`. Anything else in braces that is not a `{word}` (JSON such as
`{"method":"dspark"}`) is left alone.
"""

_TEMPLATE = re.compile(r"\{\{([A-Za-z_]\w*)\}\}|\{([A-Za-z_]\w*)\}")


def placeholders_in(text: str) -> list[str]:
    """The placeholder names used in `text`, in order (escaped `{{name}}` excluded)."""
    return [m.group(2) for m in _TEMPLATE.finditer(text) if m.group(2) is not None]


# Validation context for a recipe read back from a run's manifest (run_files.py).
RECORDED_KEY = "recorded"


def _check_template(text: str) -> str:
    unknown = [name for name in placeholders_in(text) if name not in PLACEHOLDERS]
    if unknown:
        known = ", ".join("{" + p + "}" for p in sorted(PLACEHOLDERS))
        raise ValueError(
            f"{text!r} uses unknown placeholder {{{unknown[0]}}} (known: {known}; "
            "write {{name}} for a literal {name})"
        )
    return text


def _substitute(text: str, values: Mapping[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return "{" + m.group(1) + "}"
        return values[m.group(2)]

    return _TEMPLATE.sub(one, text)


def _flatten_argv(value: Any) -> Any:
    """`args` items are strings, or a list of strings for one flag and its values.

    `[--tp, "8"]` on one YAML line keeps a flag, its value and its `# why` comment together; the
    list is flattened in order, so the engine sees exactly `--tp 8`.
    """
    if not isinstance(value, list):
        return value
    flat: list[Any] = []
    for item in value:
        if isinstance(item, list):
            flat.extend(item)
        else:
            flat.append(item)
    return flat


Argv = Annotated[list[StrictStr], BeforeValidator(_flatten_argv)]


def flag_values(argv: Sequence[str], names: Iterable[str]) -> list[str]:
    """Values given to any of `names` in `argv`, as `--flag value` or `--flag=value`."""
    wanted = set(names)
    found: list[str] = []
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if eq and flag in wanted:
            found.append(value)
        elif arg in wanted and i + 1 < len(argv):
            found.append(argv[i + 1])
    return found


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of the first `flag` in `argv` (`--flag value` or `--flag=value`); "" for a bare
    boolean flag (the next argument is another flag, or none); None when it is absent."""
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if eq and name == flag:
            return value
        if arg == flag:
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                return argv[i + 1]
            return ""
    return None


# --------------------------------------------------------------------------------------------
# Parts


_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class Image(StrictModel):
    """The container image every rank runs; one reference, verified by digest when given."""

    reference: StrictStr = Field(
        min_length=1, description="what `docker run` is given, e.g. lmsysorg/sglang:<tag>"
    )
    digest: StrictStr | None = Field(
        default=None,
        description="expected image digest `sha256:<64 hex>`; every node must hold exactly this",
    )
    platform: StrictStr = Field(
        default="linux/arm64",
        pattern=r"^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$",
        description="DGX Spark and Jetson Thor are arm64; a multi-arch tag must resolve to it",
    )
    size_bytes: StrictInt | None = Field(
        default=None,
        ge=1,
        description="the image's size (`docker image inspect -f '{{.Size}}'`); preflight wants "
        "twice this free on a node that must still load it (archive and layers side by side). "
        "Unset: 64 GiB",
    )

    @field_validator("reference")
    @classmethod
    def _reference(cls, v: str) -> str:
        if any(c.isspace() for c in v) or v.startswith("-"):
            raise ValueError(f"{v!r} is not an image reference")
        return v

    @field_validator("digest")
    @classmethod
    def _digest(cls, v: str | None) -> str | None:
        if v is not None and not _DIGEST.fullmatch(v):
            raise ValueError(
                f"{v!r} is not a full digest: expected 'sha256:' and 64 lowercase hex digits. "
                "A truncated digest (the seeds print 'sha256:2f0cd825…') cannot be verified: "
                "leave digest unset instead"
            )
        return v

    @model_validator(mode="after")
    def _reference_agrees_with_digest(self) -> Image:
        _, at, pinned = self.reference.partition("@")
        if at and self.digest is not None and pinned != self.digest:
            raise ValueError(
                f"reference pins {pinned} but digest says {self.digest}: they must agree"
            )
        return self


_ULIMIT_NAMES = frozenset(
    {
        "core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice",
        "nofile", "nproc", "rss", "rtprio", "rttime", "sigpending", "stack",
    }
)  # fmt: skip
_ULIMIT_VALUE = re.compile(r"-?\d+(:-?\d+)?")
_VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_VOLUME_OPTIONS = frozenset({"ro", "rw", "z", "Z", "shared", "slave", "private", "rshared"})
_VOLUME_OPTIONS |= {"rslave", "rprivate", "nocopy", "consistent", "cached", "delegated"}

# Flags a recipe may not put in `docker.extra`, and why. The orchestrator owns these, or a key
# of the recipe says the same thing in one checked place.
_REFUSED_DOCKER_FLAGS: dict[str, str] = {
    "--rm": (
        "rank containers must outlive their process so logs survive: seed 002 lost boot 1's "
        "and boot 2's evidence to --rm"
    ),
    "--restart": "a restarted rank hides its failure and rejoins a rendezvous that is gone",
    "--name": "the orchestrator names rank containers (deterministic names, one per run and rank)",
    "--detach": "the orchestrator starts rank containers detached already",
    "--entrypoint": "the recipe's `entrypoint` key is the program",
    "--network": "use docker.network",
    "--net": "use docker.network",
    "--gpus": "use docker.gpus",
    "--ipc": "use docker.ipc",
    "--shm-size": "use docker.shm_size",
    "--ulimit": "use docker.ulimits",
    "--volume": "use docker.volumes",
    "--env": "use the recipe's `env`",
    "--env-file": "use the recipe's `env`: every variable in the recipe, visible and checked",
    "--platform": "use image.platform",
}


class Docker(StrictModel):
    """`docker run` options of every rank container (the same on every node)."""

    gpus: StrictStr | None = Field(default="all", description="`--gpus`; None: no flag")
    ipc: Literal["host", "private", "shareable", "none"] | None = Field(
        default="host",
        description="NCCL, torch and vLLM's shm_broadcast share memory between processes",
    )
    shm_size: StrictStr | None = Field(
        default=None,
        pattern=r"^\d+(\.\d+)?[bkmgBKMG]?$",
        description="`--shm-size`; has no effect with ipc=host (the host's /dev/shm is used)",
    )
    ulimits: dict[StrictStr, StrictStr] = Field(
        default_factory=lambda: {"memlock": "-1:-1", "stack": "67108864:67108864"},
        description="name -> 'soft:hard'; RDMA pins memory, so memlock must be unlimited",
    )
    volumes: list[StrictStr] = Field(default_factory=list, description="host:container[:opts]")
    network: Literal["host", "bridge"] = Field(
        default="host",
        description=(
            "host: NCCL and Gloo bind the fabric interface by name and RoCE devices must be "
            "visible; ranks rendezvous on the head's fabric address. Required for nodes > 1"
        ),
    )
    extra: list[StrictStr] = Field(
        default_factory=list, description="further `docker run` flags, each `--flag[=value]`"
    )

    @field_validator("ulimits")
    @classmethod
    def _ulimits(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if name not in _ULIMIT_NAMES:
                raise ValueError(
                    f"unknown ulimit {name!r} (known: {', '.join(sorted(_ULIMIT_NAMES))})"
                )
            if not _ULIMIT_VALUE.fullmatch(value):
                raise ValueError(f"ulimit {name}={value!r}: expected 'soft:hard', e.g. '-1:-1'")
        return v

    @field_validator("volumes")
    @classmethod
    def _volumes(cls, v: list[str]) -> list[str]:
        for spec in v:
            parts = spec.split(":")
            if len(parts) not in (2, 3):
                raise ValueError(f"volume {spec!r}: expected host:container[:options]")
            host, container = parts[0], parts[1]
            if host.startswith("~"):
                raise ValueError(
                    f"volume {spec!r}: docker does not expand '~' (a shell does); "
                    "write the node's absolute path"
                )
            if not (host.startswith("/") or _VOLUME_NAME.fullmatch(host)):
                raise ValueError(f"volume {spec!r}: host side must be an absolute path or a name")
            if not container.startswith("/"):
                raise ValueError(f"volume {spec!r}: container side must be an absolute path")
            if len(parts) == 3 and not set(parts[2].split(",")) <= _VOLUME_OPTIONS:
                raise ValueError(f"volume {spec!r}: unknown options {parts[2]!r}")
        return v

    @field_validator("extra")
    @classmethod
    def _extra(cls, v: list[str]) -> list[str]:
        for flag in v:
            if not flag.startswith("--"):
                raise ValueError(
                    f"{flag!r}: each extra item is one long flag, `--flag` or `--flag=value` "
                    "(short flags and separate values are ambiguous)"
                )
            name = flag.partition("=")[0]
            if name in _REFUSED_DOCKER_FLAGS:
                raise ValueError(f"{name} is refused: {_REFUSED_DOCKER_FLAGS[name]}")
        return v

    def volume_pairs(self) -> list[tuple[str, str]]:
        """(host, container) of every volume."""
        return [(spec.split(":")[0], spec.split(":")[1]) for spec in self.volumes]


class Model(StrictModel):
    """The weights: where the engine finds them and how many bytes each rank reads."""

    id: StrictStr | None = Field(
        default=None, description="the Hugging Face id, for people and messages"
    )
    path: StrictStr = Field(
        description="the model path inside the container, as the engine sees it"
    )
    host_dir: StrictStr | None = Field(
        default=None,
        description="the weights' directory on every node (preflight checks it; progress reads it)",
    )
    expected_bytes_per_rank: StrictInt | None = Field(
        default=None, gt=0, description="bytes one rank reads while loading (load progress)"
    )

    @field_validator("path", "host_dir")
    @classmethod
    def _absolute(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError(f"{v!r} must be an absolute path")
        return v


class EngineVersion(StrictModel):
    """Which engine build the image runs, and the public release whose parser checks the argv.

    The test tier `tests/engines/` installs `engine==release` into a side environment and parses
    every rank's argv with that release's own parser; the simulator imitates the same release's
    flags and choices (orchestrator/simulator/engine_flags/). On real nodes preflight's
    `engine-args` check parses with the image's own parser, which has the last word.
    """

    release: StrictStr = Field(
        pattern=r"^\d+\.\d+\.\d+$",
        description="the public release (PyPI version) whose parser checks this recipe's argv",
    )
    image_build: StrictStr | None = Field(
        default=None,
        description="the version the image itself reports, when it is not a release "
        "(a dev or vendor build: e.g. 0.1.dev23730+g64053a10b)",
    )
    source: StrictStr = Field(
        min_length=1, description="where the version was read: the image and the seed's line"
    )
    beyond_release: list[StrictStr] = Field(
        default_factory=list,
        description="flags the image's build accepts and the public release refuses; each is "
        "explained in docs/recipes.md. The tier requires the release to refuse exactly these "
        "(and nothing else), so the day a release accepts them the entry must go",
    )

    @field_validator("beyond_release")
    @classmethod
    def _flags(cls, v: list[str]) -> list[str]:
        for flag in v:
            if not flag.startswith("--") or "=" in flag:
                raise ValueError(f"{flag!r}: name one long flag, e.g. --tokenizer-mode")
        return v


_PORT = Annotated[StrictInt, Field(ge=1, le=65535)]


class Ports(StrictModel):
    """TCP ports on the fabric. Defaults are filled per engine (see `DEFAULT_PORTS`)."""

    serve: _PORT = Field(description="the OpenAI-compatible HTTP server on rank 0")
    rendezvous: _PORT = Field(description="{head_port}: torch.distributed rendezvous on the head")

    @model_validator(mode="after")
    def _distinct(self) -> Ports:
        if self.serve == self.rendezvous:
            raise ValueError(f"serve and rendezvous are both {self.serve}: they must differ")
        return self


DEFAULT_PORTS: dict[Engine, dict[str, int]] = {
    # The engines' own defaults, so a recipe without `--port` and without `ports` agrees.
    # 29500 is torch.distributed's customary MASTER_PORT; vLLM lanes use 29501 as the
    # community launchers (eugr/spark-vllm-docker) do.
    Engine.sglang: {"serve": 30000, "rendezvous": 29500},
    Engine.vllm: {"serve": 8000, "rendezvous": 29501},
}

_SECONDS = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]

SGLANG_BARRIER_ENV = "SGLANG_UNBALANCED_LOAD_TIMEOUT_S"
"""The env knob of seed 002's patched SGLang image; stock SGLang's barrier is a 480 s constant."""


class Timeouts(StrictModel):
    """Phase timeouts in seconds: one object, each phase named (httpx's `Timeout`)."""

    connect: _SECONDS = Field(
        default=15.0, description="SSH connect and first command per node; a LAN handshake is <1 s"
    )
    image: _SECONDS = Field(
        default=1800.0,
        description="distribute and verify the image on every node (a ~35 GB image to 7 peers)",
    )
    exec_ready: _SECONDS = Field(
        default=120.0,
        description="prove each node can exec the image, retried with backoff (seed 002 boot 1)",
    )
    rendezvous: _SECONDS = Field(
        default=600.0,
        description="the first rank's start to every rank in the group (torch distributed init): "
        "ranks still missing then are RENDEZVOUS_STALLED, long before torch's own ~30 min store "
        "timeout would end them",
    )
    weights: _SECONDS = Field(
        default=3600.0,
        description="a rank's start to its `Load weight end`; 8x the 7-8 min load of seed 001",
    )
    barrier: _SECONDS = Field(
        default=480.0,
        description=(
            "SGLang's post-load barrier: UNBALANCED_MODEL_LOADING_TIMEOUT_S = 480; must equal "
            "env SGLANG_UNBALANCED_LOAD_TIMEOUT_S when the recipe sets it (derived if absent)"
        ),
    )
    ready: _SECONDS = Field(
        default=1800.0,
        description="weights loaded to HTTP ready: KV cache, autotune, CUDA graphs, warmup",
    )
    wedge: _SECONDS = Field(
        default=120.0,
        description="after READY: requests running or waiting and generated tokens flat this "
        "long, or the canary failing this long while /health answers, is WEDGED",
    )

    @property
    def ready_deadline_s(self) -> float:
        """From the ranks' start to READY at the latest: the last rank may finish loading a
        whole barrier window after the first, then warm up."""
        return float(self.weights + self.barrier + self.ready)


class Restart(StrictModel):
    """After READY, restart the whole TP group when it dies (opt-in: no `restart:`, no restart).
    Bounded by construction (supervisor/restart.py): never more than `max` in `window`, each
    waiting `backoff` doubled per attempt, never while a node's MemAvailable is under
    `min_mem_available`."""

    max: StrictInt = Field(default=2, ge=1, le=20, description="restarts at most, per window")
    window: _SECONDS = Field(default=3600.0, description="seconds the `max` counts over")
    backoff: _SECONDS = Field(
        default=30.0, description="seconds before the first restart; doubled for each next one"
    )
    min_mem_available: StrictInt = Field(
        default=8 * 2**30, ge=0, description="bytes of MemAvailable every node needs first"
    )
    mem_wait: _SECONDS = Field(
        default=600.0, description="how long to wait for memory before the death is final"
    )


# Per-host values: the rendezvous plan detects them on each node. A recipe that sets them pushes
# one host's interface names to every node (sparkrun#135), which fails silently or obscurely.
PER_HOST_ENV = frozenset(
    {
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "TP_SOCKET_IFNAME",
        "NCCL_IB_HCA",
        "NCCL_IB_GID_INDEX",
        "UCX_NET_DEVICES",
        "OMPI_MCA_btl_tcp_if_include",
        "VLLM_HOST_IP",
    }
)

_TP_FLAGS = ("--tp", "--tp-size", "--tensor-parallel-size", "-tp")
_NAME = r"^[a-z0-9][a-z0-9._-]*$"


def _explain_entrypoint(value: Any) -> Any:
    if value is None:
        raise ValueError(
            "required: name the program the image runs, e.g. "
            '["python3", "-m", "sglang.launch_server"] or ["vllm", "serve"]. Without one, '
            "seed 002's launcher composed `--entrypoint <model-id>` and the rank exec'd the "
            "model id"
        )
    return value


# --------------------------------------------------------------------------------------------
# The recipe


ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""POSIX names: `docker run --env "BAD KEY=1"` or `--env A=B=C` would set another variable."""


class Recipe(StrictModel):
    """One lane: everything needed to start every rank of one model on one cluster."""

    name: StrictStr = Field(pattern=_NAME, description="the file's stem; `cluster boot NAME`")
    description: StrictStr = ""
    seed: StrictStr | None = Field(default=None, description="the seed report it comes from")
    simulated: StrictBool = Field(
        default=False, description="a simulated twin of a real recipe (runs the built-in stand-in)"
    )

    engine: Engine
    engine_version: EngineVersion | None = Field(
        default=None,
        description="the engine build in the image and the release whose parser checks args "
        "(every shipped recipe sets it; tests/engines/)",
    )
    image: Image
    nodes: StrictInt = Field(ge=1, description="ranks, one per node")
    tp: StrictInt = Field(ge=1, description="{tp}: tensor-parallel size; defaults to nodes")
    model: Model
    ports: Ports
    readiness_path: StrictStr = Field(
        default="/health", pattern=r"^/", description="GET on rank 0's serve port; 200 = ready"
    )
    timeouts: Timeouts = Field(default_factory=Timeouts)
    restart: Restart | None = Field(
        default=None, description="after READY: restart the whole group when it dies (opt-in)"
    )
    docker: Docker = Field(default_factory=Docker, validate_default=True)

    entrypoint: Annotated[list[StrictStr], BeforeValidator(_explain_entrypoint)] = Field(
        default=None,  # refused by _explain_entrypoint, with the reason
        validate_default=True,
        description="the program and its subcommand; the image's own ENTRYPOINT is never used",
    )
    # validate_default: the cross-checks below must also judge a recipe that omits these keys.
    args: Argv = Field(
        default_factory=list, validate_default=True, description="engine flags, every rank"
    )
    worker_args: Argv = Field(
        default_factory=list,
        validate_default=True,
        description="appended for ranks > 0 (vLLM: --headless)",
    )
    env: dict[StrictStr, StrictStr] = Field(default_factory=dict, description="engine env")

    # -- defaults that depend on other keys ----------------------------------------------------

    @model_validator(mode="before")
    @classmethod
    def _fill_derived_defaults(cls, data: Any) -> Any:
        """Ports per engine, tp = nodes, timeouts.barrier from the SGLang barrier env."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        engine = data.get("engine")
        # An unknown engine is reported under `engine`; sglang's ports stand in meanwhile so
        # that one mistake is not reported three times.
        known = engine in set(Engine) if isinstance(engine, str) else False
        ports = DEFAULT_PORTS[Engine(engine) if known else Engine.sglang]
        given_ports = data.get("ports")
        if given_ports is None:
            data["ports"] = dict(ports)
        elif isinstance(given_ports, dict):
            data["ports"] = {**ports, **given_ports}
        if "tp" not in data and isinstance(data.get("nodes"), int):
            data["tp"] = data["nodes"]
        env = data.get("env")
        timeouts = data.get("timeouts", {})
        if (
            engine == Engine.sglang
            and isinstance(env, dict)
            and isinstance(env.get(SGLANG_BARRIER_ENV), str)
            and env[SGLANG_BARRIER_ENV].isdigit()
            and isinstance(timeouts, dict)
            and "barrier" not in timeouts
        ):
            data["timeouts"] = {**timeouts, "barrier": int(env[SGLANG_BARRIER_ENV])}
        return data

    # -- single keys ---------------------------------------------------------------------------

    @field_validator("docker")
    @classmethod
    def _docker_fits_nodes(cls, v: Docker, info: ValidationInfo) -> Docker:
        nodes = info.data.get("nodes")
        if isinstance(nodes, int) and nodes > 1 and v.network != "host":
            raise ValueError(
                f"network {v.network!r} with {nodes} nodes: multi-node needs 'host' (NCCL and "
                "Gloo bind the fabric interface by name, RoCE devices must be visible, and "
                "ranks meet on the head's fabric address)"
            )
        model = info.data.get("model")
        if (
            isinstance(model, Model)
            and model.host_dir is not None
            and not _mounted(model.host_dir, model.path, v.volume_pairs())
        ):
            raise ValueError(
                f"no volume mounts model.host_dir {model.host_dir} at model.path "
                f"{model.path}: add '{model.host_dir}:{model.path}:ro'"
            )
        return v

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, v: list[str]) -> list[str]:
        if not v:
            _explain_entrypoint(None)
        program = v[0]
        if not program or any(c.isspace() for c in program):
            raise ValueError(
                f"entrypoint[0] {program!r} must be one program name: split "
                '"vllm serve" into ["vllm", "serve"]'
            )
        if "/" in program and not program.startswith(("/", ".")):
            raise ValueError(
                f"entrypoint[0] {program!r} looks like a model id, not a program: lead with "
                "the program (e.g. vllm serve) and pass the model in args. Seed 002's launcher "
                "composed `--entrypoint <model-id>` this way and the rank exec'd the model id"
            )
        for part in v:
            if placeholders_in(part):
                raise ValueError(f"{part!r}: placeholders belong in args, worker_args and env")
        return v

    @field_validator("args", "worker_args")
    @classmethod
    def _templates(cls, v: list[str]) -> list[str]:
        for arg in v:
            _check_template(arg)
        return v

    @field_validator("args")
    @classmethod
    def _args_agree_with_keys(cls, v: list[str], info: ValidationInfo) -> list[str]:
        d = info.data
        if "--headless" in v:
            raise ValueError(
                "--headless in args would make rank 0 headless too: put it in worker_args "
                "(appended for ranks > 0 only)"
            )
        nodes, tp, ports, model = d.get("nodes"), d.get("tp"), d.get("ports"), d.get("model")
        if isinstance(nodes, int) and nodes > 1:
            used = {p for arg in v for p in placeholders_in(arg)}
            missing = [p for p in ("node_rank", "head_addr", "head_port") if p not in used]
            if missing:
                names = ", ".join("{" + p + "}" for p in missing)
                raise ValueError(
                    f"{nodes} nodes but args never use {names}: every rank would think it is "
                    "the head (SGLang: --node-rank {node_rank} --dist-init-addr "
                    "{head_addr}:{head_port}; vLLM: --node-rank {node_rank} --master-addr "
                    "{head_addr} --master-port {head_port})"
                )
        _agree(v, ("--nnodes",), nodes, "nnodes", "nodes")
        _agree(v, _TP_FLAGS, tp, "tp", "tp")
        if isinstance(ports, Ports):
            _agree(v, ("--port",), ports.serve, None, "ports.serve")
        if isinstance(model, Model) and not any(
            arg == model.path or arg.endswith("=" + model.path) for arg in v
        ):
            raise ValueError(
                f"model.path {model.path} is never passed to the engine: add it "
                "(SGLang: --model-path PATH; vLLM: the positional model or --model PATH)"
            )
        return v

    @field_validator("worker_args")
    @classmethod
    def _vllm_workers_are_headless(cls, v: list[str], info: ValidationInfo) -> list[str]:
        nodes, engine = info.data.get("nodes"), info.data.get("engine")
        if engine == Engine.vllm and isinstance(nodes, int) and nodes > 1 and "--headless" not in v:
            raise ValueError(
                "a multi-node vLLM recipe needs --headless in worker_args: ranks > 0 run the "
                "engine without an API server (vLLM native multi-node)"
            )
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        for key, value in v.items():
            if not ENV_NAME_RE.match(key):
                raise ValueError(
                    f"env name {key!r}: expected letters, digits and _, not starting with a digit"
                )
            if "\0" in value:
                raise ValueError(f"env {key}: a NUL byte cannot be in an environment value")
            if key in PER_HOST_ENV:
                raise ValueError(
                    f"{key} is a per-host value: the rendezvous plan detects it on each node; "
                    "a recipe would push one host's names to all of them (sparkrun#135)"
                )
            _check_template(value)
        timeouts, engine = info.data.get("timeouts"), info.data.get("engine")
        raw = v.get(SGLANG_BARRIER_ENV)
        # A run's manifest records the recipe the ranks ran: the simulated twin scales the
        # window in env at run time, so the two may differ there by design (RECORDED).
        recorded = bool(info.context and info.context.get(RECORDED_KEY))
        if engine == Engine.sglang and raw is not None and isinstance(timeouts, Timeouts):
            if recorded:
                return v
            if not raw.isdigit():
                raise ValueError(f"{SGLANG_BARRIER_ENV}={raw!r}: expected whole seconds")
            if float(raw) != timeouts.barrier:
                raise ValueError(
                    f"{SGLANG_BARRIER_ENV}={raw} but timeouts.barrier is "
                    f"{timeouts.barrier:g}: the barrier watcher must know the window the "
                    "engine enforces; make them equal (or drop timeouts.barrier to derive it)"
                )
        return v

    # -- views -----------------------------------------------------------------------------------

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1


def _agree(
    argv: Sequence[str], flags: Sequence[str], expected: object, placeholder: str | None, key: str
) -> None:
    """A literal value of `flags` in `argv` must equal `expected` (or be its placeholder)."""
    if not isinstance(expected, int):
        return
    for value in flag_values(argv, flags):
        if placeholder is not None and value == "{" + placeholder + "}":
            continue
        if placeholders_in(value):
            continue
        if value != str(expected):
            raise ValueError(f"{flags[0]} {value} disagrees with {key} = {expected}")


def _mounted(host_dir: str, path: str, volumes: Sequence[tuple[str, str]]) -> bool:
    """Does some volume show `host_dir` at `path` inside the container?"""
    want_host, want_path = PurePosixPath(host_dir), PurePosixPath(path)
    for host, container in volumes:
        h, c = PurePosixPath(host), PurePosixPath(container)
        inside = want_host == h or h in want_host.parents
        if inside and c / want_host.relative_to(h) == want_path:
            return True
    return False


# --------------------------------------------------------------------------------------------
# Rendering one rank


class RankCommand(NamedTuple):
    """What one rank runs: `argv_tail[0]` is docker's `--entrypoint`, the rest follow the image."""

    argv_tail: list[str]
    env: dict[str, str]


def render(
    recipe: Recipe, node_rank: int, nnodes: int, head_addr: str, head_port: int
) -> RankCommand:
    """The argv tail and env of rank `node_rank`. Pure; the golden tests pin its output.

    argv_tail = entrypoint + args + (worker_args if node_rank > 0), with `{node_rank}`,
    `{nnodes}`, `{head_addr}`, `{head_port}` and `{tp}` filled in args, worker_args and env.
    """
    if nnodes != recipe.nodes:
        raise ValueError(f"recipe {recipe.name} is for {recipe.nodes} nodes, not {nnodes}")
    if not 0 <= node_rank < nnodes:
        raise ValueError(f"node_rank {node_rank} is outside 0..{nnodes - 1}")
    if not head_addr or any(c.isspace() for c in head_addr):
        raise ValueError(f"head_addr {head_addr!r} is not an address")
    if not 1 <= head_port <= 65535:
        raise ValueError(f"head_port {head_port} is not a TCP port")
    values = {
        "node_rank": str(node_rank),
        "nnodes": str(nnodes),
        "head_addr": head_addr,
        "head_port": str(head_port),
        "tp": str(recipe.tp),
    }
    tail = [*recipe.args, *(recipe.worker_args if node_rank > 0 else [])]
    argv = [*recipe.entrypoint, *(_substitute(a, values) for a in tail)]
    env = {k: _substitute(v, values) for k, v in recipe.env.items()}
    return RankCommand(argv, env)
