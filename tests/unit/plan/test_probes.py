"""Probes: every parser on every captured output, and the ways a node's answer can go wrong.

Fixtures live in `tests/fixtures/probes/<probe>/<case>.stdout` (+ `.stderr`, `.exit`); each
folder's README says where each capture came from. Every case's parsed result is compared with
`<case>.parsed.json` beside it; set `CLUSTER_UPDATE_GOLDENS=1` to rewrite those after a
deliberate change, then read the diff.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.errors import ProbeParseError
from orchestrator.probes.base import Probe
from orchestrator.probes.gpu import NVIDIA_SMI, GpuInfo, parse_nvidia_smi
from orchestrator.probes.host import HOST, HostInfo, oci_arch, parse_uname
from orchestrator.probes.interfaces import (
    IP_ADDR,
    IP_LINK,
    Interface,
    find_interface,
    parse_ip_addr,
)
from orchestrator.probes.meminfo import MEMINFO, MemInfo, parse_meminfo, parse_meminfo_table
from orchestrator.transport.base import CommandResult

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "probes"
UPDATE = os.environ.get("CLUSTER_UPDATE_GOLDENS") == "1"
KIB = 1024

PROBES: dict[str, Probe[Any]] = {
    "meminfo": MEMINFO,
    "ip_addr": IP_ADDR,
    "ip_link": IP_LINK,
    "nvidia_smi": NVIDIA_SMI,
    "host": HOST,
}


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
    return PROBES[probe].interpret(case.exit_status, case.stdout, case.stderr)


ALL_CASES = sorted((path.parent.name, path.stem) for path in FIXTURES.glob("*/*.stdout"))


def dump(result: Any) -> Any:
    if isinstance(result, BaseModel):
        return result.model_dump(mode="json")
    return [dump(item) for item in result]


# --- every fixture -------------------------------------------------------------------------


def test_every_probe_has_at_least_one_captured_fixture() -> None:
    assert {probe for probe, _ in ALL_CASES} == set(PROBES)


@pytest.mark.parametrize(("probe", "name"), ALL_CASES, ids=[f"{p}/{n}" for p, n in ALL_CASES])
def test_every_captured_output_parses_to_its_golden_answer(probe: str, name: str) -> None:
    case = load(probe, name)
    got = dump(PROBES[probe].interpret(case.exit_status, case.stdout, case.stderr))
    if UPDATE:
        case.golden.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert case.golden.exists(), f"no {case.golden.name}: run with CLUSTER_UPDATE_GOLDENS=1"
    assert got == json.loads(case.golden.read_text())


@pytest.mark.parametrize("probe", sorted(PROBES))
def test_every_probe_is_an_argv_of_plain_strings_never_a_shell_line(probe: str) -> None:
    argv = PROBES[probe].argv
    assert isinstance(argv, tuple) and argv
    assert all(isinstance(word, str) and word for word in argv)
    assert " " not in argv[0] and "/" not in argv[0], "argv[0] is a bare program name"


# --- base: how exit statuses become answers or errors -------------------------------------


def test_a_parse_error_raised_for_a_named_node_carries_that_node() -> None:
    with pytest.raises(ProbeParseError) as caught:
        HOST.interpret(0, "not-a-uname-line\n", "", node="spark-3")
    assert caught.value.probe == "host"
    assert caught.value.node == "spark-3"
    assert str(caught.value).startswith("node spark-3: probe host: ")


def test_a_failed_command_is_reported_with_its_argv_exit_status_and_last_stderr_line() -> None:
    with pytest.raises(ProbeParseError) as caught:
        MEMINFO.interpret(1, "", "first line\ncat: /proc/meminfo: synthetic failure\n")
    message = str(caught.value)
    assert "probe meminfo" in message
    assert "`cat /proc/meminfo` exited 1" in message
    assert message.endswith("cat: /proc/meminfo: synthetic failure")


def test_a_failed_command_for_a_named_node_says_the_shells_complaint_and_carries_the_node() -> None:
    with pytest.raises(ProbeParseError) as caught:
        HOST.interpret(127, "", "/bin/bash: line 1: uname: command not found\n", node="spark-2")
    assert "exited 127: /bin/bash: line 1: uname: command not found" in str(caught.value)
    assert caught.value.probe == "host" and caught.value.node == "spark-2"


def test_a_command_killed_by_a_signal_is_an_error_not_an_answer() -> None:
    with pytest.raises(ProbeParseError, match="exited None"):
        HOST.interpret(None, "", "")


def test_a_transport_result_is_read_with_its_node_name() -> None:
    case = load("host", "devbox-x86_64")
    result = CommandResult(
        node="vm-node",
        argv=HOST.argv,
        exit_status=case.exit_status,
        stdout=case.stdout,
        stderr=case.stderr,
        duration_s=0.01,
    )
    assert HOST.read(result).hostname == "vm"
    broken = CommandResult("vm-node", HOST.argv, 0, "only-one-word\n", "", 0.01)
    with pytest.raises(ProbeParseError) as caught:
        HOST.read(broken)
    assert caught.value.node == "vm-node"


# --- meminfo -------------------------------------------------------------------------------


def test_meminfo_converts_the_kernels_kilobytes_to_bytes() -> None:
    info = answer("meminfo", "devbox-x86_64")
    assert isinstance(info, MemInfo)
    assert info.mem_total == 24684096 * KIB
    assert info.swap_total == 0 and info.swap_free == 0


def test_meminfo_keeps_unitless_counts_as_counts() -> None:
    table = parse_meminfo_table(load("meminfo", "devbox-x86_64").stdout)
    assert table["HugePages_Total"] == 0
    assert table["Hugepagesize"] == 2048 * KIB


def test_a_gb10_after_a_big_read_has_free_memory_far_below_available() -> None:
    info = answer("meminfo", "spark-gb10-edited")
    gib = 1024**3
    assert info.mem_free < 42 * gib < 115 * gib < info.mem_available
    assert info.cached > 72 * gib


def test_a_meminfo_without_memavailable_is_refused_by_name() -> None:
    text = load("meminfo", "devbox-x86_64").stdout
    without = "".join(line for line in text.splitlines(True) if not line.startswith("MemAvail"))
    with pytest.raises(ProbeParseError, match="probe meminfo: no MemAvailable"):
        parse_meminfo(without)


def test_a_meminfo_line_without_a_number_raises_a_probe_parse_error() -> None:
    text = re.sub(
        r"^Dirty:.*$", "Dirty:  lots kB", load("meminfo", "devbox-x86_64").stdout, flags=re.M
    )
    with pytest.raises(ProbeParseError, match="probe meminfo: line 19 has no count in kB"):
        parse_meminfo(text)


def test_text_that_is_not_meminfo_at_all_raises_a_probe_parse_error() -> None:
    with pytest.raises(ProbeParseError, match="probe meminfo"):
        parse_meminfo(load("host", "devbox-x86_64").stdout)


# --- interfaces ----------------------------------------------------------------------------


def test_ip_addr_reports_addresses_with_their_prefix_length() -> None:
    interfaces = answer("ip_addr", "devbox")
    eth0 = find_interface(interfaces, "eth0")
    assert eth0 is not None
    assert eth0.ipv4 == ("192.0.2.2/24",)
    assert eth0.ipv6 == ("fd00::2/64", "fe80::fc:ff:fe00:1/64")
    assert eth0.mtu == 1400 and eth0.mac == "02:fc:00:00:00:01" and eth0.usable


def test_an_interface_that_is_administratively_down_is_neither_up_nor_usable() -> None:
    ifb0 = find_interface(answer("ip_addr", "devbox"), "ifb0")
    assert ifb0 is not None
    assert not ifb0.admin_up and not ifb0.lower_up and ifb0.operstate == "DOWN"
    assert not ifb0.usable


def test_a_link_whose_peer_is_down_is_admin_up_without_carrier() -> None:
    fab0 = find_interface(answer("ip_addr", "veth-peer-down"), "fab0")
    assert fab0 is not None
    assert fab0.admin_up and not fab0.lower_up and fab0.no_carrier
    assert fab0.operstate == "LOWERLAYERDOWN"
    assert fab0.ipv4 == ("198.18.1.10/24",), "the address stays configured"
    assert not fab0.usable


def test_the_same_link_with_its_peer_up_is_usable_at_mtu_9000() -> None:
    fab0 = find_interface(answer("ip_addr", "veth-both-up"), "fab0")
    assert fab0 is not None
    assert fab0.usable and fab0.mtu == 9000 and fab0.peer == "fab1"


def test_loopback_counts_as_usable_although_its_operstate_is_unknown() -> None:
    lo = find_interface(answer("ip_addr", "devbox"), "lo")
    assert lo is not None and lo.operstate == "UNKNOWN" and lo.usable


def test_a_spark_shaped_node_shows_both_twins_of_the_cabled_port_and_the_unplugged_one() -> None:
    interfaces = answer("ip_addr", "spark-edited")
    twin_a = find_interface(interfaces, "enp1s0f1np1")
    twin_b = find_interface(interfaces, "enP2p1s0f1np1")
    unplugged = find_interface(interfaces, "enp1s0f0np0")
    assert twin_a is not None and twin_a.ipv4 == ("192.168.100.10/24",) and twin_a.usable
    assert twin_b is not None and twin_b.ipv4 == ("192.168.101.10/24",) and twin_b.usable
    assert unplugged is not None and unplugged.no_carrier and unplugged.operstate == "DOWN"


def test_looking_up_an_interface_the_node_does_not_have_answers_none() -> None:
    assert find_interface(answer("ip_addr", "spark-edited"), "enp1s0f0np1") is None


def test_ip_link_reports_link_state_without_addresses() -> None:
    links = answer("ip_link", "veth-peer-down")
    fab0 = find_interface(links, "fab0")
    assert fab0 is not None and fab0.no_carrier and fab0.ipv4 == () and fab0.ipv6 == ()
    assert [link.name for link in answer("ip_link", "devbox")] == ["lo", "ifb0", "ifb1", "eth0"]


def test_empty_objects_that_older_iproute2_prints_are_skipped() -> None:
    # The devbox capture, edited: an empty object inserted where a filtered-out link would be.
    text = load("ip_addr", "devbox").stdout.replace("[{", "[{},{", 1)
    names = [iface.name for iface in parse_ip_addr(text)]
    assert names == ["lo", "ifb0", "ifb1", "eth0"]


def test_ip_output_that_is_not_json_raises_a_probe_parse_error_naming_the_probe() -> None:
    with pytest.raises(ProbeParseError, match="probe ip_addr: not JSON"):
        IP_ADDR.interpret(0, load("host", "devbox-x86_64").stdout, "")


def test_ip_output_that_is_a_json_object_instead_of_a_list_is_refused() -> None:
    with pytest.raises(ProbeParseError, match="probe ip_link: expected a JSON list"):
        IP_LINK.interpret(0, '{"ifname": "eth0"}', "")


def test_an_interface_entry_without_a_name_is_refused_with_its_position() -> None:
    entries = json.loads(load("ip_addr", "devbox").stdout)
    del entries[3]["ifname"]
    with pytest.raises(ProbeParseError, match="entry 3 has no 'ifname'"):
        parse_ip_addr(json.dumps(entries))


def test_an_interface_with_a_non_numeric_mtu_is_refused_by_name() -> None:
    entries = json.loads(load("ip_addr", "devbox").stdout)
    entries[3]["mtu"] = "jumbo"
    with pytest.raises(ProbeParseError, match="interface 'eth0' is malformed"):
        parse_ip_addr(json.dumps(entries))


def test_interfaces_are_frozen() -> None:
    eth0 = find_interface(answer("ip_addr", "devbox"), "eth0")
    assert isinstance(eth0, Interface)
    with pytest.raises(ValueError, match="frozen"):
        eth0.mtu = 9000  # type: ignore[misc]


# --- gpu -----------------------------------------------------------------------------------


def test_a_node_without_nvidia_smi_has_no_gpu_rather_than_a_failed_probe() -> None:
    info = answer("nvidia_smi", "absent")
    assert isinstance(info, GpuInfo)
    assert not info.present and info.gpus == ()
    assert info.reason == "bash: line 1: nvidia-smi: command not found"


def test_a_real_gb10_capture_reads_its_unavailable_memory_as_none_not_zero() -> None:
    info = answer("nvidia_smi", "gb10-unsloth-pr10703")
    assert info.present and len(info.gpus) == 1
    gb10 = info.gpus[0]
    assert gb10.name == "NVIDIA GB10"
    assert gb10.memory_total_mib is None and gb10.memory_used_mib is None
    assert gb10.unified_memory


def test_a_gb10_in_the_probes_own_columns_has_driver_and_compute_capability() -> None:
    gb10 = answer("nvidia_smi", "gb10-edited").gpus[0]
    assert (gb10.driver_version, gb10.compute_cap) == ("580.126.09", "12.1")
    assert gb10.unified_memory


def test_a_row_with_the_wrong_number_of_fields_is_refused() -> None:
    with pytest.raises(ProbeParseError, match="probe nvidia_smi: row 1 has 3 fields, not 5"):
        parse_nvidia_smi("NVIDIA GB10, [N/A], 580.126.09\n")


def test_a_memory_field_that_is_not_a_number_is_refused() -> None:
    edited = load("nvidia_smi", "gb10-edited").stdout.replace("[N/A]", "lots", 1)
    with pytest.raises(ProbeParseError, match=r"memory\.total is not a count of MiB"):
        parse_nvidia_smi(edited)


def test_nvidia_smi_printing_nothing_is_refused() -> None:
    with pytest.raises(ProbeParseError, match="no rows"):
        NVIDIA_SMI.interpret(0, "", "")


def test_an_nvidia_smi_failure_that_is_not_absence_stays_an_error() -> None:
    with pytest.raises(ProbeParseError, match="exited 2: synthetic driver complaint"):
        NVIDIA_SMI.interpret(2, "", "synthetic driver complaint\n")


# --- host ----------------------------------------------------------------------------------


def test_uname_reports_hostname_kernel_and_the_docker_platform() -> None:
    host = answer("host", "devbox-x86_64")
    assert isinstance(host, HostInfo)
    assert (host.hostname, host.kernel, host.arch) == ("vm", "6.18.44-fc-v595", "x86_64")
    assert host.platform == "linux/amd64"


def test_a_spark_is_aarch64_to_the_kernel_and_arm64_to_docker() -> None:
    host = answer("host", "spark-edited")
    assert host.arch == "aarch64" and host.platform == "linux/arm64"


def test_an_architecture_with_no_docker_alias_passes_through_unchanged() -> None:
    assert oci_arch("riscv64") == "riscv64"
    assert oci_arch("arm64") == "arm64"


def test_uname_output_with_a_missing_field_is_refused() -> None:
    with pytest.raises(ProbeParseError, match="probe host: expected `hostname kernel machine`"):
        parse_uname("vm x86_64\n")
