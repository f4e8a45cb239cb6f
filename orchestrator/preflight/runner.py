"""The thin runner: gather facts, plan, run the one real test, judge, write the report."""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from orchestrator.aio import resolved
from orchestrator.facts import FactsRequest, gather_facts, peer_target
from orchestrator.kernel.health import probe_kernel_health
from orchestrator.models.events import Preflight
from orchestrator.models.inventory import Connection, Inventory
from orchestrator.models.recipe import Recipe
from orchestrator.plan.launch import LaunchPlan, PlanError, plan_launch
from orchestrator.plan.rendezvous import RendezvousPlan, plan_rendezvous
from orchestrator.preflight.engine_args import EngineArgsResult, probe_engine_args
from orchestrator.preflight.judge import judge
from orchestrator.preflight.model import PreflightLimits, PreflightReport, PreflightResult, Runtime
from orchestrator.preflight.reachability import LinkTest, link_sessions
from orchestrator.probes.base import Probe
from orchestrator.probes.node_facts import NodeFacts
from orchestrator.probes.peers import NAME as PEERS
from orchestrator.probes.peers import peers_probe
from orchestrator.runstore import Run, new_run_id
from orchestrator.transport import ConnectOptions, Transport, TransportFactory
from orchestrator.transport.pool import node_transports


def runtime_of(inventory: Inventory) -> Runtime:
    return "process" if inventory.connection is Connection.local else "docker"


async def run_preflight(
    recipe: Recipe,
    inventory: Inventory,
    options: ConnectOptions | None = None,
    *,
    run: Run | None = None,
    factory: TransportFactory | None = None,
    limits: PreflightLimits | None = None,
    image_will_be_pushed: bool = False,
    image_ready: Mapping[str, bool] | None = None,
    peers: bool | None = None,
    on_node: Callable[[NodeFacts], None] | None = None,
    recipe_path: Path | None = None,
) -> PreflightResult:
    """Gather facts, plan, test the rendezvous port for real, judge; write the run directory.

    `peers`: ask whether each node can SSH to the next in rank order (the image chain's
    pairs); None (default) asks only when the chain will run (some node lacks the image).
    Never raises for what it finds (the report carries it); the caller refuses on errors."""
    limits = limits or PreflightLimits()
    started = time.monotonic()
    runtime = runtime_of(inventory)
    docker = runtime == "docker"
    request = FactsRequest(
        image=recipe.image.reference if docker else None,
        weights_dir=recipe.model.host_dir,
        docker=docker,
    )
    run_id = run.id if run is not None else new_run_id()
    launch: LaunchPlan | None = None
    launch_error: str | None = None
    engine_args: EngineArgsResult | None = None
    not_asked: dict[str, str] = {}
    async with node_transports(inventory, options or ConnectOptions(), factory) as transports:
        facts = await gather_facts(inventory, transports, request, on_node)
        plan = plan_rendezvous(recipe, inventory, facts)
        missing_image = any(f.image is not None and not f.image.present for f in facts)
        ask_peers = peers or (peers is None and docker and missing_image and len(facts) > 1)
        head_up = bool(facts) and facts[0].reachable
        try:
            launch = plan_launch(recipe, inventory, plan, run_id)
        except PlanError as exc:
            launch_error = str(exc)
        # Independent of each other: the per-node commands (the SSH to the chain neighbour, the
        # connect to the head's rendezvous port) and the engine's parser on the head.
        links, engine_args, kernel_health = await asyncio.gather(
            link_sessions(
                inventory,
                transports,
                plan,
                chain_riders(inventory, facts) if ask_peers else {},
                timeout_s=limits.tcp_timeout_s,
                head_up=head_up,
            ),
            _engine_args(recipe, inventory, plan, launch, transports, facts[0], docker, limits)
            if launch is not None and head_up
            else resolved(None),
            # The kernel and fabric health of each node (RemoveIPC, link speed, the last
            # hour's Xid/AER/link lines): one command per node, beside the others.
            probe_kernel_health(inventory.nodes, transports) if docker else resolved(None),
        )
        if launch is None:
            not_asked["engine-args"] = f"no launch plan to check: {launch_error}"
        elif not head_up:
            not_asked["engine-args"] = f"the head {inventory.head.name} did not answer"
        facts = with_peers(facts, links) if ask_peers else facts
        reach = links.reachability
    judged = judge(
        recipe,
        inventory,
        facts,
        plan,
        reachability=reach,
        limits=limits,
        runtime=runtime,
        run_id=run.id if run is not None else None,
        image_will_be_pushed=image_will_be_pushed,
        image_ready=image_ready,
        engine_args=engine_args,
        kernel_health=kernel_health,
        recipe_path=recipe_path,
        not_asked=not_asked,
    )
    report = PreflightReport(
        recipe=recipe.name,
        inventory=str(inventory.path),
        nodes=len(inventory.nodes),
        runtime=runtime,
        checks=tuple(judged.ran),
        not_checked=tuple(judged.not_checked),
        problems=tuple(judged.problems),
        reachability=reach,
        elapsed_s=round(time.monotonic() - started, 3),
    )
    result = PreflightResult(
        report=report, facts=facts, rendezvous=plan, launch=launch, launch_error=launch_error
    )
    if run is not None:
        write_preflight(run, result)
    return result


