"""The launch plan (pure): per rank, the exact `docker run` argv and env, golden-tested.

Every flag below is here for a reason learned the hard way:

* `--detach --name cluster-<run id>-r<rank>`: the container owns the rank, not an SSH session
  (systemd-logind `RemoveIPC` killed ranks started over SSH at logout, eugr#352); the name is
  deterministic, so any terminal finds rank k of run R without a lookup table.
* labels `cluster.run`, `cluster.rank`, `cluster.recipe`, `cluster.node`: `docker ps --filter
  label=cluster.run=R` finds a run's containers on every node, and preflight recognises a rank
  container of an earlier run that still holds memory.
* **never `--rm`**: seed 002 lost boot 1's and boot 2's evidence to it, and so does every
  launcher with `--rm` by default (sparkrun `auto_remove`, eugr `launch-cluster.sh`). A rank's
  container and its log outlive the process; `cluster stop` removes them on purpose.
* `--log-driver json-file --log-opt max-size=1g --log-opt max-file=8`: `docker logs` must return
  the whole boot (an 80-minute load, then the crash). A node's `daemon.json` often caps json-file
  logs (`max-size=10m`), and the daemon merges its defaults into a container that names the same
  driver, so the cap is overridden explicitly. json-file has no "unlimited" value for `max-size`,
  hence a large one: 8 GiB per rank before the oldest part rotates away.
* `--network host`: NCCL and Gloo bind the fabric interface by name, RoCE devices must be
  visible, ranks meet on the head's fabric address (the recipe refuses `bridge` for nodes > 1).
* `--add-host <node>-fabric:<address>` for every node: c10d and Gloo look up the peers'
  addresses; without an answer they wait on DNS (TESTBED.md: 20 s per init, "The hostname of the
  client socket cannot be retrieved"). A host-network container copies the host's /etc/hosts and
  appends these lines, so reverse lookups of fabric addresses answer at once.
* the recipe's `gpus`, `ipc`, `shm_size`, `ulimits`, `volumes` and `extra`, in that order;
* `--env` per variable: the recipe's env (placeholders filled), then the rendezvous plan's
  per-host variables of *this* node. A secret (`HF_TOKEN`, `*_KEY`, `*PASSWORD*`: the names
  `orchestrator.redact` knows) is a bare `--env NAME`: its value never is on a command line,
  where `ps` on the node shows it to every user. `with_secret_env` starts `docker run` under
  `sh`, which reads `NAME=value` lines from stdin (the SSH channel) and exports them; docker
  copies a bare `--env NAME` from its own environment;
* `--entrypoint argv[0]`, the image, then the rest of the rank's argv from `render()`: the image's
  own ENTRYPOINT is never relied on (seed 002's launcher ran the model id as a program).

Launch order: SGLang starts every rank at once (each waits at `--dist-init-addr`); vLLM native
multi-node starts the head, waits for its rendezvous port, then the headless workers.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from pydantic import Field

from orchestrator.dockercli import DockerCli
from orchestrator.models.base import StrictModel
from orchestrator.models.inventory import Inventory, Node
from orchestrator.models.recipe import Engine, Recipe, render
from orchestrator.plan.rendezvous import RendezvousPlan
from orchestrator.redact import is_secret_name

LABEL_RUN = "cluster.run"
LABEL_RANK = "cluster.rank"
LABEL_RECIPE = "cluster.recipe"
LABEL_NODE = "cluster.node"
LABEL_PURPOSE = "cluster.purpose"

LOG_OPTS = (("max-size", "1g"), ("max-file", "8"))
"""json-file options: 8 x 1 GiB per rank before anything rotates away (see the module doc)."""


class PlanError(ValueError):
    """A plan cannot be made from these inputs (a missing address, a node-count mismatch)."""


def container_name(run_id: str, rank: int, purpose: str = "") -> str:
    """`cluster-<run id>-r<rank>`, or `cluster-<run id>-<purpose>-r<rank>` (e.g. nccl)."""
    middle = f"-{purpose}" if purpose else ""
    return f"cluster-{run_id}{middle}-r{rank}"


def fabric_host_name(node: str) -> str:
    return f"{node}-fabric"


class RankLaunch(StrictModel):
    """Everything about starting one rank's container."""

    rank: int
    node: str
    container: str = Field(description="the container name: deterministic from run id and rank")
    labels: dict[str, str]
    engine_argv: tuple[str, ...] = Field(description="what the rank runs: render()'s argv")
    env: dict[str, str] = Field(description="the container's env: recipe env + per-host env")
    docker_argv: tuple[str, ...] = Field(description="the full command run on the node")

    @property
    def shell(self) -> str:
        """`docker_argv` as one shell line, for people and runbooks."""
        return shlex.join(self.docker_argv)


