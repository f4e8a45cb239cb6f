"""A run rebuilt from its directory: the recipe, inventory and rank specs it was started with,
and the state its preserved logs imply. What `cluster status` (live), `cluster supervise`,
`cluster stop` and `cluster logs` share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.dialects.timestamps import line_timestamp_ns
from orchestrator.errors import RunStoreError
from orchestrator.inventory import load_inventory
from orchestrator.models.inventory import Connection, Inventory
from orchestrator.models.recipe import Recipe, Timeouts
from orchestrator.models.run import LogLine, RankStarted
from orchestrator.plan.launch import LaunchPlan
from orchestrator.run_files import RunManifest
from orchestrator.runstore import Run
from orchestrator.runtime.base import RankSpec
from orchestrator.runtime.specs import rank_specs
from orchestrator.supervisor.follower import split_lines
from orchestrator.supervisor.state import BootState, initial_state, reduce
from orchestrator.supervisor.watchers import WatchConfig, watch_config_for


@dataclass(frozen=True)
class RunContext:
    run: Run
    manifest: RunManifest
    inventory: Inventory
    plan: LaunchPlan
    specs: list[RankSpec]
    watch: WatchConfig

    @property
    def recipe(self) -> Recipe:
        """The recipe the ranks ran (the twin's, on the simulated cluster)."""
        return self.manifest.recipe

    @property
    def timeouts(self) -> Timeouts:
        return self.recipe.timeouts

    @property
    def recipe_name(self) -> str:
        return self.manifest.real_recipe or self.recipe.name

    @property
    def serve_port(self) -> int:
        return self.recipe.ports.serve

    @property
    def readiness_path(self) -> str:
        return self.recipe.readiness_path

    @property
    def simulated(self) -> bool:
        return self.inventory.connection is Connection.local

    @property
    def ready_url(self) -> str:
        return f"http://{self.inventory.head.address}:{self.serve_port}{self.readiness_path}"

    @property
    def endpoint(self) -> str:
        return f"http://{self.inventory.head.address}:{self.serve_port}"


def load_context(run: Run) -> RunContext:
    """Everything needed to act on a run again, from its manifest alone."""
    manifest = run.manifest()
    plan = manifest.plans.launch
    if plan is None:
        raise RunStoreError(
            "this run never got past preflight: no ranks were started",
            where=str(run.dir),
            hint=f"`cluster postmortem {run.id}` explains why",
        )
    snap = manifest.inventory
    inv_path = Path(snap.path)
    if inv_path.exists():
        inventory = load_inventory(inv_path)
    else:  # a copied run: rebuild from the snapshot
        inventory = Inventory(
            path=inv_path,
            sha256=snap.sha256,
            name=snap.name,
            connection=snap.connection,
            known_hosts=None,
            runs_dir=None,
            nodes=snap.nodes,
        )
    recipe = manifest.recipe
    return RunContext(
        run=run,
        manifest=manifest,
        inventory=inventory,
        plan=plan,
        specs=rank_specs(plan, inventory),
        watch=watch_config(
            recipe.timeouts,
            recipe.model.expected_bytes_per_rank,
            engine=recipe.engine.value,
            env=recipe.env,
        ),
    )


def watch_config(
    timeouts: Timeouts,
    expected_bytes_per_rank: int | None,
    *,
    engine: str = "sglang",
    env: Mapping[str, str] | None = None,
) -> WatchConfig:
    """What the watchers judge by, from the recipe's timeouts (a boot's, or a run's manifest),
    its engine (whose waits apply: supervisor/watchers.py) and its env (vLLM's ready deadline; a
    twin's scale, which the simulator applies to env values itself)."""
    env = env or {}
    return watch_config_for(
        engine,
        barrier_window_s=float(timeouts.barrier),
        env=env,
        expected_bytes_per_rank=expected_bytes_per_rank,
        scale=float(env.get("CLUSTER_SIM_SCALE", "1") or 1),
        rendezvous_s=float(timeouts.rendezvous),
    )


def replay_logs(ctx: RunContext) -> BootState:
    """The state the preserved rank logs imply, every line at its own Docker timestamp."""
    state = initial_state([s.node.name for s in ctx.specs])
    for spec in ctx.specs:
        state = reduce(state, RankStarted(ts=0.0, rank=spec.rank, container=spec.name))
    lines: list[tuple[int, int, str, str]] = []
    for spec in ctx.specs:
        for stream in ("stdout", "stderr"):
            path = ctx.run.dir / f"rank-{spec.rank}" / f"{stream}.log"
            if not path.exists():
                continue
            for raw in split_lines(path.read_bytes()):
                lines.append(
                    (line_timestamp_ns(raw), spec.rank, stream, raw.decode(errors="replace"))
                )
    for ns, rank, stream, text in sorted(lines, key=lambda x: x[0]):
        state = reduce(
            state,
            LogLine(ts=ns / 1e9, rank=rank, stream=stream, text=text.rstrip("\n")),
        )
    return state
