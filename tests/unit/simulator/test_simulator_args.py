"""The simulator reads the engines' own command lines; what it does not use, it echoes."""

from __future__ import annotations

import pytest

from orchestrator.simulator.cli_args import ArgsError, parse

SGLANG = [
    "sglang", "serve", "--model-path", "/models/m", "--served-model-name", "mistral-large-4",
    "--host", "0.0.0.0", "--port", "30000", "--tp", "8", "--nnodes", "8", "--node-rank", "3",
    "--dist-init-addr", "127.0.0.10:29500", "--tokenizer-mode", "mistral",
    "--watchdog-timeout", "3600", "--context-length", "524288",
]  # fmt: skip


def test_sglang_flags_the_orchestrator_uses_are_understood() -> None:
    a = parse(SGLANG)
    assert (a.engine, a.subcommand, a.model_path, a.served_model_name) == (
        "sglang",
        "serve",
        "/models/m",
        "mistral-large-4",
    )
    assert (a.tp, a.nnodes, a.node_rank, a.tp_rank, a.world) == (8, 8, 3, 3, 8)
    assert (a.dist_addr, a.dist_port, a.host, a.port) == ("127.0.0.10", 29500, "0.0.0.0", 30000)
    assert a.watchdog_timeout_s == 3600 and a.dist_timeout_s is None and a.max_len == 524288


def test_unknown_flags_are_kept_in_order_for_the_server_args_dump() -> None:
    a = parse([*SGLANG, "--moe-runner-backend", "flashinfer_cutlass", "--enable-foo", "--x=1"])
    keys = [k for k, _ in a.given]
    assert keys[-3:] == ["moe_runner_backend", "enable_foo", "x"]
    assert a.value("--enable-foo") is True and a.value("x") == 1


def test_python_m_launch_server_and_a_bare_engine_name_are_accepted() -> None:
    assert parse(["sglang", "launch_server", "--model-path", "/m"]).subcommand == "launch_server"
    bare = parse(["sglang", "--model-path", "/m"])
    assert bare.subcommand is None and bare.port == 30000 and bare.host == "127.0.0.1"


def test_vllm_positional_model_master_flags_and_headless() -> None:
    a = parse([
        "vllm", "serve", "/models/m", "--tensor-parallel-size", "8", "--nnodes", "8",
        "--node-rank", "5", "--master-addr", "127.0.0.10", "--master-port", "29501",
        "--enable-expert-parallel", "--speculative-config", '{"method":"dspark"}',
        "--gpu-memory-utilization", "0.89", "--headless",
    ])  # fmt: skip
    assert (a.model_path, a.tp, a.node_rank, a.dist_addr, a.dist_port) == (
        "/models/m",
        8,
        5,
        "127.0.0.10",
        29501,
    )
    assert a.headless and a.mem_fraction == 0.89 and a.port == 8000
    assert a.given[0] == ("model_tag", "/models/m")
    assert a.value("enable_expert_parallel") is True
    assert a.value("speculative_config") == '{"method":"dspark"}'


def test_sim_flags_are_taken_out_and_never_echoed() -> None:
    a = parse(
        [*SGLANG, "--sim-fault", "hang-at=kv", "--sim-scale", "test", "--sim-read-rate", "2MB/s"]
    )
    assert a.sim_faults == ["hang-at=kv"] and a.sim_scale == "test" and a.sim_read_rate == "2MB/s"
    assert not [k for k, _ in a.given if k.startswith("sim")]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "names the engine"),
        (["trtllm", "serve"], "names the engine"),
        (["vllm", "/m"], "serve"),
        (["sglang", "--tp", "8"], "--model-path"),
        (
            ["sglang", "--model-path", "/m", "--tp", "8", "--nnodes", "8", "--node-rank", "8"],
            "outside",
        ),
        (["sglang", "--model-path", "/m", "--tp", "3", "--nnodes", "2"], "multiple"),
        (["sglang", "--model-path", "/m", "--dist-init-addr", "nohost"], "HOST:PORT"),
        (["sglang", "--model-path", "/m", "--port", "x"], "invalid int"),
        (["sglang", "--model-path", "/m", "--sim-bogus", "1"], "unknown simulator flag"),
    ],
)
def test_a_command_line_the_simulator_cannot_run_is_refused_with_the_reason(
    argv: list[str], message: str
) -> None:
    with pytest.raises(ArgsError, match=message):
        parse(argv)