class LaunchPlan(StrictModel):
    """How every rank of one run starts."""

    run_id: str
    recipe: str
    engine: Engine
    image: str
    head_addr: str
    head_port: int
    waves: tuple[tuple[int, ...], ...] = Field(
        description="ranks started together, wave by wave (vLLM: the head first)"
    )
    ranks: tuple[RankLaunch, ...]

    def rank(self, rank: int) -> RankLaunch:
        return next(r for r in self.ranks if r.rank == rank)


def container_options(recipe: Recipe) -> list[str]:
    """The recipe's `docker` section as `docker run` flags, in a fixed order."""
    d = recipe.docker
    flags = ["--network", d.network]
    if d.ipc is not None:
        flags += ["--ipc", d.ipc]
    if d.gpus is not None:
        flags += ["--gpus", d.gpus]
    if d.shm_size is not None:
        flags += ["--shm-size", d.shm_size]
    for name, value in d.ulimits.items():
        flags += ["--ulimit", f"{name}={value}"]
    for volume in d.volumes:
        flags += ["--volume", volume]
    flags += ["--log-driver", "json-file"]
    for key, value in LOG_OPTS:
        flags += ["--log-opt", f"{key}={value}"]
    flags += list(d.extra)
    return flags


def add_hosts(rendezvous: RendezvousPlan) -> list[str]:
    """`--add-host <node>-fabric:<address>` for every node whose fabric address is known."""
    return [
        f"--add-host={fabric_host_name(r.node)}:{r.address}" for r in rendezvous.ranks if r.address
    ]


def docker_run_argv(
    *,
    node: Node,
    name: str,
    labels: Mapping[str, str],
    options: Sequence[str],
    env: Mapping[str, str],
    image: str,
    argv: Sequence[str],
) -> tuple[str, ...]:
    """`docker run --detach --name NAME --label … OPTIONS --env … --entrypoint ARGV0 IMAGE …`.

    Never `--rm` (the recipe refuses it in `extra`, and nothing here adds it)."""
    if not argv:
        raise PlanError("a container needs a program: argv is empty")
    out = [*DockerCli.of(node).base, "run", "--detach", "--name", name]
    for key, value in labels.items():
        out += ["--label", f"{key}={value}"]
    out += list(options)
    for key, value in env.items():
        out += ["--env", key if is_secret_name(key) else f"{key}={value}"]
    out += ["--entrypoint", argv[0], image, *argv[1:]]
    return tuple(out)


# Reads NAME=value lines until EOF, exports each, then runs the argv it was given. `read -r`
# keeps backslashes; IFS= keeps leading and trailing blanks of a value.
ENV_FROM_STDIN = 'while IFS= read -r kv; do export "$kv"; done; exec "$@"'


