"""A real cluster on one machine: N "nodes" as network namespaces, each with its own OpenSSH sshd,
containerd and dockerd, joined by a management bridge and an MTU-9000 fabric bridge.

Library (used by tests/netns/conftest.py) and CLI for a person, run as root::

    .venv/bin/python -m orchestrator.testbed up [N]       # default 8 nodes
    .venv/bin/python -m orchestrator.testbed status
    .venv/bin/python -m orchestrator.testbed ssh node3 -- docker ps
    .venv/bin/python -m orchestrator.testbed fault sshd-stop node3
    .venv/bin/python -m orchestrator.testbed heal
    .venv/bin/python -m orchestrator.testbed down

Everything lives under one root folder (default ``/run/cluster-testbed``, or
``$CLUSTER_TESTBED_DIR``) and every kernel object it creates is named with a prefix (default
``ctb``), so ``down`` finds it again: by the PIDs recorded in ``<root>/state.json`` first, then by
name. Addresses come only from 198.18.0.0/15. Processes are only ever signalled by recorded PID
(checked against the recorded start time, so a reused PID is never hit) or, for the final sweep,
because they live inside one of the testbed's own network namespaces or cgroups. No shell ever
sees an interpolated string: every command is an argv list; the few shell snippets are constant
strings that take their values as "$1"...

See docs/testbed.md for the person-facing guide.

Modules: constants, errors, prerequisites, processes (spawn/terminate by recorded PID), probes,
node (`Node`), core (`TestbedCore`: paths, nodes, state file), then the `Testbed` mixins network,
sshd, dockerd, images, daemons, teardown, lifecycle (up, status), links and faults (incl. heal),
combined in testbed (`Testbed`); cli (`main`) and __main__.
"""

from __future__ import annotations

from .cli import main
from .constants import (
    ALLOWED_NET,
    DAEMON_ENV,
    DEFAULT_FAB_SUBNET,
    DEFAULT_MGMT_SUBNET,
    DEFAULT_NODES,
    DEFAULT_PREFIX,
    DEFAULT_ROOT,
    ENV_ROOT,
    FAB_IFACES,
    FAB_MTU,
    LAZY_UNPACK_ERROR,
    MAX_NODES,
    MGMT_IFACE,
    NETS,
    NFT_TABLE,
    NODE_PATH_TAIL,
    NODE_VIEWS,
    REAL_DOCKER,
    SSHD,
    TEST_IMAGE,
)
from .errors import TestbedError
from .node import Node
from .prerequisites import REQUIRED_TOOLS, default_root, missing_prerequisites
from .probes import tcp_probe
from .processes import pid_alive, terminate
from .testbed import Testbed

__all__ = [
    "ALLOWED_NET",
    "DAEMON_ENV",
    "DEFAULT_FAB_SUBNET",
    "DEFAULT_MGMT_SUBNET",
    "DEFAULT_NODES",
    "DEFAULT_PREFIX",
    "DEFAULT_ROOT",
    "ENV_ROOT",
    "FAB_IFACES",
    "FAB_MTU",
    "LAZY_UNPACK_ERROR",
    "MAX_NODES",
    "MGMT_IFACE",
    "NETS",
    "NFT_TABLE",
    "NODE_PATH_TAIL",
    "NODE_VIEWS",
    "REAL_DOCKER",
    "REQUIRED_TOOLS",
    "SSHD",
    "TEST_IMAGE",
    "Node",
    "Testbed",
    "TestbedError",
    "default_root",
    "main",
    "missing_prerequisites",
    "pid_alive",
    "tcp_probe",
    "terminate",
]
