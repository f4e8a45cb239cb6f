"""Hostile input (issue 17) for the commands that reach nodes and read runs: timeouts, fan-out,
prune, stop, logs, runs, postmortem. Real sockets on 127.0.0.1 and real asyncssh stand in for
unreachable nodes: a closed port refuses, a listener that never speaks is silent."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.errors import ExitCode
from orchestrator.fanout import settle
from orchestrator.inventory import load_inventory
from orchestrator.models.recipe import Engine
from orchestrator.plan.launch import LaunchPlan, RankLaunch
from orchestrator.run.boot import write_manifest
from orchestrator.run.stop import Leftover, find_leftovers
from orchestrator.run_files import Plans
from orchestrator.runstore import Run, RunStore
from orchestrator.transport import ssh as ssh_module
from orchestrator.transport.base import ConnectOptions
from orchestrator.transport.ssh import SshTransport
from tests.run_manifests import a_recipe, write_a_manifest

RUN_ID = "20261129T153000Z-0a1b2c"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A listener that completes TCP handshakes (the kernel does) and never says a word."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield int(s.getsockname()[1])


def ssh_inventory(tmp_path: Path, ports: list[int], known_hosts: str = "kh") -> Path:
    hosts = "\n".join(
        f"        n{k}: {{rank: {k}, ansible_host: 127.0.0.1, ansible_port: {p}}}"
        for k, p in enumerate(ports)
    )
    path = tmp_path / "inv.yaml"
    path.write_text(
        "all:\n  vars:\n    fabric_iface: lo\n    ansible_user: nobody\n"
        f"    cluster_known_hosts: {known_hosts}\n    cluster_runs_dir: runs\n"
        f"  children:\n    sparks:\n      hosts:\n{hosts}\n"
    )
    return path


# -- 5. timeouts ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_a_connect_timeout_that_is_not_positive_is_a_usage_error(capsys, value):
    code, _, err = run(capsys, "inventory", "check", "--connect-timeout", value)
    assert code == ExitCode.CONFIG
    assert "--connect-timeout" in err and "greater than 0" in err


def test_the_host_key_fetch_is_bounded_by_the_connect_timeout(tmp_path, capsys, silent_port):
    inv = ssh_inventory(tmp_path, [silent_port])
    started = time.monotonic()
    code, _, err = run(
        capsys,
        "inventory",
        "check",
        "-i",
        str(inv),
        "--accept-new-host-keys",
        "--connect-timeout",
        "1",
    )
    elapsed = time.monotonic() - started
    assert code == ExitCode.UNHEALTHY
    assert "within 1 s" in err
    assert elapsed < 60  # generous for a busy machine: before the fix it took 122 s


def test_a_refused_connection_is_not_retried(tmp_path, monkeypatch):
    calls = []
    real = ssh_module.asyncssh.connect

    async def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args)
        return await real(*args, **kwargs)

    monkeypatch.setattr(ssh_module.asyncssh, "connect", counting)
    (tmp_path / "kh").write_text("")
    node = load_inventory(ssh_inventory(tmp_path, [closed_port()])).nodes[0]
    transport = SshTransport(node, known_hosts=tmp_path / "kh", options=ConnectOptions())
    with pytest.raises(Exception, match="connection refused"):
        asyncio.run(transport.connect())
    assert len(calls) == 1  # ConnectOptions().connect_attempts is 3: refused skips them


@pytest.mark.parametrize("value", ["0", "-3", "100000"])
def test_the_fanout_limit_is_an_option_with_bounds(capsys, value):
    code, _, err = run(capsys, "inventory", "check", "--fanout", value)
    assert code == ExitCode.CONFIG and "--fanout" in err and "1 to 1024 nodes at a time" in err


def test_settle_never_asks_more_nodes_at_once_than_the_limit(tmp_path):
    nodes = load_inventory(ssh_inventory(tmp_path, list(range(1000, 1040)))).nodes
    busy, peak = 0, 0

    async def one(_node: object) -> int:
        nonlocal busy, peak
        busy += 1
        peak = max(peak, busy)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        busy -= 1
        return 1

    outcomes = asyncio.run(settle(nodes, one, limit=7))
    assert len(outcomes) == 40 and peak == 7


def test_status_watch_refuses_an_interval_of_zero(capsys):
    code, _, err = run(capsys, "status", "--watch", "--interval", "0")
    assert code == ExitCode.CONFIG and "--interval" in err


# -- prune ----------------------------------------------------------------------------------


def test_an_age_past_the_calendar_is_a_usage_error(capsys):
    code, _, err = run(capsys, "prune", "--older-than", "99999999999999999999d", "-y")
    assert code == ExitCode.CONFIG and "--older-than" in err and "internal" not in err


def test_prune_with_unreachable_nodes_says_so_and_exits_3(tmp_path, capsys):
    (tmp_path / "kh").write_text("")
    inv = ssh_inventory(tmp_path, [closed_port(), closed_port()])
    code, out, err = run(capsys, "prune", "-i", str(inv), "-y")
    assert code == ExitCode.UNHEALTHY
    assert "nothing to prune" not in out
    assert "n0: not asked" in err and "n1: not asked" in err


def test_a_label_with_a_path_in_it_never_becomes_a_path(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    inv = load_inventory(Path(__file__).resolve().parents[3] / "inventory" / "sim-8x.yaml")
    for name, run_id, rank in (
        ("evil", f"{RUN_ID}/../../../x", "0"),
        ("evil-rank", RUN_ID, "../../0"),
        ("good", RUN_ID, "1"),
    ):
        rank_dir = tmp_path / "state" / "cluster" / "nodes" / "sim-node0" / name
        rank_dir.mkdir(parents=True)
        (rank_dir / "spec.json").write_text(
            json.dumps({"labels": {"cluster.run": run_id, "cluster.rank": rank}})
        )
    problems: list[str] = []
    found = asyncio.run(find_leftovers(inv, __import__("datetime").timedelta(0), None, problems))
    assert [f.container for f in found] == ["good"]
    assert len(problems) == 2 and all("ignored" in p for p in problems)
    assert any("is not a run id" in p for p in problems)
    assert any("is not a rank" in p for p in problems)


def test_leftover_values_are_checked_one_by_one():
    from orchestrator.run.stop import _invalid

    ok = Leftover(node="n", container="cluster-x-r0", run_id=RUN_ID, rank="0", state="exited")
    assert _invalid(ok) is None
    assert _invalid(Leftover("n", "../x", RUN_ID, "0", "exited")) == "not a container name"


# -- stop -----------------------------------------------------------------------------------


def stopped_run(tmp_path: Path, inv_path: Path) -> Path:
    inv = load_inventory(inv_path)
    ranks = tuple(
        RankLaunch(
            rank=n.rank,
            node=n.name,
            container=f"cluster-{RUN_ID}-r{n.rank}",
            labels={"cluster.run": RUN_ID},
            engine_argv=("python3", "-m", "x"),
            env={},
            docker_argv=("docker", "run", "x"),
        )
        for n in inv.nodes
    )
    plan = LaunchPlan(
        run_id=RUN_ID,
        recipe="r",
        engine=Engine.sglang,
        image="img",
        head_addr="127.0.0.1",
        head_port=1,
        waves=((0, 1),),
        ranks=ranks,
    )
    store = RunStore(inv.runs_dir)
    store.root.mkdir(parents=True)
    run_dir = store.root / RUN_ID
    run_dir.mkdir(mode=0o700)
    recipe = a_recipe("r")
    write_manifest(Run(RUN_ID, run_dir), recipe, recipe, None, inv, Plans(launch=plan))
    return run_dir


def test_stop_with_an_unreachable_node_exits_3_as_documented(tmp_path, capsys):
    (tmp_path / "kh").write_text("")
    inv = ssh_inventory(tmp_path, [closed_port(), closed_port()])
    stopped_run(tmp_path, inv)
    code, _, err = run(capsys, "stop", "-i", str(inv), "-y")
    assert code == ExitCode.UNHEALTHY
    assert "connection refused" in err


# -- logs, runs, postmortem -------------------------------------------------------------------


def test_logs_since_garbage_is_a_usage_error(capsys):
    code, _, err = run(capsys, "logs", "--since", "garbage")
    assert code == ExitCode.CONFIG and "--since 'garbage'" in err


@pytest.mark.parametrize("command", [["logs", "--run", "/etc"], ["postmortem", "/etc"]])
def test_a_folder_that_is_not_a_run_is_refused(capsys, command):
    code, _, err = run(capsys, *command)
    assert code == ExitCode.RUN_STORE and "not a run directory" in err


def test_postmortem_takes_the_inventorys_run_store(tmp_path, capsys):
    (tmp_path / "kh").write_text("")
    inv = ssh_inventory(tmp_path, [22])
    code, _, err = run(capsys, "postmortem", "-i", str(inv))
    assert code == ExitCode.RUN_STORE
    assert f"{tmp_path / 'runs'}: no runs yet" in err


def test_one_corrupt_run_does_not_hide_the_others(tmp_path, capsys):
    (tmp_path / "kh").write_text("")
    inv = ssh_inventory(tmp_path, [22])
    store = RunStore(tmp_path / "runs")
    good, bad = store.create(), store.create()
    write_a_manifest(good, "fine")
    bad.manifest_path.write_text("{not json")
    (bad.dir / "verdict.json").write_text("[]")
    code, out, _ = run(capsys, "runs", "-i", str(inv), "--json")
    assert code == 0
    rows = {r["run_id"]: r for r in json.loads(out)}
    assert rows[good.id]["recipe"] == "fine" and rows[good.id]["problem"] is None
    assert "manifest.json" in rows[bad.id]["problem"]
    code, out, _ = run(capsys, "runs", "-i", str(inv))
    assert code == 0 and "unreadable" in out


def test_escape_sequences_in_a_rank_log_are_shown_harmless_and_kept_byte_exact(tmp_path, capsys):
    run_dir = tmp_path / RUN_ID
    (run_dir / "rank-0").mkdir(parents=True)
    raw = b"2026-11-29T15:31:00.000000000Z \x1b]0;owned\x07\x1b[2J loaded\n"
    (run_dir / "rank-0" / "stdout.log").write_bytes(raw)
    code, out, _ = run(capsys, "logs", "--run", str(run_dir))
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;owned\\x07\\x1b[2J loaded" in out
    code, out, _ = run(capsys, "logs", "--run", str(run_dir), "--raw")
    assert "\x1b]0;owned\x07" in out
    assert (run_dir / "rank-0" / "stdout.log").read_bytes() == raw


# -- known_hosts that is not a known_hosts file ----------------------------------------------


@pytest.mark.parametrize("kind", ["folder", "binary"])
def test_a_known_hosts_that_is_a_folder_or_binary_is_a_config_error(tmp_path, capsys, kind):
    target = tmp_path / "kh"
    if kind == "folder":
        target.mkdir()
    else:
        target.write_bytes(b"\x7fELF\0\0\1\2" * 100)
    inv = ssh_inventory(tmp_path, [closed_port()])
    code, _, err = run(capsys, "inventory", "check", "-i", str(inv))
    assert code == ExitCode.CONFIG
    assert "cluster_known_hosts" in err


# -- docs/exit-codes.md -------------------------------------------------------------------------


def test_the_exit_code_table_names_every_command_with_real_codes():
    """A new command (or a code that is not an ExitCode) shows up here, not in a user's script."""
    from orchestrator.cli.main import COMMANDS

    doc = (Path(__file__).resolve().parents[3] / "docs" / "exit-codes.md").read_text()
    by_command = doc.split("## By command", 1)[1]
    rows = [line for line in by_command.splitlines() if line.startswith("| `")]
    named = {line.split("`")[1].split()[0] for line in rows}
    assert set(COMMANDS) <= named, set(COMMANDS) - named
    codes = {int(c) for c in ExitCode}
    for line in rows:
        adds = line.split("|")[2].strip()
        listed = {int(x) for x in adds.replace("—", "").split(",") if x.strip()}
        assert listed <= codes, line
        assert not listed & {0, 1, 2, 130}, line  # those every command has: said once above
