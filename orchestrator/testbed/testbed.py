"""The `Testbed` class: the mixins of this package combined."""

from __future__ import annotations

from .faults import FaultsMixin
from .images import ImagesMixin
from .lifecycle import LifecycleMixin
from .links import LinksMixin


class Testbed(LifecycleMixin, FaultsMixin, LinksMixin, ImagesMixin):
    """A testbed under `root` (default $CLUSTER_TESTBED_DIR or /run/cluster-testbed).

    Construct, then `up(n)`; or construct over an existing root to drive a testbed someone else
    brought up (the prefix and subnets are read back from its state file).
    """

    __test__ = False
