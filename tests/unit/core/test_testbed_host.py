"""Two testbeds up side by side share the machine's bridge sysctls: the first up sets them to 0,
the last down puts the machine's values back, whatever the order (orchestrator/testbed/host.py)."""

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


def test_the_first_testbed_down_leaves_the_settings_to_the_one_still_up(tmp_path):
    sysctl, shared = machine(tmp_path)
    a, b = tmp_path / "tb-a", tmp_path / "tb-b"
    a.mkdir(), b.mkdir()
    host.hold(a, path=shared, sysctl_dir=sysctl)
    assert values(sysctl) == {"0"}
    host.hold(b, path=shared, sysctl_dir=sysctl)  # sees 0: must not record 0 as the original
    host.release(a, path=shared)
    assert values(sysctl) == {"0"}  # b is still up: its bridged traffic must keep flowing
    host.release(b, path=shared)
    assert values(sysctl) == {"1"}  # the machine's values, back
    assert not shared.exists()


def test_a_holder_whose_folder_is_gone_no_longer_counts(tmp_path):
    sysctl, shared = machine(tmp_path)
    crashed, a = tmp_path / "tb-crashed", tmp_path / "tb-a"
    crashed.mkdir(), a.mkdir()
    host.hold(crashed, path=shared, sysctl_dir=sysctl)
    crashed.rmdir()  # removed by hand after a crash, never torn down
    host.hold(a, path=shared, sysctl_dir=sysctl)
    host.release(a, path=shared)
    assert values(sysctl) == {"1"}
