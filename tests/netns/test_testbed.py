"""Tests of the netns testbed itself: real sshd, real dockerd, real links, real faults."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from orchestrator.testbed import (
    FAB_MTU,
    LAZY_UNPACK_ERROR,
    NODE_VIEWS,
    REAL_DOCKER,
    TEST_IMAGE,
    Testbed,
    TestbedError,
    pid_alive,
    tcp_probe,
)

pytestmark = [pytest.mark.netns, pytest.mark.timeout(300)]


def _on_every_node(tb: Testbed, fn):  # type: ignore[no-untyped-def]
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(fn, tb.nodes))


def _strict_ssh(tb: Testbed, node, command: str, timeout: float = 60):  # type: ignore[no-untyped-def]
    """ssh exactly as a person would: the testbed key, its known_hosts, strict checking."""
    nd = tb.node(node)
    argv = [
        "ssh",
        "-F",
        "/dev/null",
        "-i",
        str(tb.client_key),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={tb.known_hosts}",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=10",
        f"root@{nd.mgmt_addr}",
        command,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


# --------------------------------------------------------------------------------------------------
# After `up`


def test_every_node_answers_strict_ssh_and_reaches_its_own_dockerd(testbed: Testbed) -> None:
    def probe(nd):  # type: ignore[no-untyped-def]
        r = _strict_ssh(
            testbed,
            nd,
            "docker version --format '{{.Server.Version}}' && "
            "docker info --format '{{.DockerRootDir}} {{.ID}}' && command -v docker && hostname",
        )
        assert r.returncode == 0, f"{nd.name}: {r.stderr}"
        return r.stdout.split()

    rows = _on_every_node(testbed, probe)
    roots = [row[1] for row in rows]
    ids = [row[2] for row in rows]
    for nd, row in zip(testbed.nodes, rows, strict=True):
        assert re.match(r"\d+\.\d+", row[0]), row
        assert row[1] == str(nd.data_root)
        assert row[3] == REAL_DOCKER, "the node's PATH must find Debian's docker first"
        assert row[4] == nd.name
    assert len(set(roots)) == len(testbed.nodes)
    assert len(set(ids)) == len(testbed.nodes), "every dockerd has its own identity"


def test_every_node_has_its_fabric_interface_at_mtu_9000_with_its_own_address(
    testbed: Testbed,
) -> None:
    def probe(nd):  # type: ignore[no-untyped-def]
        r = testbed.ssh(nd, "ip -j addr")
        return json.loads(r.stdout)

    for nd, links in zip(testbed.nodes, _on_every_node(testbed, probe), strict=True):
        by_name = {link["ifname"]: link for link in links}
        fab = by_name[nd.fab_iface]
        assert fab["mtu"] == FAB_MTU
        assert fab["operstate"] == "UP"
        assert [a["local"] for a in fab["addr_info"] if a["family"] == "inet"] == [nd.fab_addr]
        mgmt = by_name[nd.mgmt_iface]
        assert [a["local"] for a in mgmt["addr_info"] if a["family"] == "inet"] == [nd.mgmt_addr]
    names = {nd.fab_iface for nd in testbed.nodes}
    assert names == {"enp1s0f1np1", "enP2p1s0f1np1"}


def test_node0_reaches_the_last_node_over_ssh_by_name_on_both_networks(testbed: Testbed) -> None:
    last = testbed.nodes[-1]
    r = testbed.ssh(0, f"ssh -o BatchMode=yes {last.name} hostname")
    assert r.stdout.strip() == last.name
    r = testbed.ssh(0, f"ssh -o BatchMode=yes {last.name}-fab 'ip -br addr show {last.fab_iface}'")
    assert last.fab_addr in r.stdout


def test_a_file_written_over_ssh_under_a_node_view_lands_in_that_nodes_folder_only(
    testbed: Testbed, controller_root_ssh_before: dict[str, bytes] | None
) -> None:
    writer, other = testbed.node(2 % len(testbed.nodes)), testbed.node(3 % len(testbed.nodes))
    try:
        for _, target in NODE_VIEWS:
            path = f"{target}/ctb-view-probe"
            testbed.ssh(writer, f"echo {writer.name} > {path}")
            assert writer.view(path).read_text() == f"{writer.name}\n"
            assert not other.view(path).exists()
            assert not Path(path).exists(), f"{path} leaked to the controller"
            r = testbed.ssh(other, f"test ! -e {path} && echo absent")
            assert r.stdout.strip() == "absent"
    finally:
        for _, target in NODE_VIEWS:
            writer.view(f"{target}/ctb-view-probe").unlink(missing_ok=True)
    r = testbed.ssh(writer, "ls /root/.ssh")
    assert set(r.stdout.split()) >= {"authorized_keys", "id_ed25519", "known_hosts"}
    r = testbed.ssh(writer, "cat /etc/docker/key.json >/dev/null && echo own-key")
    assert r.stdout.strip() == "own-key"
    assert (writer.etc_docker / "key.json").exists()
    from tests.netns.conftest import _controller_ssh_listing

    assert _controller_ssh_listing() == controller_root_ssh_before


def test_inventory_and_known_hosts_describe_every_node(testbed: Testbed) -> None:
    inv = yaml.safe_load(testbed.inventory.read_text())
    v = inv["all"]["vars"]
    assert v["cluster_known_hosts"] == "known_hosts"
    assert v["ansible_user"] == "root"
    assert Path(v["ansible_ssh_private_key_file"]) == testbed.client_key
    hosts = inv["all"]["children"]["sparks"]["hosts"]
    assert list(hosts) == [nd.name for nd in testbed.nodes]
    kh = testbed.known_hosts.read_text().splitlines()
    for nd in testbed.nodes:
        h = hosts[nd.name]
        assert h["ansible_host"] == nd.mgmt_addr
        assert h["rank"] == nd.index
        assert h["fabric_iface"] == nd.fab_iface
        assert h["mgmt_iface"] == nd.mgmt_iface
        assert h["docker_host"] == nd.docker_host
        assert any(line.startswith(f"{nd.mgmt_addr} ssh-ed25519 ") for line in kh)
        assert any(line.startswith(f"{nd.name} ssh-ed25519 ") for line in kh)


def test_cluster_inventory_check_finds_every_testbed_node_healthy(testbed: Testbed) -> None:
    exe = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "cluster"
    cluster = str(exe) if exe.exists() else shutil.which("cluster")
    if cluster is None:
        pytest.skip("the `cluster` command is not installed in this environment")
    r = subprocess.run(
        [cluster, "inventory", "check", "-i", str(testbed.inventory), "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for nd in testbed.nodes:
        assert nd.name in r.stdout


def test_status_reports_every_namespace_and_daemon_alive(testbed: Testbed) -> None:
    rows = testbed.status()
    assert [r["node"] for r in rows] == [nd.name for nd in testbed.nodes]
    for r, nd in zip(rows, testbed.nodes, strict=True):
        assert r["netns"]
        assert all(r[d]["alive"] for d in ("sshd", "containerd", "dockerd")), r
        assert r["addrs"][nd.fab_iface]["addrs"] == [nd.fab_addr]


# --------------------------------------------------------------------------------------------------
# Faults


def test_stopping_sshd_refuses_port_22_and_starting_it_again_lets_ssh_in(
    clean_testbed: Testbed,
) -> None:
    tb = clean_testbed
    nd = tb.node(1 % len(tb.nodes))
    old = tb.stop_daemon(nd, "sshd")
    assert old is not None and not pid_alive(old)
    assert tcp_probe(nd.mgmt_addr, 22) == "refused"
    assert _strict_ssh(tb, nd, "true", timeout=30).returncode == 255
    new = tb.start_daemon(nd, "sshd")
    assert new != old and tb.pid(nd, "sshd") == new
    assert _strict_ssh(tb, nd, "hostname").stdout.strip() == nd.name


def test_stopping_dockerd_breaks_docker_on_that_node_until_it_is_started_again(
    clean_testbed: Testbed,
) -> None:
    tb = clean_testbed
    nd = tb.node(7 % len(tb.nodes))
    old = tb.stop_daemon(nd, "dockerd")
    r = tb.ssh(nd, "docker version --format '{{.Server.Version}}'", check=False)
    assert r.returncode != 0 and "Cannot connect" in r.stderr
    new = tb.start_daemon(nd, "dockerd")
    assert new != old
    r = tb.ssh(nd, "docker info --format '{{.DockerRootDir}}'")
    assert r.stdout.strip() == str(nd.data_root)


def test_cutting_the_fabric_link_keeps_management_working_and_shows_the_iface_down(
    clean_testbed: Testbed,
) -> None:
    tb = clean_testbed
    nd, peer = tb.node(4 % len(tb.nodes)), tb.node(5 % len(tb.nodes))
    fab_ssh = f"ssh -o BatchMode=yes -o ConnectTimeout=3 {nd.name}-fab true"
    assert tb.ssh(peer, fab_ssh).returncode == 0
    tb.cut_link(nd, "fabric")
    links = json.loads(tb.ssh(nd, f"ip -j link show {nd.fab_iface}").stdout)
    assert links[0]["operstate"] == "DOWN"
    assert tb.ssh(peer, fab_ssh, check=False, timeout=30).returncode != 0
    assert _strict_ssh(tb, nd, "hostname").stdout.strip() == nd.name  # management still works
    tb.restore_link(nd, "fabric")
    deadline = time.monotonic() + 20
    while tb.ssh(peer, fab_ssh, check=False, timeout=30).returncode != 0:
        assert time.monotonic() < deadline, "fabric did not come back"
        time.sleep(0.5)


def test_cutting_the_management_link_on_the_bridge_side_makes_ssh_time_out(
    clean_testbed: Testbed,
) -> None:
    tb = clean_testbed
    nd = tb.node(6 % len(tb.nodes))
    tb.cut_link(nd, "mgmt", side="bridge")
    assert tcp_probe(nd.mgmt_addr, 22, timeout=2) in ("timeout", "unreachable")
    tb.restore_link(nd, "mgmt")
    assert _strict_ssh(tb, nd, "true").returncode == 0


def test_dropping_a_port_with_nftables_makes_connects_to_it_time_out(
    clean_testbed: Testbed,
) -> None:
    tb = clean_testbed
    nd = tb.node(3 % len(tb.nodes))
    tb.start_silent_listener(nd, 2222)
    assert tcp_probe(nd.mgmt_addr, 2222) == "open"
    tb.drop_port(nd, 2222)
    t0 = time.monotonic()
    assert tcp_probe(nd.mgmt_addr, 2222, timeout=2) == "timeout"
    assert time.monotonic() - t0 >= 1.5
    assert tcp_probe(nd.mgmt_addr, 22) == "open", "only the dropped port is affected"
    tb.clear_nft(nd)
    assert tcp_probe(nd.mgmt_addr, 2222) == "open"


def test_packet_loss_by_nftables_blackholes_a_link_and_netem_delay_is_refused_without_netem(
    clean_testbed: Testbed,
) -> None:
    tb = clean_testbed
    nd = tb.node(2 % len(tb.nodes))
    tb.drop_packets(nd, "mgmt", 100)
    assert tcp_probe(nd.mgmt_addr, 22, timeout=1.5) == "timeout"
    tb.clear_nft(nd)
    assert tcp_probe(nd.mgmt_addr, 22) == "open"
    if Testbed.netem_available():
        tb.delay_link(nd, "mgmt", "200ms")
        t0 = time.monotonic()
        assert tcp_probe(nd.mgmt_addr, 22) == "open"
        assert time.monotonic() - t0 >= 0.35  # SYN and SYN-ACK each delayed
    else:
        with pytest.raises(TestbedError, match="netem"):
            tb.delay_link(nd, "mgmt", "200ms")


def test_a_silent_listener_accepts_tcp_but_ssh_times_out_waiting_for_its_banner(
    clean_testbed: Testbed,
) -> None:
    tb = clean_testbed
    nd = tb.node(5 % len(tb.nodes))
    pid = tb.start_silent_listener(nd, 2200)
    t0 = time.monotonic()
    argv = [*tb.ssh_argv(nd, connect_timeout=3)[:-1], "-p", "2200", nd.mgmt_addr, "true"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 255
    assert time.monotonic() - t0 >= 2.5
    assert "timed out" in r.stderr.lower() or "banner" in r.stderr.lower(), r.stderr
    tb.stop_listeners(nd)
    assert not pid_alive(pid)


def test_shaping_a_link_limits_its_rate_and_clearing_it_restores_speed(
    clean_testbed: Testbed,
) -> None:
    tb = clean_testbed
    nd = tb.node(6 % len(tb.nodes))
    size = 4_000_000  # bytes; 32 Mbit

    def pull() -> float:
        t0 = time.monotonic()
        r = tb.ssh(nd, f"head -c {size} /dev/zero", timeout=120)
        assert len(r.stdout) == size
        return time.monotonic() - t0

    # 5 Mbit/s: 32 Mbit take 6.4 s shaped, so an unshaped pull that a busy host slows to a
    # second or more of ssh start-up (1.07 s seen at load average 26) is still far from it.
    fast = pull()
    tb.shape_link(nd, "mgmt", "5mbit")
    slow = pull()
    tb.clear_shaping(nd, "mgmt")
    again = pull()
    assert slow >= 4.8, f"32 Mbit at 5 Mbit/s took {slow:.2f} s"
    assert fast < slow / 2 and again < slow / 2, (fast, slow, again)


def test_the_docker_wrapper_fails_the_first_run_after_a_load_with_the_real_error(
    clean_testbed: Testbed, testbed_image: str
) -> None:
    tb = clean_testbed
    nd = tb.node(2 % len(tb.nodes))
    tb.install_docker_wrapper(nd, failures=1)
    archive = tb.image_archive(testbed_image)
    assert tb.ssh(nd, "command -v docker").stdout.strip() == str(nd.bin_dir / "docker")
    r = tb.ssh(nd, f"docker load -i {archive}")
    assert TEST_IMAGE in r.stdout
    first = tb.ssh(nd, f"docker run --network host {TEST_IMAGE} true", check=False)
    assert first.returncode == 125
    assert first.stderr.strip() == LAZY_UNPACK_ERROR
    second = tb.ssh(nd, f"docker run --rm --network host {TEST_IMAGE} echo unpacked", check=False)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "unpacked"
    stats = tb.docker_wrapper_stats(nd)
    assert stats["failed"] == 1 and stats["remaining"] == 0
    assert stats["calls"] == ["load", "run", "run"]
    tb.remove_docker_wrapper(nd)
    assert tb.ssh(nd, "command -v docker").stdout.strip() == REAL_DOCKER


def test_docker_limit_flags_cap_memory_and_name_the_data_root_block_device(
    clean_testbed: Testbed, testbed_image: str
) -> None:
    tb = clean_testbed
    nd = tb.node(1 % len(tb.nodes))
    dev = tb.block_device(nd)
    if dev is None:
        flags = tb.docker_run_limit_flags(nd, memory="64m")
    else:
        flags = tb.docker_run_limit_flags(nd, memory="64m", read_bps="8mb")
        assert flags[:2] == ["--device-read-bps", f"{dev}:8mb"]
    r = tb.docker(
        nd,
        "run",
        "--rm",
        "--network",
        "host",
        *flags,
        testbed_image,
        "sh",
        "-c",
        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max",
    )
    assert r.stdout.strip() == str(64 * 2**20)
    if dev is None:  # e.g. /run on tmpfs: documented in docs/testbed.md, nothing to throttle
        return
    r = tb.docker(
        nd,
        "run",
        "--rm",
        "--network",
        "host",
        *flags,
        testbed_image,
        "cat",
        "/sys/fs/cgroup/blkio/blkio.throttle.read_bps_device",
        check=False,
    )
    if r.returncode == 0:  # cgroup v1: the throttle is visible inside the container
        assert r.stdout.split()[-1] == str(8 * 2**20)


def test_heal_undoes_every_fault_at_once(testbed: Testbed) -> None:
    tb = testbed
    a, b = tb.node(0), tb.node(len(tb.nodes) - 1)
    tb.cut_link(a, "fabric")
    tb.shape_link(b, "mgmt", "10mbit")
    tb.drop_port(b, 2222)
    tb.install_docker_wrapper(a)
    tb.start_silent_listener(b, 2201)
    tb.stop_daemon(b, "dockerd")
    tb.stop_daemon(a, "sshd")
    fixed = tb.heal()
    assert fixed, "heal said there was nothing to fix"
    assert tb.heal() == []
    for row in tb.status():
        assert all(row[d]["alive"] for d in ("sshd", "containerd", "dockerd")), row
        assert all(x["state"] == "UP" for x in row["addrs"].values()), row
    assert _strict_ssh(tb, a, "command -v docker").stdout.strip() == REAL_DOCKER
    qdisc = subprocess.run(
        ["tc", "qdisc", "show", "dev", b.host_mgmt_veth], capture_output=True, text=True, check=True
    )
    assert "tbf" not in qdisc.stdout
    assert tcp_probe(b.mgmt_addr, 2201, timeout=2) == "refused"


# --------------------------------------------------------------------------------------------------
# Life cycle


def _leftovers(tb: Testbed, prefix: str, records: list[dict]) -> list[str]:  # type: ignore[type-arg]
    problems = []
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    problems += [f"netns {line}" for line in ns.splitlines() if line.startswith(f"{prefix}-")]
    links = json.loads(
        subprocess.run(["ip", "-j", "link"], capture_output=True, text=True, check=True).stdout
    )
    problems += [f"link {x['ifname']}" for x in links if x["ifname"].startswith(f"{prefix}-")]
    mounts = Path("/proc/self/mountinfo").read_text()
    problems += [f"mount {line}" for line in mounts.splitlines() if str(tb.root) in line]
    for rec in records:
        stat = Path(f"/proc/{rec['pid']}/stat")
        if stat.exists() and pid_alive(rec["pid"], rec["start"]):
            problems.append(f"pid {rec['pid']} ({rec['what']}) still running")
    problems += [f"netns hosts {p}" for p in Path("/etc").glob(f"netns/{prefix}-*")]
    problems += [f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob(f"*/{prefix}-node*")]
    if tb.root.exists():
        problems.append(f"root folder {tb.root}")
    return problems


def test_up_down_up_of_a_second_small_testbed_leaves_nothing_behind(testbed: Testbed) -> None:
    other = Testbed(
        Path(f"{testbed.root}-updown"), prefix="ctc", mgmt_subnet="198.18.2", fab_subnet="198.18.3"
    )
    try:
        other.up(2)
        first = [dict(h) for h in other.state()["history"]]
        for round_ in range(2):
            took = other.up(2)  # round 0: over a running testbed, which goes away first
            assert took < 60
            if round_ == 0:
                assert not any(pid_alive(h["pid"], h["start"]) for h in first)
            r = other.ssh(1, "docker info --format '{{.DockerRootDir}}' && ssh ctc-node0 hostname")
            assert r.stdout.split() == [str(other.node(1).data_root), "ctc-node0"]
            assert tcp_probe(testbed.node(0).mgmt_addr, 22) == "open", "session testbed untouched"
            if round_ == 0:
                other.start_silent_listener(0, 2222)
                other.stop_daemon(1, "sshd")
                other.start_daemon(1, "sshd")
            records = [
                {"pid": h["pid"], "start": h["start"], "what": h["what"]}
                for h in other.state()["history"]
            ]
            assert len(records) >= 6
            other.down()
            assert _leftovers(other, "ctc", records) == []
    finally:
        other.down()
    assert _strict_ssh(testbed, 0, "true").returncode == 0