async def _engine_args(
    recipe: Recipe,
    inventory: Inventory,
    plan: RendezvousPlan,
    launch: LaunchPlan,
    transports: Mapping[str, Transport],
    head: NodeFacts,
    docker: bool,
    limits: PreflightLimits,
) -> EngineArgsResult | None:
    """The image's own parser on the head (`engine-args`); on the built-in simulated cluster,
    the parser of the recipe's twin (what `cluster boot` runs there), in place."""
    transport = transports.get(head.node)
    if transport is None:
        return None
    if not docker and not recipe.simulated:
        # A real recipe on the process runtime: the boot would run its twin, whose parser
        # refuses what the recipe's engine release refuses (simulator/flag_tables.py).
        from orchestrator.simulator.twin import make_twin

        twin = make_twin(recipe, "default", python=sys.executable)
        try:
            launch = plan_launch(twin, inventory, plan, launch.run_id)
        except PlanError as exc:
            return EngineArgsResult(node=head.node, argv=[], error=f"the twin's launch: {exc}")
        recipe = twin
    if docker and (head.image is None or not head.image.present):
        return EngineArgsResult(
            node=head.node,
            argv=[],
            error=f"{head.node} does not hold {recipe.image.reference} yet (it is loaded after "
            "preflight); `cluster preflight` again once it is there checks the argv",
        )
    return await probe_engine_args(
        recipe, launch, transport, docker=docker, timeout_s=limits.engine_args_timeout_s
    )


def chain_neighbours(inventory: Inventory) -> dict[str, str]:
    """Who streams to whom in the image chain: each node to the next in rank order (7 pairs
    for 8 nodes). The one SSH between nodes the boot needs; all pairs would be 56 handshakes."""
    nodes = inventory.nodes
    return {a.name: b.name for a, b in itertools.pairwise(nodes)}


def chain_riders(
    inventory: Inventory, facts: tuple[NodeFacts, ...]
) -> dict[str, dict[str, Probe[Any]]]:
    """The SSH to its chain neighbour, for every reachable node that has one."""
    up = {f.node for f in facts if f.reachable}
    return {
        a: {PEERS: peers_probe((peer_target(inventory.node(b)),))}
        for a, b in chain_neighbours(inventory).items()
        if a in up
    }


def with_peers(facts: tuple[NodeFacts, ...], links: LinkTest) -> tuple[NodeFacts, ...]:
    """`facts` with each node's answer about its chain neighbour (or why there is none)."""
    out = []
    for f in facts:
        value = links.riders.get(f.node, {}).get(PEERS)
        error = links.rider_errors.get(f.node, {}).get(PEERS)
        update: dict[str, Any] = {}
        if value is not None:
            update["peers"] = value
        if error is not None:
            update["errors"] = {**f.errors, PEERS: error}
        out.append(f.model_copy(update=update) if update else f)
    return tuple(out)


def write_preflight(run: Run, result: PreflightResult) -> None:
    """`preflight.json` (the report), `facts.json` and both plans under `plans/`, one event."""
    run.write_json("preflight.json", result.report.to_json())
    run.write_json("facts.json", [f.model_dump(mode="json") for f in result.facts])
    run.write_json("plans/rendezvous.json", result.rendezvous.model_dump(mode="json"))
    if result.launch is not None:
        run.write_json("plans/launch.json", result.launch.model_dump(mode="json"))
    report = result.report
    run.append_event(
        Preflight(
            ok=report.ok,
            errors=len(report.errors),
            warnings=len(report.warnings),
            problems=tuple(
                f"{p.severity}: {p.node or 'cluster'}: {p.what}" for p in report.problems
            ),
        )
    )
