"""The kernel log reader (issue 28): every family on real lines, every time form, the Xid table."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.kernel.read import (
    XID_TABLE_URL,
    classify,
    events,
    link_flaps,
    looks_like_kernel_log,
    parse_line,
    parse_lines,
    xid_meaning,
)
from tests.engine_lines import by_id, load_corpus

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kernel"


def _event(entry_id: str):  # type: ignore[no-untyped-def]
    ev = classify(parse_line(1, by_id(entry_id).text))
    assert ev is not None, entry_id
    return ev


def test_every_line_of_every_kernel_fixture_file_is_a_real_corpus_line() -> None:
    texts = {e.text for e in load_corpus()}
    files = sorted(p for p in FIXTURES.glob("*.log") if not p.name.startswith("captured-"))
    assert len(files) >= 6
    for path in files:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            assert line in texts, f"{path.name}:{n} is not a corpus line: {line!r}"


def test_a_captured_kernel_window_holds_every_corpus_line_that_cites_it() -> None:
    """A capture is kept whole (a real node's window); the corpus lines citing it are in it."""
    cited = [e for e in load_corpus() if e.source.startswith("captured: tests/fixtures/kernel/")]
    assert len(cited) >= 3
    for e in cited:
        path = FIXTURES.parents[1] / e.source.removeprefix("captured: tests/")
        assert e.text in path.read_text().splitlines(), e.id
    evs = list(events(parse_lines((FIXTURES / "captured-testbed-cgroup-oom.log").read_text())))
    kills = [ev for ev in evs if ev.family == "oom-kill"]
    assert len(kills) == 2 and kills[0].container is not None
    assert kills[0].pid == kills[1].pid and kills[0].cgroup is not None


@pytest.mark.parametrize(
    ("entry", "family", "cause"),
    [
        ("kernel-oom-kill-constraint-docker-scope", "oom-kill", True),
        ("kernel-memory-cgroup-oom-killed-process", "oom-kill", True),
        ("kernel-global-oom-killed-process", "oom-kill", True),
        ("nvrm-xid-79-fallen-off-the-bus", "xid", True),
        ("nvrm-gpu-fallen-off-the-bus-no-xid", "xid", True),
        ("pcie-aer-corrected-physical-layer", "aer", False),
        ("pcie-aer-multiple-corrected", "aer", False),
        ("mlx5-core-link-down", "link", True),
        ("igb-nic-link-is-down", "link", True),
        ("kernel-hung-task-blocked-120s", "hung-task", True),
        ("kernel-hung-task-dmesg-t", "hung-task", True),
        ("nvme-io-timeout-completion-polled", "io-error", True),
        ("blk-update-request-io-error-nvme", "io-error", True),
        ("block-io-error-read-nvme", "io-error", True),
        ("ext4-fs-error-find-entry", "io-error", True),
        ("xfs-metadata-io-error", "io-error", True),
        ("segfault-python-libc", "segfault", True),
        ("segfault-python3-journal", "segfault", True),
    ],
)
def test_each_family_is_read_off_its_real_lines(entry: str, family: str, cause: bool) -> None:
    ev = _event(entry)
    assert ev.family == family
    assert ev.cause is cause


def test_the_oom_line_names_the_victim_and_its_container() -> None:
    ev = _event("kernel-oom-kill-constraint-docker-scope")
    assert (ev.pid, ev.comm) == (7134, "java")
    assert ev.container == "00748bf4e957f82c239a1db8a88579059b7d40c7b5fbd3f43617d31d3f646f12"
    killed = _event("kernel-memory-cgroup-oom-killed-process")
    assert (killed.pid, killed.comm, killed.container) == (15617, "python3", None)
    assert "memory cgroup" in killed.summary


def test_an_xid_carries_its_number_gpu_and_nvidias_meaning() -> None:
    ev = _event("nvrm-xid-79-fallen-off-the-bus")
    assert (ev.xid, ev.device) == (79, "0000:44:00")
    assert "fallen off the bus" in ev.summary
    assert _event("nvrm-gpu-fallen-off-the-bus-no-xid").xid == 79
    assert "ECC" in xid_meaning(48)
    assert XID_TABLE_URL in xid_meaning(9999)


def test_nic_and_disk_lines_name_their_device() -> None:
    assert _event("mlx5-core-link-down").device == "enp1s0f0np0"
    assert _event("igb-nic-link-is-down").device == "eth0"
    assert _event("blk-update-request-io-error-nvme").device == "nvme0n1"
    assert _event("ext4-fs-error-find-entry").device == "nvme0n1p1"
    assert _event("xfs-metadata-io-error").device == "dm-7"
    seg = _event("segfault-python-libc")
    assert (seg.pid, seg.comm) == (4598, "python2")


def test_link_flaps_count_downs_per_interface() -> None:
    evs = list(events(parse_lines((FIXTURES / "link.log").read_text())))
    assert link_flaps(evs) == {"enp1s0f0np0": 1, "enp1s0f1np1": 1, "eth0": 1}


@pytest.mark.parametrize(
    ("text", "wall", "mono", "message"),
    [
        (
            "2026-12-03T07:10:11.250000+00:00 spark-05 kernel: NVRM: Xid (PCI:0000:44:00): 79",
            1796281811.25,
            None,
            "NVRM: Xid (PCI:0000:44:00): 79",
        ),
        (
            "2024-04-29T14:55:41,678628+02:00 pool invoked oom-killer: gfp_mask=0x6200ca",
            1714395341.678628,
            None,
            "pool invoked oom-killer: gfp_mask=0x6200ca",
        ),
        (
            "[  514.682838] EXT4-fs error (device sda)",
            None,
            514.682838,
            "EXT4-fs error (device sda)",
        ),
        (
            "[Sun Mar 30 08:24:00 2025] Out of memory: Killed process 7899 (python)",
            1743323040.0,
            None,
            "Out of memory: Killed process 7899 (python)",
        ),
    ],
)
def test_every_time_form_is_read(
    text: str, wall: float | None, mono: float | None, message: str
) -> None:
    line = parse_line(1, text)
    assert line.message == message
    assert line.mono == mono
    if wall is None:
        assert line.wall is None
    else:
        assert line.wall == pytest.approx(wall, abs=1e-3)
    assert line.kernel


def test_a_syslog_line_takes_the_year_given_and_keeps_its_dmesg_time() -> None:
    line = parse_line(3, by_id("kernel-memory-cgroup-oom-killed-process").text, year=2021)
    assert line.n == 3 and line.mono == pytest.approx(514.682838)
    assert line.wall == pytest.approx(1621120167.0)  # 2021-05-15 23:09:27 UTC
    assert line.node_time(boot_wall=1000.0) == line.wall  # a stated wall time wins


def test_a_dmesg_time_becomes_wall_time_with_the_nodes_boot_time() -> None:
    line = parse_line(1, "[  100.500000] mlx5_core 0000:01:00.0 enp1s0f0np0: Link down")
    assert line.node_time(boot_wall=None) is None
    assert line.node_time(boot_wall=1_700_000_000.0) == pytest.approx(1_700_000_100.5)


def test_a_pasted_kernel_log_is_told_from_an_engine_log_by_its_form() -> None:
    assert looks_like_kernel_log((FIXTURES / "disk.log").read_text())
    assert looks_like_kernel_log((FIXTURES / "oom.log").read_text())
    engine = "\n".join(
        [
            "2026-03-24T22:12:00.000000001Z [2026-03-24 22:12:00 TP3] Load weight begin.",
            "2026-03-24T22:12:01.000000001Z INFO 03-24 22:12:01 [core.py:61] Initializing",
            by_id("kernel-memory-cgroup-oom-killed-process").text,
        ]
    )
    assert not looks_like_kernel_log(engine)
    assert not looks_like_kernel_log("")


def test_lines_of_no_family_are_not_events() -> None:
    for text in (
        "[  509.524989] ctb-fab: port 8(ctb-f7) entered blocking state",
        "Feb 14 05:03:41 gpu-1 kernel: EXT4-fs (md127p3): re-mounted 0f3c r/w. Quota mode: none.",
    ):
        assert classify(parse_line(1, text)) is None


def test_the_keyword_prefilter_finds_every_family_line_the_full_parse_finds() -> None:
    from orchestrator.kernel.read import family_events

    texts = [p.read_text() for p in sorted(FIXTURES.glob("*.log"))]
    texts += [e.text for e in load_corpus() if "kernel" in e.kind]
    for text in texts:
        full = [(e.family, e.line.n, e.cause) for e in events(parse_lines(text))]
        fast = [(e.family, e.line.n, e.cause) for e in family_events(text)]
        assert fast == full


def test_only_a_hardware_xid_becomes_the_cause_signature_and_the_yaml_lists_the_same_numbers() -> (
    None
):
    import re

    from orchestrator.kernel.read import HARDWARE_XIDS, classify, parse_line, signature_of
    from orchestrator.postmortem.signatures import load_signatures

    hw = load_signatures().by_id["nvrm-xid"].sig.patterns[0].regex
    listed = re.search(r"\): \(([0-9|]+)\)", hw)
    assert listed is not None and {int(x) for x in listed.group(1).split("|")} == HARDWARE_XIDS
    for xid, want in ((79, "nvrm-xid"), (13, "nvrm-xid-application"), (45, "nvrm-xid-application")):
        line = parse_line(1, f"NVRM: Xid (PCI:0000:43:00): {xid}, pid=12, name=python3, x")
        ev = classify(line)
        assert ev is not None and signature_of(ev) == want


def test_an_uncorrected_fatal_pcie_error_is_the_cause_signature_a_corrected_one_is_context() -> (
    None
):
    from orchestrator.kernel.read import classify, parse_line, signature_of

    fatal = classify(
        parse_line(
            1,
            "pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: 0000:00:03.0",
        )
    )
    assert fatal is not None and fatal.cause and signature_of(fatal) == "pcie-aer-fatal"
    corrected = classify(
        parse_line(1, "pcieport 0000:00:1c.0: AER: Corrected error received: 0000:00:1c.0")
    )
    assert corrected is not None and not corrected.cause
