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
