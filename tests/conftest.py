"""Session-wide: the marker by which a tier finds the processes its tests left running
(tests/leaks.py). Set before any test starts a process, so every child inherits it."""

from __future__ import annotations

import os
import uuid

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
