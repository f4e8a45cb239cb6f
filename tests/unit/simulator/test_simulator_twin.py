"""The twin rule: only the program, the image, GPU options and engine time change."""

from __future__ import annotations

import json

import pytest

from orchestrator.models.recipe import render
from orchestrator.recipes import list_recipes, resolve_recipe
from orchestrator.simulator.cli_args import parse
from orchestrator.simulator.twin import make_twin, twin_record

NAMES = [r.name for r in list_recipes()]


@pytest.mark.parametrize("name", NAMES)
def test_a_twin_keeps_flags_env_ports_and_rendezvous_and_swaps_the_program(name: str) -> None:
    real = resolve_recipe(name)
    twin = make_twin(real, "test", python="/usr/bin/python3", image="sim:1")
    assert twin.simulated and twin.name == real.name
    assert (twin.args, twin.worker_args, twin.ports, twin.nodes, twin.tp) == (
        real.args,
        real.worker_args,
        real.ports,
        real.nodes,
        real.tp,
    )
    assert {k: v for k, v in twin.env.items() if k in real.env} == real.env
    assert twin.entrypoint[:4] == [
        "/usr/bin/python3",
        "-m",
        "orchestrator.simulator",
        real.engine.value,
    ]
    assert twin.image.reference == "sim:1" and twin.image.digest is None
    assert twin.docker.gpus is None
    assert not [e for e in twin.docker.extra if e.startswith("--device")]
    # Every rank's command line still parses as the engine's, under the simulator.
    for k in range(real.nodes):
        real_cmd = render(real, k, real.nodes, "127.0.0.10", real.ports.rendezvous)
        twin_cmd = render(twin, k, twin.nodes, "127.0.0.10", twin.ports.rendezvous)
        tail = len(real.entrypoint)
        assert twin_cmd.argv_tail[len(twin.entrypoint) :] == real_cmd.argv_tail[tail:]
        args = parse(twin_cmd.argv_tail[3:])
        assert (args.node_rank, args.nnodes) == (k, real.nodes)


def test_entrypoints_keep_their_subcommand() -> None:
    assert make_twin(resolve_recipe("mistral-large4-8x-sglang"), "test").entrypoint[3:] == [
        "sglang",
        "serve",
    ]
    assert make_twin(resolve_recipe("mistral-small4-1x-sglang"), "test").entrypoint[3:] == [
        "sglang",
        "launch_server",
    ]
    assert make_twin(resolve_recipe("mistral-large4-8x-vllm"), "test").entrypoint[3:] == [
        "vllm",
        "serve",
    ]


def test_the_rendezvous_bound_keeps_a_real_time_floor_unless_the_recipe_sets_it() -> None:
    # CI: a 600 s default scaled to 2.5 s (1/240) named the last of eight ranks, started seconds
    # after the first on a busy 2-core host, RENDEZVOUS_STALLED before it could print a line.
    real = resolve_recipe("mistral-large4-8x-sglang")
    assert "rendezvous" not in real.timeouts.model_fields_set
    assert make_twin(real, 1 / 240).timeouts.rendezvous == pytest.approx(60.0)
    explicit = real.model_copy(
        update={"timeouts": real.timeouts.model_copy(update={"rendezvous": 1200.0})}
    )
    explicit.timeouts.model_fields_set.add("rendezvous")
    assert make_twin(explicit, 1 / 240).timeouts.rendezvous == pytest.approx(5.0)


def test_engine_time_and_size_scale_by_one_factor_and_real_infrastructure_time_does_not() -> None:
    real = resolve_recipe("mistral-large4-8x-sglang")
    twin = make_twin(real, 1 / 480)
    assert twin.timeouts.barrier == pytest.approx(15.0)  # 7200 s * 1/480
    assert twin.timeouts.weights == pytest.approx(real.timeouts.weights / 480)
    assert twin.timeouts.ready == pytest.approx(real.timeouts.ready / 480)
    assert (twin.timeouts.connect, twin.timeouts.image, twin.timeouts.exec_ready) == (
        real.timeouts.connect,
        real.timeouts.image,
        real.timeouts.exec_ready,
    )
    assert twin.model.expected_bytes_per_rank == round(76_250_000_000 / 480)
    # The barrier env stays real; the simulator scales it with the factor the twin carries.
    assert twin.env["SGLANG_UNBALANCED_LOAD_TIMEOUT_S"] == "7200"
    assert float(twin.env["CLUSTER_SIM_SCALE"]) * 7200 == pytest.approx(twin.timeouts.barrier)


def test_weights_dir_replaces_the_real_weights_volume_and_is_named_for_process_ranks() -> None:
    real = resolve_recipe("mistral-large4-8x-vllm")
    twin = make_twin(real, "test", weights_dir="/srv/sim-weights", extra_volumes=["/usr:/usr:ro"])
    assert twin.model.path == real.model.path and twin.model.host_dir == "/srv/sim-weights"
    assert f"/srv/sim-weights:{real.model.path}:ro" in twin.docker.volumes
    assert not [v for v in twin.docker.volumes if v.startswith(real.model.host_dir or "-")]
    assert "/usr:/usr:ro" in twin.docker.volumes
    assert twin.env["CLUSTER_SIM_MODEL_DIR"] == "/srv/sim-weights"


def test_the_manifest_record_is_json_and_names_the_factor_and_the_windows() -> None:
    real = resolve_recipe("mistral-large4-8x-sglang")
    twin = make_twin(real, "default", weights_dir="/w")
    record = json.loads(json.dumps(twin_record(real, twin)))
    assert record["factor"] == pytest.approx(1 / 80) and record["scale"] == "default"
    assert record["barrier_window_s"] == pytest.approx(90.0)
    assert record["scaled"]["timeouts.barrier"] == {"real": 7200.0, "twin": 90.0}
    assert record["entrypoint"]["twin"][:3][1:] == ["-m", "orchestrator.simulator"]
    assert record["dropped_docker"] == {"gpus": "all", "extra": ["--device=/dev/infiniband"]}
    assert record["env_added"] == {
        "CLUSTER_SIM_SCALE": repr(1 / 80),
        "CLUSTER_SIM_MODEL_DIR": "/w",
        # the twin plays the recipe's engine release, and the flag its build has beyond it
        "CLUSTER_SIM_ENGINE_RELEASE": "0.5.23",
        "CLUSTER_SIM_BEYOND_RELEASE": "--tokenizer-mode",
    }
    assert record["twin"]["simulated"] is True


def test_a_twin_keeps_the_recipes_serving_knobs_unscaled() -> None:
    """After READY a twin serves in real time: `timeouts.wedge` (the serving watch's window) and
    `restart:` reach its run as written (a netns drill with `wedge: 10` was watched with 120)."""
    real = resolve_recipe("mistral-large4-8x-sglang")
    timeouts = real.timeouts.model_copy(update={"wedge": 10.0})
    real = real.model_copy(update={"timeouts": timeouts})
    twin = make_twin(real, "test", python="/usr/bin/python3", image="sim:1")
    assert twin.timeouts.wedge == 10.0
    assert twin.timeouts.weights < real.timeouts.weights  # engine time is scaled
    assert "wedge" in twin_record(real, twin)["unscaled"]["timeouts"]
