"""`cluster sim`: the built-in engine simulator's tools (weights, twins, a local rehearsal boot).

The simulator itself runs as `python -m orchestrator.simulator ENGINE ...`; these commands make
its weights, show the twin of a recipe and boot a twin on this machine's loopback addresses.
Problems are `ConfigError`s (exit 2) or `BootFailed` (exit 6), printed once by `cli.main`.
"""

from __future__ import annotations

import json
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.options import JsonOpt, RecipeArg
from orchestrator.cli.output import console, print_json
from orchestrator.errors import BootFailed, ConfigError
from orchestrator.recipes import resolve_recipe
from orchestrator.simulator import launch
from orchestrator.simulator.faults import FaultError, parse_size
from orchestrator.simulator.timescale import ScaleError, parse_scale
from orchestrator.simulator.twin import DEFAULT_TEST_IMAGE, make_twin, twin_record
from orchestrator.simulator.weights import WeightsError, make_weights

app = typer.Typer(
    help="The built-in engine simulator: make weights, show a recipe's twin, rehearse a boot.",
    no_args_is_help=True,
)

ScaleOpt = Annotated[
    str, typer.Option("--scale", help="time scale: test, default, real, a number or 1/N")
]


def _scale(text: str) -> float:
    try:
        return parse_scale(text).factor
    except ScaleError as exc:
        raise ConfigError(str(exc), where="--scale") from None


