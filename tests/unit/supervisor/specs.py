"""Four ranks on four testbed-addressed nodes, for supervisor tests that need specs but no node."""

from __future__ import annotations

from orchestrator.models.inventory import Node
from orchestrator.runtime.base import RankSpec

SPECS = [
    RankSpec(
        rank=k,
        node=Node(
            name=f"node{k}", address=f"198.18.0.{10 + k}", user="u", rank=k, fabric_iface="eth1"
        ),
        name=f"cluster-R-r{k}",
        argv=("true",),
    )
    for k in range(4)
]
