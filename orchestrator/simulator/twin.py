"""The twin rule, in one place: a real recipe becomes its simulated twin.

What changes, and why:

- `entrypoint` -> `[python, -m, orchestrator.simulator, ENGINE, SUBCOMMAND]`: the program, and
  only the program. `args`, `worker_args` and `env` stay byte for byte (the simulator parses the
  engines' own flags), so the rendezvous plan, the ports and `render()` are exercised exactly as
  for the real lane.
- `image` -> the test image (which bind-mounts the host's Python read-only on the testbed).
- GPU options dropped: `docker.gpus` and `--device`/`--runtime`/`--gpus` items of `docker.extra`
  (there is no GPU or RoCE device on a simulated node).
- Engine time and size scaled by one factor (timescale.py): `timeouts.weights`, `.barrier` and
  `.ready`, `model.expected_bytes_per_rank` and `image.size_bytes` (so preflight's disk check asks a
  twin for room in proportion, not for a real image's 70 GB). `timeouts.connect`, `.image` and
  `.exec_ready` are not: they time real SSH, real `docker load` and real container starts, which a
  twin still does; nor is `.wedge`: after READY a twin serves in real time and the serving
  watch's canary and /metrics asks are real. The env (e.g.
  `SGLANG_UNBALANCED_LOAD_TIMEOUT_S=7200`) stays unscaled, and the simulator multiplies it by the
  same factor, so the twin's `timeouts.barrier` is exactly the window the simulator enforces.
  That is also why the twin is built with `model_copy` rather than validated again: the recipe
  check "env barrier == timeouts.barrier" holds for real recipes only; re-make a
  twin with `make_twin(recipe, factor)` instead of validating its dump.
- `env` gains `CLUSTER_SIM_ENGINE_RELEASE` (and `CLUSTER_SIM_BEYOND_RELEASE`) from the recipe's
  `engine_version`, so the twin refuses the flags that release's parser refuses;
  `CLUSTER_SIM_SCALE` (the factor) and, with `weights_dir`, `CLUSTER_SIM_MODEL_DIR`
  (where a process rank without bind mounts finds the weights); in a container the weights
  directory is mounted at `model.path`, in place of the real weights' volume.

`twin_record()` is what the run manifest keeps under `"twin"`, so watchers predict against the
times the simulator really uses.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from typing import Any

from orchestrator.models.recipe import Docker, Image, Model, Recipe, Timeouts
from orchestrator.simulator.flag_tables import ENV_BEYOND, ENV_RELEASE
from orchestrator.simulator.timescale import ENV_SCALE, Scale, parse_scale
from orchestrator.simulator.weights import ENV_MODEL_DIR

DEFAULT_TEST_IMAGE = "cluster-sim:test"
SIMULATOR_MODULE = "orchestrator.simulator"

# docker.extra flags that only make sense with a GPU or an RDMA device.
_GPU_EXTRA = ("--device", "--runtime", "--gpus", "--cap-add=IPC_LOCK")

_SCALED_TIMEOUTS = ("rendezvous", "weights", "barrier", "ready")


def _scale_of(factor: float | str | Scale) -> Scale:
    if isinstance(factor, Scale):
        return factor
    if isinstance(factor, str):
        return parse_scale(factor)
    return parse_scale(repr(float(factor)))


def _host_platform() -> str:
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
    return f"linux/{arch}"


def simulator_entrypoint(recipe: Recipe, python: str) -> list[str]:
    """The twin's program: the engine the recipe names, and its subcommand when it has one."""
    sub: list[str] = []
    if "serve" in recipe.entrypoint[1:]:
        sub = ["serve"]
    elif any(part.endswith("launch_server") for part in recipe.entrypoint):
        sub = ["launch_server"]
    return [python, "-m", SIMULATOR_MODULE, recipe.engine.value, *sub]


# A real recipe that does not say its image's size: a Spark engine image is 11 to 35 GB
# (shared/research/perf-physics.md); the twin's preflight disk check scales the larger.
_UNKNOWN_IMAGE_BYTES = 35 * 10**9


