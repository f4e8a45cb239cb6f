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

# pytest-xdist sets COLUMNS=80 in its workers, which a run without workers does not: tables
# printed to a captured stdout would be laid out for 80 columns in one and 160 in the other.
# The controller notes whether the person running the suite set COLUMNS; workers inherit that.
_COLUMNS_NOTE = "CLUSTER_TEST_COLUMNS_WERE_SET"
if "PYTEST_XDIST_WORKER" not in os.environ:
    os.environ[_COLUMNS_NOTE] = "1" if "COLUMNS" in os.environ else "0"
elif os.environ.get(_COLUMNS_NOTE) == "0":
    os.environ.pop("COLUMNS", None)

TESTS = Path(__file__).resolve().parent
# `make test` runs the tiers side by side (pytest-xdist, `--dist loadgroup`). What owns something
# machine-wide runs in one worker, one test at a time, as before:
# - the netns testbed (its namespaces, bridge and daemons are one per machine);
# - the built-in simulated cluster (127.0.0.10-17 and its ports), which tests/sim and
#   tests/terminal boot, and which any other module reaches through its inventory or address.
TIER_GROUPS = {"netns": "netns", "sim": "builtin-cluster", "terminal": "builtin-cluster"}
BUILTIN_CLUSTER_WORDS = (b"builtin_simulated_inventory", b"127.0.0.10")


def _group_of(path: Path) -> str | None:
    try:
        tier = path.relative_to(TESTS).parts[0]
    except ValueError:
        return None
    if tier in TIER_GROUPS:
        return TIER_GROUPS[tier]
    try:
        source = path.read_bytes()
    except OSError:
        return None
    return "builtin-cluster" if any(w in source for w in BUILTIN_CLUSTER_WORDS) else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups: dict[Path, str | None] = {}
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if path not in groups:
            groups[path] = _group_of(path)
        if groups[path] is not None:
            item.add_marker(pytest.mark.xdist_group(groups[path]))


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
