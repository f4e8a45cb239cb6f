"""Fixtures of the netns tier: one real testbed (default 8 nodes) for the whole session.

- `testbed` (session): a `orchestrator.testbed.Testbed` that is up. Torn down at the end of the
  session, after a failure, on Ctrl-C / SIGTERM (try/finally) and at interpreter exit (atexit).
- `clean_testbed` (function): the same testbed, healed after the test (links up, shaping and
  nftables gone, listeners stopped, docker wrappers removed, stopped daemons started again).
- `testbed_image` (session): the offline busybox test image (`ctb/busybox:1`) on every node.

Prerequisites (root; ip, sshd, dockerd, containerd, ...): missing ones SKIP the tier loudly, except
that with CI=true as root they FAIL it. Every test in this folder gets the `netns` marker.

Environment: CLUSTER_TESTBED_DIR (state folder, default /run/cluster-testbed), CTB_NODES (default 8),
CTB_KEEP_LOGS (a folder: every node's sshd/containerd/dockerd logs are copied there at teardown).
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator import testbed as tbmod
from orchestrator.testbed import Testbed, TestbedError

_HERE = Path(__file__).resolve().parent
_NOT_RUN: list[str] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.netns)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _NOT_RUN:
        terminalreporter.write_sep("!", "NETNS TIER DID NOT RUN", red=True, bold=True)
        for reason in _NOT_RUN:
            terminalreporter.write_line(f"!!! {reason}", red=True, bold=True)
        terminalreporter.write_line(
            "!!! run the suite as root with .ci/system-deps.sh installed to exercise real sshd/dockerd",
            red=True,
            bold=True,
        )


def _require_prerequisites() -> None:
    problems = tbmod.missing_prerequisites()
    if not problems:
        return
    reason = "netns testbed cannot run: " + "; ".join(problems)
    if os.environ.get("CI") == "true" and os.geteuid() == 0:
        pytest.fail(f"CI=true and root, so this is a failure, not a skip: {reason}", pytrace=False)
    if reason not in _NOT_RUN:
        _NOT_RUN.append(reason)
    pytest.skip(f"!!! NOT RUN (this is not a pass): {reason} !!!")


def _controller_ssh_listing() -> dict[str, bytes] | None:
    d = Path("/root/.ssh")
    if not d.is_dir():
        return None
    out = {}
    for p in sorted(d.iterdir()):
        out[p.name] = p.read_bytes() if p.is_file() else b"<dir>"
    return out


# Names and subnets apart from the first testbed's (ctb, 198.18.0-1), from each other and from
# those tests nest (cti 198.18.4-5, ctc 198.18.2-3): `--tier-group netns-2` and `netns-3`
# (tests/conftest.py) each bring up their own, beside the first.
OTHER_TESTBEDS: dict[str, dict[str, Any]] = {
    "netns-2": {
        "root": Path(f"{tbmod.default_root()}-2"),
        "prefix": "ctd",
        "mgmt_subnet": "198.18.6",
        "fab_subnet": "198.18.7",
    },
    "netns-3": {
        "root": Path(f"{tbmod.default_root()}-3"),
        "prefix": "cte",
        "mgmt_subnet": "198.18.8",
        "fab_subnet": "198.18.9",
    },
}


@pytest.fixture(scope="session")
def controller_root_ssh_before() -> dict[str, bytes] | None:
    """The controller's /root/.ssh (file name -> bytes; None if absent) before the testbed."""
    return _controller_ssh_listing()


@pytest.fixture(scope="session")
def testbed(
    request: pytest.FixtureRequest, controller_root_ssh_before: dict[str, bytes] | None
) -> Iterator[Testbed]:
    _require_prerequisites()
    n = int(os.environ.get("CTB_NODES") or tbmod.DEFAULT_NODES)
    other = OTHER_TESTBEDS.get(request.config.getoption("--tier-group") or "")
    tb = Testbed(**other) if other else Testbed()
    finished = threading.Event()

    def _down_at_exit() -> None:
        if not finished.is_set():
            tb.down()

    def _on_sigterm(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}: tearing the testbed down")

    atexit.register(_down_at_exit)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        try:
            tb.up(n)
        except TestbedError as e:
            pytest.fail(f"the netns testbed did not come up: {e}", pytrace=False)
        yield tb
    finally:
        try:
            tb.down(keep_logs=os.environ.get("CTB_KEEP_LOGS") or None)
        finally:
            finished.set()
            atexit.unregister(_down_at_exit)
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def clean_testbed(testbed: Testbed) -> Iterator[Testbed]:
    """The session testbed; every fault is healed after the test, pass or fail."""
    yield testbed
    testbed.heal()


@pytest.fixture(scope="session")
def testbed_image(testbed: Testbed) -> str:
    """`ctb/busybox:1` loaded on every node (same image ID everywhere); its archive stays under
    <root>/image/ for `docker load` tests."""
    return testbed.load_test_image()
