"""The fabric and node probes preflight needs: every parser on every captured output.

Fixtures: `tests/fixtures/fabric_probes/<probe>/<case>.stdout` (+ `.stderr`, `.exit`), each folder's
README says where each case came from. Every case's parsed answer is compared with
`<case>.parsed.json`; `CLUSTER_UPDATE_GOLDENS=1` rewrites them after a deliberate change.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.dockercli import DockerCli
from orchestrator.errors import ProbeParseError
from orchestrator.probes.base import Probe
from orchestrator.probes.clock import CLOCK, clock_sample, parse_epoch
from orchestrator.probes.containers import containers_probe, parse_labels, parse_size
from orchestrator.probes.disk import df_probe, weights_probe
from orchestrator.probes.peers import peers_probe
from orchestrator.probes.rdma import RDMA, RdmaInfo, fabric_devices, parse_rdma, twin_key
from orchestrator.probes.runtime import DockerInfo, docker_info_probe
from orchestrator.probes.sockets import LISTENING, ListeningSocket, holders
from orchestrator.probes.tcp import (
    connect_probe,
    listener_argv,
    parse_connect,
    parse_listener,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "fabric_probes"
UPDATE = os.environ.get("CLUSTER_UPDATE_GOLDENS") == "1"
WEIGHTS = "/models/org/model"

# One probe per fixture folder; parametrised probes get fixed parameters (goldens depend on them).
PROBES: dict[str, Probe[Any]] = {
    "rdma": RDMA,
    "docker_info": docker_info_probe(DockerCli()),
    "containers": containers_probe(DockerCli()),
    "listening": LISTENING,
    "df": df_probe(("/var/lib/docker",)),
    "weights_dir": weights_probe(WEIGHTS),
    "clock": CLOCK,
    "peers": peers_probe(("nvidia@192.0.2.11",)),
    "tcp_connect": connect_probe("198.18.1.11", "198.18.1.10", 29500, 3.0),
    "tcp_listen": Probe(
        name="tcp_listen", argv=listener_argv("198.18.1.10", 29500, 8, 16), parse=parse_listener
    ),
}


def probe_for(probe: str, case: str) -> Probe[Any]:
    return PROBES[probe]


@dataclass(frozen=True)
class Case:
    probe: str
    name: str
    exit_status: int
    stdout: str
    stderr: str

    @property
    def golden(self) -> Path:
        return FIXTURES / self.probe / f"{self.name}.parsed.json"


def load(probe: str, name: str) -> Case:
    folder = FIXTURES / probe
    stderr = folder / f"{name}.stderr"
    exit_file = folder / f"{name}.exit"
    return Case(
        probe=probe,
        name=name,
        exit_status=int(exit_file.read_text()) if exit_file.exists() else 0,
        stdout=(folder / f"{name}.stdout").read_text(),
        stderr=stderr.read_text() if stderr.exists() else "",
    )


def answer(probe: str, name: str) -> Any:
    case = load(probe, name)
    return probe_for(probe, name).interpret(case.exit_status, case.stdout, case.stderr)


def dump(result: Any) -> Any:
    if isinstance(result, BaseModel):
        return result.model_dump(mode="json")
    if isinstance(result, tuple | list):
        return [dump(item) for item in result]
    return result


FOLDERS = list(PROBES)
CASES = sorted(
    (path.parent.name, path.stem)
    for folder in FOLDERS
    for path in (FIXTURES / folder).glob("*.stdout")
)


def test_every_fabric_probe_has_captured_fixtures_and_a_readme() -> None:
    assert {probe for probe, _ in CASES} == set(FOLDERS)
    for folder in FOLDERS:
        assert (FIXTURES / folder / "README.md").exists(), folder


@pytest.mark.parametrize(("probe", "name"), CASES, ids=[f"{p}/{n}" for p, n in CASES])
def test_every_captured_output_parses_to_its_golden_answer(probe: str, name: str) -> None:
    got = dump(answer(probe, name))
    golden = load(probe, name).golden
    if UPDATE:
        golden.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert golden.exists(), f"no {golden.name}: run with CLUSTER_UPDATE_GOLDENS=1"
    assert got == json.loads(golden.read_text())


@pytest.mark.parametrize("probe", sorted(PROBES))
def test_every_probe_is_an_argv_of_plain_strings_never_a_shell_line(probe: str) -> None:
    argv = PROBES[probe].argv
    assert isinstance(argv, tuple) and argv
    assert all(isinstance(word, str) and word for word in argv)
    assert " " not in argv[0] and "/" not in argv[0]


@pytest.mark.parametrize(
    "make",
    [
        lambda v: df_probe((v,)),
        lambda v: weights_probe(v),
        lambda v: peers_probe((v,)),
        lambda v: connect_probe(v, v, 1, 1.0),
    ],
    ids=["df", "weights", "peers", "tcp_connect"],
)
def test_values_travel_as_their_own_argv_words_never_inside_a_script(make: Any) -> None:
    nasty = "/tmp/a b'$(reboot)\";*"
    probe = make(nasty)
    assert nasty in probe.argv
    scripts = [w for w in probe.argv if "\n" in w]
    assert all(nasty not in s for s in scripts)


# --- rdma ------------------------------------------------------------------------------------


def test_a_spark_shows_four_roce_devices_with_their_netdevs_and_the_f1_twins_active() -> None:
    rdma: RdmaInfo = answer("rdma", "spark-edited")
    assert [d.name for d in rdma.devices] == [
        "roceP2p1s0f0",
        "roceP2p1s0f1",
        "rocep1s0f0",
        "rocep1s0f1",
    ]
    assert rdma.device("rocep1s0f1").netdevs == ("enp1s0f1np1",)  # type: ignore[union-attr]
    assert [d.name for d in rdma.devices if d.active] == ["roceP2p1s0f1", "rocep1s0f1"]
    assert rdma.dev_infiniband
    assert rdma.for_netdev("enP2p1s0f1np1").name == "roceP2p1s0f1"  # type: ignore[union-attr]


def test_the_rocev2_gid_index_is_the_entry_that_carries_the_ports_ipv4_address() -> None:
    rdma: RdmaInfo = answer("rdma", "spark-edited")
    device = rdma.device("rocep1s0f1")
    assert device is not None
    assert device.rocev2_gid_index("192.168.100.10") == 3
    assert device.rocev2_gid_index() == 3  # no address given: the first IPv4 RoCEv2 entry
    gid = next(g for g in device.ports[0].gids if g.index == 3)
    assert gid.ipv4 == "192.168.100.10" and gid.rocev2 and gid.ndev == "enp1s0f1np1"


def test_an_ipv6_address_on_the_port_moves_the_rocev2_ipv4_gid_to_index_5() -> None:
    rdma: RdmaInfo = answer("rdma", "spark-gid5-edited")
    assert rdma.device("rocep1s0f1").rocev2_gid_index("192.168.100.10") == 5  # type: ignore[union-attr]
    assert rdma.device("roceP2p1s0f1").rocev2_gid_index("192.168.101.10") == 5  # type: ignore[union-attr]


def test_without_a_cable_no_device_is_active() -> None:
    rdma: RdmaInfo = answer("rdma", "spark-no-cable-edited")
    assert rdma.present and not any(d.active for d in rdma.devices)


def test_a_node_without_rdma_answers_no_devices_rather_than_failing() -> None:
    rdma: RdmaInfo = answer("rdma", "testbed-absent")
    assert rdma == RdmaInfo(devices=(), dev_infiniband=False)
    assert not rdma.present


def test_the_twins_of_a_cx7_port_share_a_name_without_the_pci_domain() -> None:
    assert twin_key("enp1s0f1np1") == twin_key("enP2p1s0f1np1") == "p1s0f1np1"
    assert twin_key("enp1s0f0np0") != twin_key("enp1s0f1np1")
    assert twin_key("eth0") is None and twin_key("lo") is None


def test_the_devices_behind_a_fabric_port_are_both_twins_whichever_name_the_inventory_uses() -> (
    None
):
    rdma: RdmaInfo = answer("rdma", "spark-edited")
    for iface in ("enp1s0f1np1", "enP2p1s0f1np1"):
        assert {d.name for d in fabric_devices(rdma, iface)} == {"rocep1s0f1", "roceP2p1s0f1"}
    assert [d.name for d in fabric_devices(rdma, "eth0")] == []


def test_the_script_reads_a_sysfs_tree_into_exactly_what_the_parser_expects(tmp_path: Path) -> None:
    # The script on a copy of the sysfs layout (the machine here has no RDMA): every attribute
    # file it greps, an unused all-zero GID slot it must skip, and the device's netdev folder.
    port = tmp_path / "class" / "rocep1s0f1" / "ports" / "1"
    files = {
        "state": "4: ACTIVE",
        "phys_state": "5: LinkUp",
        "link_layer": "Ethernet",
        "gid_attrs/types/0": "IB/RoCE v1",
        "gid_attrs/types/3": "RoCE v2",
        "gid_attrs/ndevs/0": "enp1s0f1np1",
        "gid_attrs/ndevs/3": "enp1s0f1np1",
        "gids/0": "fe80:0000:0000:0000:3e6d:66ff:fecc:b3b7",
        "gids/3": "0000:0000:0000:0000:0000:ffff:c0a8:640a",
        "gids/4": "0000:0000:0000:0000:0000:0000:0000:0000",
    }
    for rel, value in files.items():
        (port / rel).parent.mkdir(parents=True, exist_ok=True)
        (port / rel).write_text(value + "\n")
    (tmp_path / "class" / "rocep1s0f1" / "device" / "net" / "enp1s0f1np1").mkdir(parents=True)
    (tmp_path / "dev-ib").mkdir()
    script = RDMA.argv[2].replace("/sys/class/infiniband", str(tmp_path / "class"))
    script = script.replace("/dev/infiniband", str(tmp_path / "dev-ib"))
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
    rdma = parse_rdma(proc.stdout.replace(f"dev:{tmp_path / 'dev-ib'}", "dev:/dev/infiniband"))
    device = rdma.device("rocep1s0f1")
    assert device is not None and device.active and device.netdevs == ("enp1s0f1np1",)
    assert [g.index for g in device.ports[0].gids] == [0, 3]  # the zero slot 4 is skipped
    assert device.rocev2_gid_index("192.168.100.10") == 3
    assert rdma.dev_infiniband


def test_the_script_answers_nothing_on_a_machine_without_rdma() -> None:
    proc = subprocess.run(["sh", "-c", RDMA.argv[2]], capture_output=True, text=True, check=True)
    if not Path("/sys/class/infiniband").exists():
        assert parse_rdma(proc.stdout).devices == ()


def test_a_line_that_is_not_a_sysfs_attribute_is_a_parse_error() -> None:
    with pytest.raises(ProbeParseError, match="line 1"):
        parse_rdma("rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)\n")


def test_an_unmatched_netdev_glob_means_no_netdev_not_an_error() -> None:
    assert parse_rdma("net:*/device/net/*\n").devices == ()


# --- docker info -----------------------------------------------------------------------------


def test_a_spark_daemon_has_the_nvidia_runtime_and_the_testbeds_does_not() -> None:
    spark: DockerInfo = answer("docker_info", "spark-edited")
    testbed: DockerInfo = answer("docker_info", "testbed-node")
    assert spark.nvidia_runtime and spark.root_dir == "/var/lib/docker"
    assert spark.architecture == "aarch64"
    assert not testbed.nvidia_runtime and testbed.reachable
    assert testbed.root_dir == "/run/cluster-testbed/nodes/node0/docker"


@pytest.mark.parametrize("case", ["daemon-down-client20", "daemon-down-client28"])
def test_a_daemon_that_does_not_answer_is_an_answer_with_the_reason(case: str) -> None:
    info: DockerInfo = answer("docker_info", case)
    assert not info.reachable
    assert info.error is not None and "Cannot connect to the Docker daemon" in info.error


# --- containers ------------------------------------------------------------------------------


def test_running_containers_come_with_their_memory_and_labels() -> None:
    found = answer("containers", "spark-other-model-edited")
    by_name = {c.name: c for c in found}
    other = by_name["vllm-mistral-small4"]
    assert other.memory_bytes == int(61.25 * 2**30)
    assert other.cluster_run is None
    rank = by_name["capture-sleeper"]
    assert rank.cluster_run == "20261129T160000Z-abc123"
    assert rank.labels["cluster.rank"] == "0"


def test_no_running_container_is_an_empty_answer() -> None:
    assert answer("containers", "testbed-none") == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("480KiB", 480 * 1024), ("1.5GiB", int(1.5 * 2**30)), ("12MB", 12_000_000), ("0B", 0)],
)
def test_docker_sizes_in_both_unit_families_become_bytes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


def test_a_size_without_a_known_unit_is_a_parse_error() -> None:
    with pytest.raises(ProbeParseError):
        parse_size("12 parsecs")


def test_labels_split_on_commas_and_the_first_equals_sign() -> None:
    assert parse_labels("a=b,c=d=e,f") == {"a": "b", "c": "d=e", "f": ""}


# --- listening sockets -----------------------------------------------------------------------


def test_the_occupied_head_port_shows_as_a_wildcard_listener() -> None:
    sockets = answer("listening", "testbed-head-port-taken")
    assert ListeningSocket(address="0.0.0.0", port=29500) in sockets
    assert ListeningSocket(address="0.0.0.0", port=22) in sockets
    assert holders(sockets, "198.18.1.10", 29500) == [
        ListeningSocket(address="0.0.0.0", port=29500)
    ]
    assert holders(answer("listening", "testbed-node"), "198.18.1.10", 29500) == []


def test_a_listener_on_another_address_does_not_hold_the_heads_fabric_address() -> None:
    sockets = (ListeningSocket(address="127.0.0.1", port=29500),)
    assert holders(sockets, "198.18.1.10", 29500) == []
    assert holders(sockets, "127.0.0.1", 29500) == list(sockets)


def test_a_kernel_without_ipv6_still_answers_from_proc_net_tcp() -> None:
    tcp = load("listening", "testbed-node").stdout.split(
        "  sl  local_address                         "
    )[0]
    got = LISTENING.interpret(1, tcp, "cat: /proc/net/tcp6: No such file or directory\n")
    assert ListeningSocket(address="0.0.0.0", port=22) in got


# --- disk and weights ------------------------------------------------------------------------


def test_df_reports_free_bytes_for_a_path_and_names_a_missing_one() -> None:
    root, weights = answer("df", "testbed-node")
    assert root.present and root.available_bytes == 82155356 * 1024 and root.mount == "/"
    assert not weights.present and "No such file or directory" in (weights.error or "")


def test_the_weights_directory_sums_file_sizes_following_symlinks() -> None:
    w = answer("weights_dir", "devbox-four-files")
    assert (w.exists, w.is_dir, w.files, w.bytes) == (True, True, 4, 1000 + 2345 + 3 + 1000)
    assert w.path == WEIGHTS


def test_a_missing_weights_directory_and_a_plain_file_are_answers() -> None:
    assert not answer("weights_dir", "missing").exists
    plain = answer("weights_dir", "not-a-directory")
    assert plain.exists and not plain.is_dir


# --- clock -----------------------------------------------------------------------------------


def test_the_clock_offset_is_measured_from_the_midpoint_of_the_round_trip() -> None:
    sample = clock_sample("1000.500\n", sent=1000.0, received=1000.2)
    assert sample.offset_s == pytest.approx(0.4)
    assert sample.uncertainty_s == pytest.approx(0.1)


def test_a_date_without_nanoseconds_counts_as_whole_seconds_with_a_wider_error() -> None:
    seconds, whole = parse_epoch(load("clock", "busybox").stdout)
    assert whole and seconds == int(seconds)
    assert clock_sample("1000.%N", 999.9, 1000.1).uncertainty_s == pytest.approx(1.1)


def test_a_clock_answer_that_is_not_a_number_is_a_parse_error() -> None:
    with pytest.raises(ProbeParseError):
        parse_epoch("Sat Nov 29 15:00:00 UTC 2026")


# --- peers -----------------------------------------------------------------------------------


def test_every_peer_answers_with_its_exit_status_and_the_reason_when_it_failed() -> None:
    assert all(p.ok for p in answer("peers", "testbed-all-ok"))
    results = answer("peers", "testbed-one-sshd-stopped")
    bad = [p for p in results if not p.ok]
    assert len(results) == 7 and len(bad) == 1
    assert bad[0].target == "root@198.18.0.13" and bad[0].exit_status == 255
    assert "Connection refused" in bad[0].message


# --- tcp -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "outcome"),
    [
        ("connected", "connected"),
        ("refused", "refused"),
        ("timeout-port-dropped", "timeout"),
        ("unreachable-link-down", "unreachable"),
    ],
)
def test_each_way_a_connect_ends_is_told_apart(case: str, outcome: str) -> None:
    result = answer("tcp_connect", case)
    assert result.outcome == outcome
    assert result.ok == (outcome == "connected")


def test_the_listener_reports_who_connected_and_a_port_it_could_not_bind() -> None:
    seen = answer("tcp_listen", "one-accepted")
    assert seen.listening and seen.finished and seen.accepted_from == ("198.18.1.11",)
    busy = answer("tcp_listen", "bind-failed")
    assert not busy.listening and busy.bind_error == "98 Address already in use"


def test_the_listener_says_its_pid_so_the_controller_can_stop_it() -> None:
    report = parse_listener("listening 198.18.1.10 29500 4242\naccepted 198.18.1.11 5000\n")
    assert report.pid == 4242 and not report.finished


def test_garbage_from_the_connector_is_a_parse_error() -> None:
    with pytest.raises(ProbeParseError):
        parse_connect("Traceback (most recent call last):\n")
