"""Two testbeds up side by side share the machine: the first up sets the bridge sysctls to 0 and
makes the host folders the nodes need; the last down puts the values back and removes what was
made, whatever the order (orchestrator/testbed/host.py). A testbed that removed /run/sshd while
another was up made every new SSH connection to the other's nodes fail (CI, stop 34)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.testbed import host


def machine(tmp_path: Path) -> tuple[Path, Path]:
    sysctl = tmp_path / "proc-sys-net-bridge"
    sysctl.mkdir()
    for key in host.BRIDGE_KEYS:
        (sysctl / key).write_text("1\n")
    return sysctl, tmp_path / "host.json"


def values(sysctl: Path) -> set[str]:
    return {(sysctl / k).read_text().strip() for k in host.BRIDGE_KEYS}


def test_the_first_testbed_down_leaves_the_machine_to_the_one_still_up(tmp_path):
    sysctl, shared = machine(tmp_path)
    a, b = tmp_path / "tb-a", tmp_path / "tb-b"
    a.mkdir(), b.mkdir()
    privsep, shim = tmp_path / "run-sshd", tmp_path / "run-containerd"
    host.hold(a, make=[privsep], ours_if_absent=[shim], path=shared, sysctl_dir=sysctl)
    assert values(sysctl) == {"0"} and privsep.is_dir()
    # b sees 0 and the folder made: it must not record 0 as the machine's value.
    host.hold(b, make=[privsep], ours_if_absent=[shim], path=shared, sysctl_dir=sysctl)
    assert host.release(a, path=shared) == []  # b is up: nothing for a to remove ...
    assert values(sysctl) == {"0"} and privsep.is_dir()  # ... nor to restore
    assert host.release(b, path=shared) == [privsep, shim]  # the last one down: all of it
    assert values(sysctl) == {"1"}
    assert not shared.exists()


def test_a_holder_whose_folder_is_gone_no_longer_counts_but_its_record_does(tmp_path):
    sysctl, shared = machine(tmp_path)
    crashed, a = tmp_path / "tb-crashed", tmp_path / "tb-a"
    crashed.mkdir(), a.mkdir()
    made = tmp_path / "etc-netplan"
    host.hold(crashed, make=[made], path=shared, sysctl_dir=sysctl)
    crashed.rmdir()  # removed by hand after a crash, never torn down
    host.hold(a, make=[made], path=shared, sysctl_dir=sysctl)
    assert host.release(a, path=shared) == [made]  # made by the crashed one: still ours
    assert values(sysctl) == {"1"}  # the machine's value the crashed one recorded