@app.command("make-weights")
def make_weights_cmd(
    directory: Annotated[Path, typer.Argument(help="the model directory to write")],
    size: Annotated[str, typer.Option("--size", help="total bytes, e.g. 2GiB or 500MB")] = "2GiB",
    shards: Annotated[int, typer.Option("--shards", help="number of shard files")] = 13,
    recipe: Annotated[
        str | None,
        typer.Option("--recipe", help="size the weights for this recipe's twin (overrides --size)"),
    ] = None,
    scale: ScaleOpt = "default",
    architecture: Annotated[
        str, typer.Option("--architecture", help="what `Load weight end. type=` shows")
    ] = "PixtralForConditionalGeneration",
    force: Annotated[bool, typer.Option("--force", help="replace weights already there")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write random-byte shards and a safetensors-like index (cold in the page cache)."""
    try:
        total = parse_size(size)
    except FaultError as exc:
        raise ConfigError(str(exc), where="--size") from None
    if recipe is not None:
        real = resolve_recipe(recipe)
        per_rank = real.model.expected_bytes_per_rank
        if per_rank is None:
            raise ConfigError(
                "the recipe sets no model.expected_bytes_per_rank", where=f"--recipe {recipe}"
            )
        twin = make_twin(real, _scale(scale))
        assert twin.model.expected_bytes_per_rank is not None
        total = twin.model.expected_bytes_per_rank * real.tp
    try:
        info = make_weights(
            directory.resolve(), total, shards, architecture=architecture, force=force
        )
    except WeightsError as exc:
        raise ConfigError(str(exc), where=str(directory)) from None
    summary = {
        "directory": str(info.directory),
        "shards": len(info.shards),
        "total_bytes": info.total_bytes,
        "architecture": info.architecture,
    }
    if as_json:
        print_json(summary)
        return
    console.print(
        f"wrote {info.total_bytes:,} bytes in {len(info.shards)} shards to {info.directory}",
        markup=False,
        soft_wrap=True,
    )


@app.command("twin")
def twin_cmd(
    name: RecipeArg,
    scale: ScaleOpt = "default",
    python: Annotated[str, typer.Option("--python", help="the twin's Python")] = "python3",
    image: Annotated[str, typer.Option("--image", help="the test image")] = DEFAULT_TEST_IMAGE,
    weights: Annotated[
        str | None, typer.Option("--weights", help="the nodes' simulated weights directory")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """The simulated twin of a recipe and the record the run manifest keeps."""
    real = resolve_recipe(name)
    twin = make_twin(real, _scale(scale), python=python, image=image, weights_dir=weights)
    record = twin_record(real, twin)
    if as_json:
        print_json(record)
        return
    console.print(
        f"# twin of {real.name} at {record['scale']} (factor {record['factor']:.6g})", markup=False
    )
    for key, pair in record["scaled"].items():
        console.print(f"{key}: {pair['real']} -> {pair['twin']}", markup=False)
    console.print(f"entrypoint: {' '.join(twin.entrypoint)}", markup=False, soft_wrap=True)
    console.print(f"image: {twin.image.reference}", markup=False)


@app.command("run")
def run_cmd(
    name: RecipeArg,
    weights: Annotated[Path, typer.Option("--weights", help="weights from `sim make-weights`")],
    scale: ScaleOpt = "test",
    logs: Annotated[
        Path | None, typer.Option("--logs", help="where rank-<k>.log go (default: a temp dir)")
    ] = None,
    base_addr: Annotated[str, typer.Option("--base-addr", help="rank 0's loopback address")] = (
        "127.0.0.10"
    ),
    head_port: Annotated[int | None, typer.Option("--head-port", help="rendezvous port")] = None,
    serve_port: Annotated[
        int | None, typer.Option("--serve-port", help="override --port for this local run")
    ] = None,
    fault: Annotated[
        str | None, typer.Option("--fault", help="CLUSTER_SIM_FAULT spec for the ranks")
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds to wait for ready")] = 300.0,
    as_json: JsonOpt = False,
) -> None:
    """Boot a recipe's twin on this machine, one process per loopback node; ask it one question."""
    real = resolve_recipe(name)
    twin = make_twin(real, _scale(scale), python=sys.executable, weights_dir=str(weights.resolve()))
    log_dir = logs or Path(tempfile.mkdtemp(prefix="cluster-sim-"))
    extra = {"CLUSTER_SIM_FAULT": fault} if fault else {}
    ranks = launch.start_local(
        twin,
        log_dir,
        base_addr=base_addr,
        head_port=head_port,
        serve_port=serve_port,
        extra_env=extra,
    )
    try:
        outcome = launch.wait_ready(ranks, twin.engine, timeout)
        answer = None
        if outcome.ready:
            port = serve_port or twin.ports.serve
            answer = _ask(f"http://{ranks[0].addr}:{port}")
    finally:
        launch.stop_local(ranks)
    result = {
        "recipe": real.name,
        "engine": twin.engine.value,
        "ranks": twin.nodes,
        "factor": float(twin.env["CLUSTER_SIM_SCALE"]),
        "ready": outcome.ready,
        "seconds_to_ready": round(outcome.seconds, 2) if outcome.ready else None,
        "exited_before_ready": outcome.exited if not outcome.ready else {},
        "last_lines": outcome.last_lines,
        "answer": answer,
        "logs": str(log_dir),
    }
    if as_json:
        print_json(result)
    else:
        state = f"ready in {outcome.seconds:.1f} s" if outcome.ready else "NOT ready"
        console.print(
            f"{real.name} twin ({twin.nodes} ranks): {state}; logs in {log_dir}",
            markup=False,
            soft_wrap=True,
        )
        if answer:
            console.print(f"answer: {answer}", markup=False, soft_wrap=True)
    if not outcome.ready:
        ended = ", ".join(f"rank {k} exit {c}" for k, c in sorted(outcome.exited.items()))
        raise BootFailed(
            f"the twin of {real.name} did not become ready ({ended or 'timed out'})",
            where=str(log_dir),
            hint="read rank-<k>.log there",
        )


def _ask(base: str) -> str | None:
    """One chat completion from rank 0, or None."""
    body = json.dumps({"messages": [{"role": "user", "content": "Are you up?"}]}).encode()
    request = urllib.request.Request(  # noqa: S310 (http on our own loopback address)
        base + "/v1/chat/completions", data=body, headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (our loopback)
            payload = json.loads(response.read())
    except (OSError, ValueError):
        return None
    content = payload["choices"][0]["message"]["content"]
    return str(content)
