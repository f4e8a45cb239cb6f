"""The launch plan: every rank's exact `docker run`, golden-tested for every seed recipe; and
`nccl-check`, which starts the same containers with the all-reduce script instead of the engine.

Goldens live in tests/fixtures/launch/<recipe>.json: the 8-node recipes on
`spark-8x.yaml` (interface names differ per host, one host pins its HCA), the single-node ones
on `spark-1x.yaml` (its cable in the twin port). `CLUSTER_UPDATE_GOLDENS=1` rewrites them after a
deliberate change; read the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.nccl_check import render_report
from orchestrator.models.inventory import Node
from orchestrator.nccl_check import (
    NcclCheckOptions,
    NcclCheckReport,
    RankCheck,
    merge_timestamped,
    parse_rank_log,
    plan_nccl_check,
    run_nccl_check,
)
from orchestrator.plan.launch import (
    LABEL_RANK,
    LABEL_RECIPE,
    LABEL_RUN,
    LaunchPlan,
    PlanError,
    RankLaunch,
    container_name,
    plan_launch,
)
from orchestrator.plan.rendezvous import plan_rendezvous
from orchestrator.recipes import recipe_names, resolve_recipe
from orchestrator.runstore import RunStore
from orchestrator.scripts import script_text
from tests.engine_lines import by_id
from tests.fake_transport import FakeReply, FakeTransport
from tests.unit.plan.test_rendezvous import replace, sglang, spark_cluster, spark_inventory, vllm

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "launch"
UPDATE = os.environ.get("CLUSTER_UPDATE_GOLDENS") == "1"
RUN_ID = "20261129T153000Z-0a1b2c"
SEEDS = sorted(recipe_names())


def plan_for(name: str) -> LaunchPlan:
    recipe = resolve_recipe(name)
    inv, facts = spark_cluster(spark_inventory(recipe.nodes))
    return plan_launch(recipe, inv, plan_rendezvous(recipe, inv, facts), RUN_ID)


def flags(argv: tuple[str, ...], flag: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == flag]


@pytest.mark.parametrize("name", SEEDS)
def test_every_seed_recipes_launch_plan_matches_its_golden(name: str) -> None:
    got = plan_for(name).model_dump(mode="json")
    path = GOLDEN / f"{name}.json"
    if UPDATE:
        path.write_text(json.dumps(got, indent=2) + "\n", encoding="utf-8")
    assert path.exists(), f"no golden {path.name}: run with CLUSTER_UPDATE_GOLDENS=1"
    assert got == json.loads(path.read_text(encoding="utf-8")), f"{path.name} differs"


def test_the_seed_recipes_are_all_golden_tested() -> None:
    assert len(SEEDS) == 5
    assert {p.stem for p in GOLDEN.glob("*.json")} == set(SEEDS)


@pytest.mark.parametrize("name", SEEDS)
def test_no_rank_container_is_ever_started_with_rm(name: str) -> None:
    for rank in plan_for(name).ranks:
        assert "--rm" not in rank.docker_argv
        assert not any(w.startswith("--rm=") for w in rank.docker_argv)
        assert "--detach" in rank.docker_argv


@pytest.mark.parametrize("name", SEEDS)
def test_every_rank_keeps_its_whole_log_in_json_file(name: str) -> None:
    for rank in plan_for(name).ranks:
        argv = rank.docker_argv
        assert flags(argv, "--log-driver") == ["json-file"]
        opts = dict(o.split("=", 1) for o in flags(argv, "--log-opt"))
        assert opts == {"max-size": "1g", "max-file": "8"}


def test_container_names_are_deterministic_from_run_id_and_rank() -> None:
    plan = plan_for("mistral-large4-8x-sglang")
    assert [r.container for r in plan.ranks] == [f"cluster-{RUN_ID}-r{k}" for k in range(8)]
    assert container_name(RUN_ID, 3, "nccl") == f"cluster-{RUN_ID}-nccl-r3"
    again = plan_for("mistral-large4-8x-sglang")
    assert again == plan


def test_labels_name_the_run_the_rank_and_the_recipe() -> None:
    for rank in plan_for("mistral-large4-8x-vllm").ranks:
        assert rank.labels[LABEL_RUN] == RUN_ID
        assert rank.labels[LABEL_RANK] == str(rank.rank)
        assert rank.labels[LABEL_RECIPE] == "mistral-large4-8x-vllm"
        for key, value in rank.labels.items():
            assert f"{key}={value}" in flags(rank.docker_argv, "--label")


def test_ranks_use_the_host_network_and_the_recipes_docker_options() -> None:
    argv = plan_for("mistral-large4-8x-sglang").rank(2).docker_argv
    assert flags(argv, "--network") == ["host"]
    assert flags(argv, "--ipc") == ["host"]
    assert flags(argv, "--gpus") == ["all"]
    assert flags(argv, "--ulimit") == ["memlock=-1:-1", "stack=67108864:67108864"]
    assert "--device=/dev/infiniband" in argv
    assert flags(argv, "--volume") == [
        "/models/mistralai/Mistral-Large-4-1T-A52B-NVFP4:"
        "/models/mistralai/Mistral-Large-4-1T-A52B-NVFP4:ro"
    ]


def test_the_entrypoint_is_explicit_and_the_image_is_followed_by_the_rendered_args() -> None:
    rank = plan_for("mistral-large4-8x-sglang").rank(5)
    argv = rank.docker_argv
    at = argv.index("mistral-large4-sglang:latest")
    assert argv[at - 2 : at] == ("--entrypoint", "/opt/nvidia/nvidia_entrypoint.sh")
    assert argv[at + 1 :] == rank.engine_argv[1:]
    tail = list(rank.engine_argv)
    assert tail[tail.index("--node-rank") + 1] == "5"
    assert tail[tail.index("--nnodes") + 1] == "8"
    assert tail[tail.index("--dist-init-addr") + 1] == "192.168.100.10:29500"


def test_vllm_workers_are_headless_and_start_after_the_head() -> None:
    plan = plan_for("mistral-large4-8x-vllm")
    assert plan.waves == ((0,), (1, 2, 3, 4, 5, 6, 7))
    assert "--headless" not in plan.rank(0).engine_argv
    for k in range(1, 8):
        tail = plan.rank(k).engine_argv
        assert "--headless" in tail
        assert tail[tail.index("--master-addr") + 1] == "192.168.100.10"
        assert tail[tail.index("--master-port") + 1] == "29501"
    assert plan_for("mistral-large4-8x-sglang").waves == (tuple(range(8)),)


def test_each_rank_carries_its_own_hosts_network_env_and_the_recipes_env() -> None:
    plan = plan_for("mistral-large4-8x-sglang")
    for rank in plan.ranks:
        expected = "enp1s0f1np1" if rank.rank % 2 == 0 else "enP2p1s0f1np1"
        env_flags = flags(rank.docker_argv, "--env")
        assert f"NCCL_SOCKET_IFNAME={expected}" in env_flags
        assert f"GLOO_SOCKET_IFNAME={expected}" in env_flags
        assert "SGLANG_UNBALANCED_LOAD_TIMEOUT_S=7200" in env_flags
        assert [f"{k}={v}" for k, v in rank.env.items()] == env_flags
    assert "NCCL_IB_HCA=rocep1s0f1" in flags(plan.rank(6).docker_argv, "--env")


def test_every_node_can_look_up_every_fabric_address_without_dns() -> None:
    argv = plan_for("mistral-large4-8x-sglang").rank(0).docker_argv
    hosts = [w.removeprefix("--add-host=") for w in argv if w.startswith("--add-host=")]
    assert hosts == [f"spark-{k}-fabric:192.168.100.{10 + k}" for k in range(8)]


def test_a_node_with_its_own_docker_daemon_socket_gets_docker_host() -> None:
    recipe = sglang()
    inv, facts = spark_cluster()
    nodes = list(inv.nodes)
    nodes[3] = nodes[3].model_copy(update={"docker_host": "unix:///run/node3/docker.sock"})
    inv = inv.model_copy(update={"nodes": tuple(nodes)})
    plan = plan_launch(recipe, inv, plan_rendezvous(recipe, inv, facts), RUN_ID)
    assert plan.rank(3).docker_argv[:4] == (
        "docker",
        "--host",
        "unix:///run/node3/docker.sock",
        "run",
    )
    assert plan.rank(2).docker_argv[:2] == ("docker", "run")


def test_a_recipe_for_another_number_of_nodes_cannot_be_planned() -> None:
    recipe = resolve_recipe("mistral-small4-1x-sglang")
    inv, facts = spark_cluster()
    with pytest.raises(PlanError, match="1 nodes, the inventory has 8"):
        plan_launch(recipe, inv, plan_rendezvous(recipe, inv, facts), RUN_ID)


def test_a_rank_without_a_fabric_address_cannot_be_planned() -> None:
    inv, facts = spark_cluster()
    facts = replace(facts, 4, interfaces=())
    with pytest.raises(PlanError, match="no fabric address on spark-4"):
        plan_launch(sglang(), inv, plan_rendezvous(sglang(), inv, facts), RUN_ID)
    facts = replace(spark_cluster()[1], 0, interfaces=())
    with pytest.raises(PlanError, match="the head spark-0 has no address"):
        plan_launch(vllm(), inv, plan_rendezvous(vllm(), inv, facts), RUN_ID)


def test_a_people_readable_shell_line_quotes_json_arguments() -> None:
    rank = plan_for("mistral-large4-8x-vllm").rank(0)
    assert '\'{"method":"dspark","num_speculative_tokens":3}\'' in rank.shell


# ------------------------------------------------------------------------------------------------
# nccl-check: the boot's containers, the all-reduce script instead of the engine

NCCL_LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "nccl_check"


def check_plan(**options: Any) -> tuple[LaunchPlan, tuple[RankLaunch, ...]]:
    recipe = sglang()
    inv, facts = spark_cluster()
    rdv = plan_rendezvous(recipe, inv, facts)
    boot = plan_launch(recipe, inv, rdv, RUN_ID)
    check = plan_nccl_check(recipe, inv, rdv, RUN_ID, NcclCheckOptions(**options), "SCRIPT")
    return boot, check


def test_the_check_containers_run_with_exactly_the_boots_options_env_and_rendezvous() -> None:
    boot, check = check_plan()
    for b, c in zip(boot.ranks, check, strict=True):
        b_argv, c_argv = b.docker_argv, c.docker_argv
        for flag in ("--network", "--ipc", "--gpus", "--ulimit", "--volume", "--log-opt"):
            assert flags(c_argv, flag) == flags(b_argv, flag), flag
        assert [w for w in c_argv if w.startswith("--add-host")] == [
            w for w in b_argv if w.startswith("--add-host")
        ]
        assert {k: v for k, v in c.env.items() if not k.startswith("NCCL_DEBUG")} == b.env
        assert c.env["NCCL_DEBUG"] == "INFO"
        assert "--rm" not in c_argv
        tail = list(c.engine_argv)
        assert tail[:3] == ["python3", "-c", "SCRIPT"]
        assert tail[tail.index("--addr") + 1] == "192.168.100.10"
        assert tail[tail.index("--port") + 1] == "29500"
        assert tail[tail.index("--rank") + 1] == str(c.rank)
        assert c.container == f"cluster-{RUN_ID}-nccl-r{c.rank}"
        assert c.labels["cluster.purpose"] == "nccl-check"


def test_the_check_may_run_another_image_and_python_with_extra_mounts() -> None:
    _, check = check_plan(
        image="ctb/busybox:1", python="/venv/bin/python", volumes=("/usr:/usr:ro",)
    )
    argv = check[0].docker_argv
    assert "ctb/busybox:1" in argv and "mistral-large4-sglang:latest" not in argv
    assert flags(argv, "--entrypoint") == ["/venv/bin/python"]
    assert "/usr:/usr:ro" in flags(argv, "--volume")


def log(name: str) -> list[str]:
    return (NCCL_LOGS / name).read_text().splitlines()


def test_a_rank_that_joined_and_summed_right_is_read_from_its_log() -> None:
    got = parse_rank_log(log("gloo-two-ranks-ok.rank1.log"))
    assert got.joined and got.sum == 3.0 and got.sum_ok and got.backend == "gloo"
    assert got.transport == "gloo/tcp" and got.torch == "2.13.0+cpu"
    assert [b.bytes for b in got.bandwidth] == [4096, 262144, 4194304]
    assert got.stage == "done" and got.error is None


def test_a_rank_that_waited_for_a_missing_one_names_the_missing_rank() -> None:
    got = parse_rank_log(log("rank-missing.rank0.log"))
    assert not got.joined and got.reached_store
    assert got.error_stage == "init" and got.missing_ranks == (2,)
    assert got.error is not None and got.error.startswith("DistStoreError")


def test_a_rank_that_could_not_reach_the_rendezvous_never_reached_the_store() -> None:
    got = parse_rank_log(log("rank-missing.rank2-unreachable.log"))
    assert not got.reached_store and got.error_stage == "store"
    assert "timed out" in (got.error or "")


@pytest.mark.parametrize(
    ("entry", "transport"),
    [
        ("nccl-channel-via-ibext", "NET/IB"),
        ("nccl-using-network-socket", "NET/Socket"),
        ("nccl-ring-via-net-socket", "NET/Socket"),
    ],
)
def test_the_transport_nccl_chose_is_read_from_its_own_lines(entry: str, transport: str) -> None:
    assert parse_rank_log([by_id(entry).line]).transport == transport


def test_docker_log_streams_are_merged_by_timestamp_and_stripped() -> None:
    out = "2026-11-29T15:31:25.1Z first\n2026-11-29T15:31:25.300000001Z third\n"
    err = "2026-11-29T15:31:25.2Z second\n"
    assert merge_timestamped(out, err) == ["first", "second", "third"]


def rank(k: int, *lines: str, started: bool = True, code: int | None = 1) -> RankCheck:
    return RankCheck(
        rank=k,
        node=f"n{k}",
        container=f"c{k}",
        iface="eth0",
        started=started,
        exit_code=code,
        log=parse_rank_log(list(lines)),
    )


def test_the_culprit_is_the_rank_that_never_reached_the_store_while_the_others_did() -> None:
    waited = log("rank-missing.rank0.log")
    lost = log("rank-missing.rank2-unreachable.log")
    report = NcclCheckReport(
        recipe="r",
        inventory="i",
        run_id=RUN_ID,
        image="img",
        head="n0",
        head_addr="a",
        head_port=1,
        backend="gloo",
        ranks=(rank(0, *waited), rank(1, *waited), rank(2, *lost)),
        elapsed_s=1.0,
    )
    assert not report.ok and [r.rank for r in report.culprits()] == [2]
    assert report.to_json()["culprits"] == [2]


def test_when_every_rank_failed_the_missing_ranks_they_name_are_the_culprits() -> None:
    waited = log("rank-missing.rank0.log")
    report = NcclCheckReport(
        recipe="r", inventory="i", run_id=RUN_ID, image="img", head="n0", head_addr="a",
        head_port=1, backend="gloo", elapsed_s=1.0,
        ranks=(rank(0, *waited), rank(1, *waited), rank(2, started=False, code=None)),
    )  # fmt: skip
    assert [r.rank for r in report.culprits()] == [2]


def test_a_check_with_every_rank_summing_right_is_ok() -> None:
    good = log("gloo-two-ranks-ok.rank0.log")
    report = NcclCheckReport(
        recipe="r", inventory="i", run_id=RUN_ID, image="img", head="n0", head_addr="a",
        head_port=1, backend="gloo", elapsed_s=1.0, ranks=(rank(0, *good, code=0),),
    )  # fmt: skip
    assert report.ok and report.culprits() == []


def test_the_all_reduce_script_is_shipped_inside_the_package() -> None:
    text = script_text("nccl_allreduce.py")
    assert "init_process_group" in text and "NCCLCHECK" in text
    compile(text, "nccl_allreduce.py", "exec")


async def test_the_check_starts_waits_reads_and_removes_every_container_and_names_the_lost_rank(
    tmp_path: Path,
) -> None:
    inv, _ = spark_cluster()
    ok_log = "".join(
        f"2026-11-29T16:00:00.{i:09d}Z {line}\n"
        for i, line in enumerate(log("gloo-two-ranks-ok.rank0.log"))
    )
    lost_log = "".join(
        f"2026-11-29T16:00:00.{i:09d}Z {line}\n"
        for i, line in enumerate(log("rank-missing.rank2-unreachable.log"))
    )
    calls: list[tuple[str, tuple[str, ...]]] = []
    ip = json.dumps(
        [
            {
                "ifindex": 5,
                "ifname": n.fabric_iface,
                "flags": ["UP", "LOWER_UP"],
                "mtu": 9000,
                "operstate": "UP",
                "addr_info": [
                    {"family": "inet", "local": f"192.168.100.{10 + n.rank}", "prefixlen": 24}
                ],
            }
            for n in inv.nodes
        ]
    )

    def factory(node: Node) -> FakeTransport:
        def handler(argv: tuple[str, ...], stdin: bytes | None) -> FakeReply:
            calls.append((node.name, argv))
            if argv[:2] == ("ip", "-j"):
                return FakeReply(stdout=ip)
            if argv[0] != "docker":
                return FakeReply(exit_status=127, stderr=f"{argv[0]}: command not found")
            if argv[1] == "wait":
                return FakeReply(stdout="1\n" if node.rank == 5 else "0\n")
            if argv[1] == "logs":
                return FakeReply(stdout=lost_log if node.rank == 5 else ok_log)
            return FakeReply(stdout="started\n")

        return FakeTransport(node, handler)

    run = RunStore(tmp_path / "runs").create()
    report = await run_nccl_check(sglang(), inv, None, NcclCheckOptions(), run=run, factory=factory)
    assert [r.rank for r in report.culprits()] == [5]
    assert report.ranks[5].last_lines[-1].startswith("NCCLCHECK")
    docker_verbs = {(name, argv[1]) for name, argv in calls if argv[0] == "docker"}
    for n in inv.nodes:
        for verb in ("run", "wait", "logs", "rm"):
            assert (n.name, verb) in docker_verbs
    assert json.loads((run.dir / "nccl-check.json").read_text())["culprits"] == [5]
    assert (run.dir / "rank-5" / "nccl-check.log").read_text().startswith("NCCLCHECK")
    table = render_report(report)
    assert table.row_count == 8