def secret_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables `docker_run_argv` names without a value."""
    return {k: v for k, v in env.items() if is_secret_name(k)}


def with_secret_env(
    docker_argv: Sequence[str], env: Mapping[str, str]
) -> tuple[tuple[str, ...], bytes | None]:
    """The argv to run on the node, and its stdin: the secrets' values, or None without any."""
    secrets = secret_env(env)
    if not secrets:
        return tuple(docker_argv), None
    for key, value in secrets.items():
        if "\n" in value or "\0" in value:
            raise PlanError(f"env {key}: a secret's value must be one line")
    stdin = "".join(f"{k}={v}\n" for k, v in secrets.items()).encode()
    return ("sh", "-c", ENV_FROM_STDIN, "sh", *docker_argv), stdin


def waves(recipe: Recipe, nnodes: int) -> tuple[tuple[int, ...], ...]:
    if recipe.engine is Engine.vllm and nnodes > 1:
        return ((0,), tuple(range(1, nnodes)))
    return (tuple(range(nnodes)),)


@dataclass(frozen=True)
class LaunchVariant:
    """The same ranks started for another purpose (`nccl-check`): the boot's options, env and
    rendezvous exactly, with these differences."""

    purpose: str  # in the container name: cluster-<run>-<purpose>-r<rank>
    label: str  # the cluster.purpose label
    argv: Callable[[int], Sequence[str]]  # what rank k runs instead of the engine
    image: str | None = None  # instead of the recipe's
    volumes: tuple[str, ...] = ()  # extra bind mounts, for these containers only
    env: Mapping[str, str] = field(default_factory=dict)  # on top of the boot's env


def plan_launch(
    recipe: Recipe,
    inventory: Inventory,
    rendezvous: RendezvousPlan,
    run_id: str,
    variant: LaunchVariant | None = None,
) -> LaunchPlan:
    """Every rank's `docker run` for `recipe` on `inventory` (or its `variant`). Pure;
    `PlanError` when the rendezvous is incomplete or the recipe is for another number of
    nodes."""
    nnodes = len(inventory.nodes)
    if recipe.nodes != nnodes:
        raise PlanError(
            f"recipe {recipe.name} is for {recipe.nodes} nodes, the inventory has {nnodes}"
        )
    if rendezvous.head_addr is None:
        raise PlanError(f"the head {rendezvous.head} has no address on {rendezvous.head_iface}")
    missing = [r.node for r in rendezvous.ranks if r.address is None]
    if missing:
        raise PlanError(f"no fabric address on {', '.join(missing)}")
    volumes = [flag for v in (variant.volumes if variant else ()) for flag in ("--volume", v)]
    options = [*container_options(recipe), *volumes, *add_hosts(rendezvous)]
    image = (variant.image if variant else None) or recipe.image.reference
    # The same options and image for every rank: only the rank's own parts vary below.
    run_argv = partial(docker_run_argv, options=options, image=image)
    ranks = []
    for node in inventory.nodes:
        rank_rdv = rendezvous.rank(node.rank)
        command = render(recipe, node.rank, nnodes, rendezvous.head_addr, rendezvous.head_port)
        env = {**command.env, **rank_rdv.env, **(variant.env if variant else {})}
        argv = tuple(variant.argv(node.rank) if variant else command.argv_tail)
        name = container_name(run_id, node.rank, variant.purpose if variant else "")
        labels = {
            LABEL_RUN: run_id,
            LABEL_RANK: str(node.rank),
            LABEL_RECIPE: recipe.name,
            LABEL_NODE: node.name,
            **({LABEL_PURPOSE: variant.label} if variant else {}),
        }
        ranks.append(
            RankLaunch(
                **rank_rdv.model_dump(include={"rank", "node"}),
                container=name,
                labels=labels,
                engine_argv=argv,
                env=env,
                docker_argv=run_argv(node=node, name=name, labels=labels, env=env, argv=argv),
            )
        )
    return LaunchPlan(
        run_id=run_id,
        recipe=recipe.name,
        engine=recipe.engine,
        image=image,
        head_addr=rendezvous.head_addr,
        head_port=rendezvous.head_port,
        waves=waves(recipe, nnodes),
        ranks=tuple(ranks),
    )