def make_twin(
    recipe: Recipe,
    factor: float | str | Scale,
    *,
    python: str = "python3",
    image: str = DEFAULT_TEST_IMAGE,
    weights_dir: str | None = None,
    extra_volumes: Sequence[str] = (),
) -> Recipe:
    """The simulated twin of `recipe` at `factor` (a number, `test`, `default`, or a Scale)."""
    scale = _scale_of(factor)
    docker = recipe.docker
    volumes = list(docker.volumes)
    model = recipe.model
    if weights_dir is not None:
        volumes = [v for v in volumes if v.split(":")[1] != model.path]
        volumes.append(f"{weights_dir}:{model.path}:ro")
    volumes += list(extra_volumes)
    twin_docker = Docker(
        gpus=None,
        ipc=docker.ipc,
        shm_size=docker.shm_size,
        # memlock=-1 pins RDMA buffers for NCCL over RoCE; a twin has no RDMA, and runc
        # refuses to raise it where the daemon lacks CAP_SYS_RESOURCE (the testbed: "error
        # setting rlimit type 8: operation not permitted").
        ulimits={k: v for k, v in docker.ulimits.items() if k != "memlock"},
        volumes=volumes,
        network=docker.network,
        extra=[e for e in docker.extra if not e.startswith(_GPU_EXTRA)],
    )
    expected = model.expected_bytes_per_rank
    twin_model = Model(
        id=model.id,
        path=model.path,
        host_dir=weights_dir if weights_dir is not None else model.host_dir,
        expected_bytes_per_rank=scale.nbytes(expected) if expected is not None else None,
    )
    t = recipe.timeouts
    twin_timeouts = Timeouts(
        connect=t.connect,
        image=t.image,
        exec_ready=t.exec_ready,
        # Launch skew does not shrink with the scale: a recipe's default bound (600 s, 2.5 s
        # under 1/240) keeps the floor the simulator gives the engine's own rendezvous default
        # (timescale.FLOOR_S), or eight ranks started seconds apart on a busy host would be
        # RENDEZVOUS_STALLED; a bound the recipe sets is scaled exactly.
        rendezvous=scale.timeout(
            t.rendezvous, explicit="rendezvous" in t.model_fields_set, floor="rendezvous"
        ),
        weights=scale.seconds(t.weights),
        barrier=scale.seconds(t.barrier),
        ready=scale.seconds(t.ready),
        # After READY the twin serves in real time (its serving faults' `after=` are real
        # seconds), and the serving watch's canary and /metrics asks are real: not scaled.
        wedge=t.wedge,
    )
    env = dict(recipe.env)
    env[ENV_SCALE] = repr(scale.factor)
    version = recipe.engine_version
    if version is not None:  # the twin plays this release's parser (flag_tables.py)
        env[ENV_RELEASE] = version.release
        if version.beyond_release:
            env[ENV_BEYOND] = ",".join(version.beyond_release)
    if weights_dir is not None:
        env[ENV_MODEL_DIR] = weights_dir
    return recipe.model_copy(
        update={
            "description": f"Simulated twin ({scale.name}, factor {scale.factor:.6g}) of: "
            + recipe.description,
            "simulated": True,
            "image": Image(
                reference=image,
                platform=_host_platform(),
                size_bytes=scale.nbytes(recipe.image.size_bytes or _UNKNOWN_IMAGE_BYTES),
            ),
            "entrypoint": simulator_entrypoint(recipe, python),
            "env": env,
            "docker": twin_docker,
            "model": twin_model,
            "timeouts": twin_timeouts,
        }
    )


def twin_record(real: Recipe, twin: Recipe) -> dict[str, Any]:
    """JSON-able record of the twin for the run manifest's `"twin"` key."""
    factor = float(twin.env[ENV_SCALE])
    scale = _scale_of(factor)
    scaled: dict[str, dict[str, float | int | None]] = {}
    for key in _SCALED_TIMEOUTS:
        scaled[f"timeouts.{key}"] = {
            "real": getattr(real.timeouts, key),
            "twin": getattr(twin.timeouts, key),
        }
    scaled["model.expected_bytes_per_rank"] = {
        "real": real.model.expected_bytes_per_rank,
        "twin": twin.model.expected_bytes_per_rank,
    }
    return {
        "factor": factor,
        "scale": scale.name,
        "simulator": SIMULATOR_MODULE,
        "recipe": real.name,
        "entrypoint": {"real": list(real.entrypoint), "twin": list(twin.entrypoint)},
        "image": {"real": real.image.reference, "twin": twin.image.reference},
        "weights_dir": twin.env.get(ENV_MODEL_DIR),
        "scaled": scaled,
        "barrier_window_s": twin.timeouts.barrier,
        "dropped_docker": {
            "gpus": real.docker.gpus,
            "extra": [e for e in real.docker.extra if e not in twin.docker.extra],
        },
        "unscaled": {
            "timeouts": ["connect", "image", "exec_ready", "wedge"],
            "rates": "bytes per second are not scaled (bytes and seconds both are)",
        },
        "env_added": {k: v for k, v in twin.env.items() if k not in real.env},
        "twin": twin.model_dump(mode="json"),
    }
