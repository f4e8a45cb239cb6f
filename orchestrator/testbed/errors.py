"""The testbed's one exception."""

from __future__ import annotations


class TestbedError(RuntimeError):
    """The testbed could not do what was asked; the message says what and where to look."""

    __test__ = False  # not a pytest test class
