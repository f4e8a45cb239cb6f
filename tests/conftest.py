"""Session-wide: the marker by which a tier finds the processes its tests left running
(tests/leaks.py), set before any test starts a process so every child inherits it; and one
folder of twin weights for every boot on this machine's built-in cluster."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from tests.leaks import MARKER, describe, kill, left_running

os.environ[MARKER] = uuid.uuid4().hex

TESTS = Path(__file__).resolve().parent
# `make test` runs the tiers side by side, as pytest processes (tests/run_tiers.sh), each
# selecting one group with `--tier-group`. What owns something machine-wide runs in its own
# group, one test at a time, as before:
# - netns, netns-2 and netns-3: the netns tier on three testbeds of its own, side by side
#   (each its own root folder, name prefix and subnets; the bridge sysctls they share are held
#   by whichever is up: orchestrator/testbed/host.py). Most of the tier waits (timeouts,
#   throttled links, a node cut for 20 s, a group restarted twice), so three testbeds cut its
#   wall time to about a third on two cores. netns keeps the modules that nest a testbed of
#   their own or spell the first testbed's names and addresses; netns-3 takes the two longest
#   portable modules (the blame drills, the serving drills: about 650 s of waiting together). Both share one kernel log: a real OOM kill in one lane is in the other's window
#   too, and the postmortem gives such a line only to the rank whose container it names
#   (postmortem/kernel_hits.py), so the kernel drills may run beside the OOM drill;
# - builtin-cluster: the built-in simulated cluster (127.0.0.10-17 and its ports), which
#   tests/sim and tests/terminal boot, and which any other module reaches through its
#   inventory or address;
# - engines: the engines tier, after the built-in cluster in the same lane: its imports of the
#   engines' releases evict page cache the built-in cluster's nodes share with this machine;
# - rest: everything else (unit, transport, ansible), in a lane of its own from the start: it is
#   the CPU-bound part, and the other lanes mostly wait.
TIER_GROUPS = {
    "netns": "netns",
    "sim": "builtin-cluster",
    "terminal": "builtin-cluster",
    "engines": "engines",
}
SECOND_TESTBED = frozenset(
    {
        "test_docker_host_netns.py",
        "test_inventory_check_netns.py",
        "test_kernel_netns.py",
        "test_nccl_check_netns.py",
        "test_postmortem_netns.py",
        "test_preflight_netns.py",
        "test_secret_env_netns.py",
        "test_slow_shell_netns.py",
        "test_start_cut_netns.py",
        "test_status_netns.py",
    }
)
THIRD_TESTBED = frozenset({"test_blame_netns.py", "test_serving_watch_netns.py"})
BUILTIN_CLUSTER_WORDS = (b"builtin_simulated_inventory", b"127.0.0.10")
GROUPS = ("netns", "netns-2", "netns-3", "builtin-cluster", "engines", "rest")


def group_of(path: Path) -> str:
    try:
        tier = path.relative_to(TESTS).parts[0]
    except ValueError:
        return "rest"
    if tier == "netns" and path.name in THIRD_TESTBED:
        return "netns-3"
    if tier == "netns" and path.name in SECOND_TESTBED:
        return "netns-2"
    if tier in TIER_GROUPS:
        return TIER_GROUPS[tier]
    try:
        source = path.read_bytes()
    except OSError:
        return "rest"
    return "builtin-cluster" if any(w in source for w in BUILTIN_CLUSTER_WORDS) else "rest"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier-group",
        choices=GROUPS,
        default=None,
        help="run only this group of tests (tests/run_tiers.sh runs them side by side)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = config.getoption("--tier-group")
    if wanted is None:
        return
    groups: dict[Path, str] = {}
    keep, drop = [], []
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if path not in groups:
            groups[path] = group_of(path)
        (keep if groups[path] == wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="module")
def no_ranks_left_behind():
    """After the module: no rank, launcher or controller of this session still runs. Those left
    are killed (so the next module boots on a clean machine) and named in an error."""
    yield
    if left := left_running():
        kill(left)
        pytest.fail(f"{len(left)} processes outlived this module: {describe(left)}")


@pytest.fixture(scope="session")
def twin_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `sim-weights` folder of every built-in-cluster boot of the session. A recipe's twin
    at one scale is 1.3 GB written with fsync; once a session instead of once a test keeps the
    suite's disk use and time down (a CI disk is smaller and slower than ours)."""
    return tmp_path_factory.mktemp("twin-weights")
