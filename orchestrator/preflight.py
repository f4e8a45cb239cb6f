"""Preflight: refuse a doomed boot in seconds, before any weight is read.

`judge` is pure: facts of every node, the rendezvous plan and the result of the real TCP test in,
every problem out, at once, each with its node, the evidence and the fix. Errors refuse the boot
(`PreflightRefused`, exit 4); warnings are printed and kept in the run directory.
`run_preflight` is thin: gather facts, plan, run the one real test (a temporary listener on the
head's fabric address and rendezvous port, a connect from every node over the fabric), judge,
write the report. `docs/preflight.md` has the table of checks for people.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.errors import ClusterError
from orchestrator.facts import (
    FactsRequest,
    NodeFacts,
    TransportFactory,
    add_peers,
    close_transports,
    gather_facts,
    open_transports,
)
from orchestrator.launch import LaunchPlan, PlanError, plan_launch
from orchestrator.models.inventory import Connection, Inventory, Node
from orchestrator.models.recipe import Recipe
from orchestrator.probes.rdma import RdmaDevice
from orchestrator.probes.tcp import (
    ConnectResult,
    ListenerReport,
    connect_probe,
    listener_argv,
    parse_listener,
)
from orchestrator.rendezvous import RendezvousPlan, plan_rendezvous
from orchestrator.runstore import Run, new_run_id
from orchestrator.transport import ConnectOptions, OutputLine, Transport

GIB = 2**30
Runtime = Literal["docker", "process"]


class Severity(StrEnum):
    error = "error"  # refuses the boot
    warning = "warning"  # printed and kept


class Problem(BaseModel):
    """One thing wrong: which check, where, what, the evidence that shows it, and the fix."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    check: str = Field(description="the check's id, e.g. fabric-mtu")
    severity: Severity
    node: str | None = Field(default=None, description="None: the cluster as a whole")
    rank: int | None = None
    what: str
    evidence: str
    fix: str


@dataclass(frozen=True)
class PreflightLimits:
    """Every bound preflight applies, in one place (named like the recipe's timeouts)."""

    mem_headroom: float = 1.10
    """A rank needs MemAvailable >= expected_bytes_per_rank x this (weights + CUDA context)."""
    min_mem_available: int = 8 * GIB
    """When the recipe gives no expected bytes: at least this much MemAvailable."""
    memfree_floor: int = 8 * GIB
    """Warning below: on a GB10 cudaMemGetInfo reports MemFree (a community guard uses 8 GiB)."""
    container_memory: int = 1 * GIB
    """A running container holding this much or more is an error (seed 001)."""
    image_free: int = 64 * GIB
    """Free on the daemon's data root when the image must still be loaded there (a ~35 GB image
    archive unpacks next to itself)."""
    docker_free_floor: int = 10 * GIB
    """Warning below: the rank's log and the container's writable layer live there."""
    clock_skew_s: float = 2.0
    fabric_mtu: int = 9000
    tcp_timeout_s: float = 3.0
    """One connect to the head's rendezvous port over a LAN: milliseconds when it works."""


class Reachability(BaseModel):
    """The real test: a temporary listener on the head, a connect from every node."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    head: str
    address: str
    port: int
    listener: ListenerReport | None = None
    listener_error: str | None = None
    results: dict[str, ConnectResult] = Field(default_factory=dict, description="node -> result")
    sources: dict[str, str] = Field(default_factory=dict, description="node -> source address")
    errors: dict[str, str] = Field(default_factory=dict, description="node -> why not tested")
    elapsed_s: float = 0.0


class PreflightReport(BaseModel):
    """What `cluster preflight` prints and writes to `preflight.json`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    recipe: str
    inventory: str
    nodes: int
    runtime: Runtime
    checks: tuple[str, ...] = Field(description="the checks that ran")
    problems: tuple[Problem, ...]
    reachability: Reachability | None = None
    elapsed_s: float | None = None

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity is Severity.error]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity is Severity.warning]

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            **self.model_dump(mode="json"),
        }


# ------------------------------------------------------------------------------------------
# The judge (pure)

CHECKS: dict[str, str] = {
    "node-count": "the recipe's node count equals the inventory's",
    "reachable": "every node answers over SSH",
    "probe": "every probe answered",
    "fabric-iface": "the fabric interface exists on every node, is up and has an IPv4 address",
    "fabric-subnet": "every fabric address is in the head's subnet",
    "fabric-mtu": "the fabric MTU is the same on every node (and 9000 on Sparks)",
    "head-port": "the rendezvous and serve ports are free on the head",
    "rendezvous-tcp": "every node opens a TCP connection to the head's rendezvous port over the "
    "fabric (tested for real)",
    "docker": "the Docker daemon answers",
    "image": "the image is on every node, with the recipe's digest and the node's platform",
    "gpu": "a GPU and the NVIDIA runtime where the recipe asks for GPUs",
    "rdma": "RDMA devices named by NCCL_IB_HCA exist and are ACTIVE; /dev/infiniband exists when "
    "the recipe passes it",
    "weights": "the weights directory exists with the same size on every node",
    "memory": "enough free memory for a rank",
    "containers": "no other container holds memory, no rank of an earlier run still runs",
    "disk": "free disk where the image lands",
    "clock": "clocks agree with the controller's",
    "peer-ssh": "nodes can SSH to each other (the image chain needs it)",
}

PROBE_COMMANDS: dict[str, str] = {
    "host": "uname -n -r -m",
    "memory": "cat /proc/meminfo",
    "interfaces": "ip -j addr show",
    "rdma": "grep . /sys/class/infiniband/*/ports/*/state",
    "gpu": "nvidia-smi",
    "docker": "docker info",
    "containers": "docker ps",
    "listening": "cat /proc/net/tcp",
    "image": "docker image inspect IMAGE",
    "weights": "du -s WEIGHTS_DIR",
    "disks": "df -P DOCKER_ROOT",
    "clock": "date +%s.%N",
    "peers": "ssh -o BatchMode=yes PEER true",
}


def gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f} GiB"


@dataclass
class _Judge:
    recipe: Recipe
    inventory: Inventory
    facts: dict[str, NodeFacts]
    plan: RendezvousPlan
    limits: PreflightLimits
    runtime: Runtime
    run_id: str | None
    image_will_be_pushed: bool
    image_ready: Mapping[str, bool] | None
    need_peer_ssh: bool
    problems: list[Problem]
    ran: list[str]

    def add(
        self,
        check: str,
        severity: Severity,
        node: Node | None,
        what: str,
        evidence: str,
        fix: str,
    ) -> None:
        self.problems.append(
            Problem(
                check=check,
                severity=severity,
                node=node.name if node else None,
                rank=node.rank if node else None,
                what=what,
                evidence=evidence,
                fix=fix,
            )
        )

    def reachable(self) -> list[tuple[Node, NodeFacts]]:
        return [
            (n, self.facts[n.name])
            for n in self.inventory.nodes
            if n.name in self.facts and self.facts[n.name].reachable
        ]

    @property
    def docker(self) -> bool:
        return self.runtime == "docker"


def judge(
    recipe: Recipe,
    inventory: Inventory,
    facts: Iterable[NodeFacts],
    rendezvous: RendezvousPlan,
    *,
    reachability: Reachability | None = None,
    limits: PreflightLimits | None = None,
    runtime: Runtime = "docker",
    run_id: str | None = None,
    image_will_be_pushed: bool = False,
    image_ready: Mapping[str, bool] | None = None,
    need_peer_ssh: bool | None = None,
) -> tuple[list[Problem], list[str]]:
    """Every problem of booting `recipe` on `inventory`, and the checks that ran. Pure.

    `runtime`: "docker" (Sparks, the testbed) or "process" (the built-in simulated cluster: no
    image, GPU, container or disk checks). `image_will_be_pushed`: `cluster boot` pushes a
    missing image after preflight, so a missing image is a warning, not an error. `image_ready`:
    the exec-readiness verdict per node, when it was probed. `need_peer_ssh`: whether the image
    chain will run (default: when some node lacks the image and there is more than one node).
    `run_id`: the run being prepared; its own containers are not "other containers".
    """
    by_name = {f.node: f for f in facts}
    if need_peer_ssh is None:
        need_peer_ssh = (
            runtime == "docker"
            and len(inventory.nodes) > 1
            and any(f.image is not None and not f.image.present for f in by_name.values())
        )
    j = _Judge(
        recipe=recipe,
        inventory=inventory,
        facts=by_name,
        plan=rendezvous,
        limits=limits or PreflightLimits(),
        runtime=runtime,
        run_id=run_id,
        image_will_be_pushed=image_will_be_pushed,
        image_ready=image_ready,
        need_peer_ssh=need_peer_ssh,
        problems=[],
        ran=[],
    )
    for name, check in _CHECK_FUNCTIONS:
        if name in _DOCKER_ONLY and not j.docker:
            continue
        j.ran.append(name)
        if name == "rendezvous-tcp":
            _check_tcp(j, reachability)
        else:
            check(j)
    order = {n.name: n.rank for n in inventory.nodes}
    checks = [name for name, _ in _CHECK_FUNCTIONS]
    j.problems.sort(
        key=lambda p: (
            p.node is not None,
            order.get(p.node or "", -1),
            checks.index(_family(p.check)) if _family(p.check) in checks else 99,
        )
    )
    return j.problems, j.ran


def _family(check: str) -> str:
    """`fabric-iface-down` -> `fabric-iface`: the CHECKS entry a problem id belongs to."""
    for name in sorted(CHECKS, key=len, reverse=True):
        if check == name or check.startswith(name + "-"):
            return name
    return check


# -- the checks, one function each -----------------------------------------------------------


def _check_node_count(j: _Judge) -> None:
    n = len(j.inventory.nodes)
    if j.recipe.nodes != n:
        names = ", ".join(node.name for node in j.inventory.nodes)
        j.add(
            "node-count",
            Severity.error,
            None,
            f"the recipe {j.recipe.name} is for {j.recipe.nodes} nodes, the inventory has {n}",
            f"recipe nodes: {j.recipe.nodes}; inventory {j.inventory.path}: {n} hosts ({names})",
            f"use an inventory with {j.recipe.nodes} hosts (ranks 0..{j.recipe.nodes - 1}), or a "
            f"recipe for {n} nodes (its `nodes:` and `tp:`)",
        )


def _check_reachable(j: _Judge) -> None:
    for node in j.inventory.nodes:
        f = j.facts.get(node.name)
        if f is None or f.reachable:
            continue
        why = "; ".join(f.errors.values()) or "no answer"
        j.add(
            "reachable",
            Severity.error,
            node,
            f"{node.name} did not answer over SSH",
            why,
            f"check {node.name}'s management link and sshd (`ssh {node.user}@{node.address} "
            "true`), then `cluster inventory check`",
        )


_CRITICAL_PROBES = {"interfaces", "listening"}
_DOCKER_PROBES = {"docker", "containers", "image", "disks"}


def _check_probes(j: _Judge) -> None:
    for node, f in j.reachable():
        for probe, why in f.errors.items():
            if probe in _DOCKER_PROBES and not j.docker:
                continue
            critical = probe in _CRITICAL_PROBES or (probe in _DOCKER_PROBES and j.docker)
            j.add(
                f"probe-{probe}",
                Severity.error if critical else Severity.warning,
                node,
                f"could not ask {node.name} about {probe}"
                + ("" if critical else " (the checks that need it were skipped)"),
                why,
                f"run `{PROBE_COMMANDS.get(probe, probe)}` on {node.name} by hand and fix what it "
                "says",
            )


def _check_fabric(j: _Judge) -> None:
    for node, f in j.reachable():
        if f.interfaces is None:
            continue
        name = node.fabric_iface
        iface = f.interface(name)
        if iface is None:
            present = ", ".join(i.name for i in f.interfaces)
            j.add(
                "fabric-iface-missing",
                Severity.error,
                node,
                f"fabric interface {name} does not exist on {node.name}: NCCL_SOCKET_IFNAME and "
                f"GLOO_SOCKET_IFNAME would name an interface that is not there",
                f"ip -j addr on {node.name}: {present}",
                f"set fabric_iface for {node.name} in the inventory to its CX-7 port that is Up "
                "(`ibdev2netdev` on the node; e.g. enp1s0f1np1 or its twin enP2p1s0f1np1): names "
                "are per host",
            )
            continue
        state = f"{name}: operstate {iface.operstate}, flags {','.join(iface.flags)}"
        if not iface.usable:
            cause = (
                "administratively down"
                if not iface.admin_up
                else "no carrier (cable out or peer port down)"
                if iface.no_carrier or not iface.lower_up
                else f"state {iface.operstate}"
            )
            j.add(
                "fabric-iface-down",
                Severity.error,
                node,
                f"fabric link {name} on {node.name} is down: {cause}",
                state,
                f"`sudo ip link set {name} up` on {node.name}; with NO-CARRIER check the QSFP "
                "cable and the switch or peer port",
            )
        if not iface.ipv4:
            j.add(
                "fabric-iface-no-address",
                Severity.error,
                node,
                f"fabric interface {name} on {node.name} has no IPv4 address",
                state + "; no inet address",
                f"give {name} a static IPv4 in the fabric subnet (netplan, like the other nodes)",
            )


def _check_subnet(j: _Judge) -> None:
    ranks = [r for r in j.plan.ranks if r.network is not None]
    if len(ranks) < 2:
        return
    head = j.plan.ranks[0]
    reference = head.network or Counter(r.network for r in ranks).most_common(1)[0][0]
    for r in ranks:
        if r.network == reference:
            continue
        node = j.inventory.node(r.node)
        j.add(
            "fabric-subnet",
            Severity.error,
            node,
            f"{r.node}'s fabric address {r.address}/{r.prefixlen} is not in the head's subnet "
            f"{reference}",
            ", ".join(f"{x.node} {x.address}/{x.prefixlen}" for x in ranks),
            f"readdress {r.iface} on {r.node} into {reference} (netplan), or put every node on "
            "one fabric subnet: ranks meet on the head's address with no router in between",
        )


def _check_mtu(j: _Judge) -> None:
    mtus: dict[str, tuple[Node, int]] = {}
    for node, f in j.reachable():
        iface = f.interface(node.fabric_iface) if f.interfaces is not None else None
        if iface is not None:
            mtus[node.name] = (node, iface.mtu)
    if not mtus:
        return
    counts = Counter(m for _, m in mtus.values())
    head = j.inventory.head.name
    top = max(counts.values())
    common = [m for m, c in counts.items() if c == top]
    reference = mtus[head][1] if head in mtus and mtus[head][1] in common else max(common)
    evidence = ", ".join(f"{n} {m}" for n, (_, m) in mtus.items())
    for name, (node, mtu) in mtus.items():
        if mtu != reference:
            j.add(
                "fabric-mtu",
                Severity.error,
                node,
                f"MTU {mtu} on {node.name}'s {node.fabric_iface}, {reference} on the others: "
                "large frames are dropped on the way and NCCL hangs after a clean start",
                f"fabric MTU per node: {evidence}",
                f"`sudo ip link set {node.fabric_iface} mtu {reference}` on {name}, and `mtu: "
                f"{reference}` in its netplan so it survives a reboot",
            )
    loopback = all(node.fabric_iface == "lo" for node, _ in mtus.values())
    if (
        reference < j.limits.fabric_mtu
        and not loopback
        and j.inventory.connection is Connection.ssh
    ):
        j.add(
            "fabric-mtu-low",
            Severity.warning,
            None,
            f"the fabric MTU is {reference}, below {j.limits.fabric_mtu}: RoCE and the socket "
            "transport move less per frame",
            f"fabric MTU per node: {evidence}",
            f"set mtu: {j.limits.fabric_mtu} on the fabric ports of every node (netplan) and the "
            "switch",
        )


def _check_ports(j: _Judge) -> None:
    head = j.inventory.head
    for port, holders, what, key in (
        (j.plan.head_port, j.plan.head_port_holders, "rendezvous", "ports.rendezvous"),
        (j.plan.serve_port, j.plan.serve_port_holders, "serve", "ports.serve"),
    ):
        if not holders:
            continue
        j.add(
            f"head-port-{what}",
            Severity.error,
            head,
            f"the {what} port {port} on the head {head.name} is already taken: rank 0 would fail "
            "to bind it while the other ranks wait",
            f"listening on {head.name}: {', '.join(holders)}",
            f"stop what listens there (`sudo ss -ltnp 'sport = :{port}'` on {head.name} names it; "
            "often a rank of an earlier run: `docker ps --filter label=cluster.run`), or set "
            f"{key} in the recipe to a free port",
        )


def _check_tcp(j: _Judge, reach: Reachability | None) -> None:
    if reach is None:
        return
    head = j.inventory.head
    listener = reach.listener
    bind_error = listener.bind_error if listener else None
    if bind_error and not j.plan.head_port_holders:
        j.add(
            "head-port-rendezvous",
            Severity.error,
            head,
            f"the rendezvous port {reach.port} on the head {head.name} cannot be bound on "
            f"{reach.address}",
            f"test listener on {reach.address}:{reach.port}: bind failed: {bind_error}",
            f"free port {reach.port} on {head.name} (`sudo ss -ltnp 'sport = :{reach.port}'`), or "
            "set ports.rendezvous in the recipe to a free port",
        )
    if listener is None or (not listener.listening and not bind_error):
        j.add(
            "rendezvous-tcp-listener",
            Severity.error,
            head,
            f"the test listener on {head.name} did not start, so reachability is unknown",
            reach.listener_error or "no output from the listener",
            f"check that python3 runs on {head.name} and that {reach.address} is its address",
        )
        return
    failed = []
    for node in j.inventory.nodes:
        if node.name in reach.errors:
            j.add(
                "rendezvous-tcp-untested",
                Severity.error,
                node,
                f"could not test whether {node.name} reaches the head's rendezvous port",
                reach.errors[node.name],
                f"check that python3 runs on {node.name}",
            )
            continue
        result = reach.results.get(node.name)
        if result is None or result.ok:
            continue
        failed.append(node)
        source = reach.sources.get(node.name, "?")
        evidence = (
            f"connect from {source} to {reach.address}:{reach.port}: {result.outcome} after "
            f"{result.elapsed_ms} ms" + (f" ({result.message})" if result.message else "")
        )
        fix = {
            "timeout": f"something drops TCP {reach.port} between {node.name} and the head: a "
            f"firewall (nftables/ufw: allow TCP {reach.port} on {node.fabric_iface}) on either "
            "side, or a dead path (cable, switch port, VLAN)",
            "refused": f"the connection reached {head.name} but nothing accepted it: the test "
            "listener was gone, or a firewall rejects it",
            "unreachable": f"no route from {node.name} to {reach.address} over "
            f"{node.fabric_iface}: check its link and address (see the fabric problems above)",
        }.get(result.outcome, "see the evidence")
        j.add(
            "rendezvous-tcp",
            Severity.error,
            node,
            f"{node.name} cannot open a TCP connection to the head's rendezvous port "
            f"{reach.address}:{reach.port} over the fabric",
            evidence,
            fix,
        )
    others = [n for n in j.inventory.nodes if n.name != head.name and n.name in reach.results]
    if len(others) >= 2 and all(n in failed for n in others):
        j.add(
            "rendezvous-tcp-head",
            Severity.error,
            head,
            f"no node reached the head's rendezvous port: the problem is most likely on "
            f"{head.name}",
            f"{len(failed)} of {len(others)} other nodes failed",
            f"check {head.name}'s firewall for TCP {reach.port} and its fabric link "
            f"{head.fabric_iface}",
        )


def _check_docker(j: _Judge) -> None:
    for node, f in j.reachable():
        if f.docker is not None and not f.docker.reachable:
            j.add(
                "docker",
                Severity.error,
                node,
                f"the Docker daemon on {node.name} does not answer",
                f.docker.error or "docker info: no server",
                f"`sudo systemctl start docker` on {node.name} (and `systemctl status docker` for "
                "why it stopped)",
            )


def _check_image(j: _Judge) -> None:
    ref = j.recipe.image.reference
    want = j.recipe.image.digest
    for node, f in j.reachable():
        image = f.image
        if image is None:
            continue
        if not image.present:
            pushed = j.image_will_be_pushed
            j.add(
                "image-missing",
                Severity.warning if pushed else Severity.error,
                node,
                f"image {ref} is not on {node.name}"
                + (" (it will be pushed before any rank starts)" if pushed else ""),
                f"docker image inspect {ref} on {node.name}: No such image",
                f"`cluster image push {ref} -i {j.inventory.path}` (or `docker load` on "
                f"{node.name})",
            )
            continue
        if want is not None and not _holds_digest(image.id, image.repo_digests, want):
            j.add(
                "image-digest",
                Severity.error,
                node,
                f"{node.name} holds a different {ref} than the recipe's digest",
                f"Id {image.id}, RepoDigests {', '.join(image.repo_digests) or 'none'}; recipe "
                f"digest {want}",
                f"push the recipe's image again: `cluster image push {ref}`",
            )
        node_platform = f.host.platform if f.host else None
        if image.platform and node_platform and image.platform != node_platform:
            j.add(
                "image-platform",
                Severity.error,
                node,
                f"{ref} on {node.name} is {image.platform}, the node is {node_platform}",
                f"image {image.platform}; uname: {f.host.arch if f.host else '?'}",
                f"build or pull the {node_platform} variant (`docker pull --platform "
                f"{node_platform} …`)",
            )
        if j.image_ready is not None and j.image_ready.get(node.name) is False:
            j.add(
                "image-not-ready",
                Severity.error,
                node,
                f"{node.name} holds {ref} but could not run it (exec-readiness probe failed)",
                "the exec-readiness probe's last error is in the run's events",
                f"`cluster image probe {ref}` shows the error; re-push if the image is damaged",
            )


def _holds_digest(image_id: str | None, repo_digests: Sequence[str], digest: str) -> bool:
    """Is this the image `digest` names: its Id (the config digest on overlay2) or one of its
    repo digests (`repo@sha256:...`)?"""
    return image_id == digest or any(d.endswith("@" + digest) for d in repo_digests)


def _needs_gpu(recipe: Recipe) -> tuple[bool, bool]:
    """(asks for GPUs, names the nvidia runtime explicitly)."""
    runtime = any(
        x.partition("=")[2] == "nvidia" for x in recipe.docker.extra if x.startswith("--runtime")
    )
    return recipe.docker.gpus is not None, runtime


def _check_gpu(j: _Judge) -> None:
    gpus, runtime = _needs_gpu(j.recipe)
    if not (gpus or runtime):
        return
    for node, f in j.reachable():
        if gpus and f.gpu is not None and not f.gpu.present:
            j.add(
                "gpu-missing",
                Severity.error,
                node,
                f"the recipe runs with --gpus {j.recipe.docker.gpus} but {node.name} shows no GPU",
                f.gpu.reason or "nvidia-smi found no GPU",
                f"check `nvidia-smi` on {node.name} (driver loaded? reboot after a driver update)",
            )
        if f.docker is not None and f.docker.reachable and not f.docker.nvidia_runtime:
            j.add(
                "gpu-runtime",
                Severity.error if runtime else Severity.warning,
                node,
                f"the Docker daemon on {node.name} has no nvidia runtime"
                + ("" if runtime else ": --gpus needs the NVIDIA Container Toolkit"),
                f"docker info runtimes: {', '.join(f.docker.runtimes) or 'none'}",
                "install the NVIDIA Container Toolkit, then `sudo nvidia-ctk runtime configure "
                "--runtime=docker && sudo systemctl restart docker`",
            )


def _check_rdma(j: _Judge) -> None:
    wants_dev = any(
        x.partition("=")[2].startswith("/dev/infiniband")
        for x in j.recipe.docker.extra
        if x.startswith("--device")
    )
    for node, f in j.reachable():
        rdma = f.rdma
        if rdma is None:
            continue
        if wants_dev and j.docker and not rdma.dev_infiniband:
            j.add(
                "rdma-dev",
                Severity.error,
                node,
                f"the recipe passes --device=/dev/infiniband but {node.name} has no "
                "/dev/infiniband: docker run would fail",
                f"RDMA devices on {node.name}: "
                + (", ".join(d.name for d in rdma.devices) or "none"),
                f"load the RDMA drivers on {node.name} (mlx5_ib; `ibdev2netdev` lists the ports), "
                "or drop --device=/dev/infiniband from the recipe (NCCL then uses sockets)",
            )
        rank = j.plan.rank(node.rank)
        for hca in rank.hcas:
            device = rdma.device(hca)
            if device is None or not device.active:
                j.add(
                    "rdma-hca",
                    Severity.error,
                    node,
                    f"NCCL_IB_HCA names {hca}, which is not an ACTIVE RDMA device on {node.name}",
                    f"{hca}: {_port_state(device)}; all: "
                    + (", ".join(f"{d.name} {_port_state(d)}" for d in rdma.devices) or "none"),
                    f"fix ib_hca for {node.name} in the inventory (`ibdev2netdev` shows which "
                    "ports are Up), or remove it to detect the devices behind fabric_iface",
                )
        if rdma.present and not rank.hcas and not node.ib_hca:
            j.add(
                "rdma-inactive",
                Severity.warning,
                node,
                f"{node.name} has RDMA devices but none ACTIVE behind {node.fabric_iface}: NCCL "
                "will use sockets (NET/Socket), far slower than RoCE",
                ", ".join(
                    f"{d.name}->{','.join(d.netdevs) or '?'} {_port_state(d)}" for d in rdma.devices
                ),
                f"check the cable of {node.fabric_iface} (`ibdev2netdev`), or set ib_hca",
            )


def _port_state(device: RdmaDevice | None) -> str:
    if device is None:
        return "absent"
    port = device.port(1)
    return (port.state or "?") if port is not None else "no port 1"


def _check_weights(j: _Judge) -> None:
    path = j.recipe.model.host_dir
    if path is None:
        return
    seen: dict[str, tuple[Node, int | None, int | None]] = {}
    for node, f in j.reachable():
        w = f.weights
        if w is None:
            continue
        if not w.exists or not w.is_dir:
            j.add(
                "weights-missing",
                Severity.error,
                node,
                f"the weights directory {path} "
                + ("does not exist" if not w.exists else "is not a directory")
                + f" on {node.name}",
                f"{path} on {node.name}: " + ("missing" if not w.exists else "not a directory"),
                f"copy or mount the weights at {path} on {node.name}: every node reads its own "
                "copy (or the same NFS export)",
            )
            continue
        seen[node.name] = (node, w.files, w.bytes)
    if len(seen) < 2:
        return
    counts = Counter((files, size) for _, files, size in seen.values())
    (ref_files, ref_bytes), _ = counts.most_common(1)[0]
    for name, (node, files, size) in seen.items():
        if (files, size) != (ref_files, ref_bytes):
            j.add(
                "weights-size",
                Severity.error,
                node,
                f"{node.name} holds a different {path}: {files} files, {size} bytes; most nodes "
                f"hold {ref_files} files, {ref_bytes} bytes",
                ", ".join(f"{n} {fl} files {sz} B" for n, (_, fl, sz) in seen.items()),
                f"re-sync {path} on {name} from a node with the full copy (`rsync -a --checksum`), "
                "or fix its mount",
            )


def _check_memory(j: _Judge) -> None:
    per_rank = j.recipe.model.expected_bytes_per_rank
    need = int(per_rank * j.limits.mem_headroom) if per_rank else j.limits.min_mem_available
    basis = (
        f"the rank reads {gib(per_rank)} of weights (x{j.limits.mem_headroom:g})"
        if per_rank
        else f"the floor of {gib(j.limits.min_mem_available)}"
    )
    for node, f in j.reachable():
        m = f.memory
        if m is None:
            continue
        evidence = (
            f"MemTotal {gib(m.mem_total)}, MemAvailable {gib(m.mem_available)}, MemFree "
            f"{gib(m.mem_free)}, Cached {gib(m.cached)}"
        )
        if m.mem_available < need:
            j.add(
                "memory-low",
                Severity.error,
                node,
                f"too little memory on {node.name}: MemAvailable {gib(m.mem_available)}, a rank "
                f"needs about {gib(need)} ({basis})",
                evidence,
                f"stop what holds memory on {node.name} (other containers, an earlier run: see "
                "the container problems) and run preflight again",
            )
        elif m.mem_free < j.limits.memfree_floor:
            j.add(
                "memory-free-low",
                Severity.warning,
                node,
                f"MemFree on {node.name} is {gib(m.mem_free)}, under {gib(j.limits.memfree_floor)}:"
                " on a GB10 the GPU's free memory is MemFree, and page cache counts as used",
                evidence,
                "usually harmless before a load (the kernel reclaims cache); if the engine "
                "refuses at startup for free memory, stop other memory users. Never drop caches "
                "mid-load (seed 002 boot 4: a 40 min load became 3.5 h)",
            )


def _check_containers(j: _Judge) -> None:
    for node, f in j.reachable():
        for c in f.containers or ():
            if c.cluster_run is not None and c.cluster_run != j.run_id:
                j.add(
                    "containers-earlier-run",
                    Severity.error,
                    node,
                    f"container {c.name} of run {c.cluster_run} still runs on {node.name} "
                    f"(rank {c.labels.get('cluster.rank', '?')}, {gib(c.memory_bytes)})",
                    f"{c.name} {c.image} {c.status}",
                    f"`cluster stop {c.cluster_run}`, or `docker rm -f {c.name}` on {node.name}",
                )
            elif (
                c.cluster_run is None
                and c.memory_bytes is not None
                and c.memory_bytes >= j.limits.container_memory
            ):
                j.add(
                    "containers-memory",
                    Severity.error,
                    node,
                    f"container {c.name} holds {gib(c.memory_bytes)} on {node.name}: on a GB10 "
                    "that memory is the GPU's too",
                    f"{c.name} ({c.image}) {c.status}, {gib(c.memory_bytes)}",
                    f"`docker stop {c.name}` on {node.name} if it can go (seed 001: another model "
                    "had to be stopped first)",
                )


def _check_disk(j: _Judge) -> None:
    for node, f in j.reachable():
        root = f.docker.root_dir if f.docker is not None else None
        usage = f.disk(root) if root else None
        if usage is None or usage.available_bytes is None:
            continue
        missing = f.image is not None and not f.image.present
        evidence = (
            f"{root} on {usage.filesystem} ({usage.mount}): {gib(usage.available_bytes)} free of "
            f"{gib(usage.total_bytes)}"
        )
        if missing and usage.available_bytes < j.limits.image_free:
            j.add(
                "disk-image",
                Severity.error,
                node,
                f"{node.name} must still load the image but has {gib(usage.available_bytes)} free "
                f"on the Docker data root (needs {gib(j.limits.image_free)})",
                evidence,
                f"free space on {node.name}: `docker image prune`, `docker system df` shows what "
                "is held",
            )
        elif usage.available_bytes < j.limits.docker_free_floor:
            j.add(
                "disk-low",
                Severity.warning,
                node,
                f"only {gib(usage.available_bytes)} free on {node.name}'s Docker data root: the "
                "rank's log and writable layer live there",
                evidence,
                f"free space on {node.name} (`docker system df`)",
            )


def _check_clock(j: _Judge) -> None:
    bound = j.limits.clock_skew_s
    for node, f in j.reachable():
        c = f.clock
        if c is None:
            continue
        if abs(c.offset_s) - c.uncertainty_s > bound:
            j.add(
                "clock",
                Severity.warning,
                node,
                f"{node.name}'s clock is {c.offset_s:+.2f} s off the controller's (bound "
                f"{bound:g} s): merged logs and barrier timings would lie",
                f"offset {c.offset_s:+.3f} s ± {c.uncertainty_s:.3f} s",
                f"enable time sync on {node.name}: `sudo timedatectl set-ntp true` (chrony or "
                "systemd-timesyncd)",
            )


def _check_peers(j: _Judge) -> None:
    severity = Severity.error if j.need_peer_ssh else Severity.warning
    for node, f in j.reachable():
        bad = [p for p in f.peers or () if not p.ok]
        if not bad:
            continue
        j.add(
            "peer-ssh",
            severity,
            node,
            f"{node.name} cannot SSH to {len(bad)} peer(s)"
            + (": the image chain needs it" if j.need_peer_ssh else ""),
            "; ".join(f"{p.target}: exit {p.exit_status} {p.message}".strip() for p in bad),
            f"from {node.name}: `ssh-copy-id` each peer and accept its host key once (or run "
            "ansible/ prepare, which distributes keys and known_hosts)",
        )


_CHECK_FUNCTIONS: tuple[tuple[str, Callable[[_Judge], None]], ...] = (
    ("node-count", _check_node_count),
    ("reachable", _check_reachable),
    ("probe", _check_probes),
    ("fabric-iface", _check_fabric),
    ("fabric-subnet", _check_subnet),
    ("fabric-mtu", _check_mtu),
    ("head-port", _check_ports),
    ("rendezvous-tcp", lambda j: None),  # needs the reachability result: see judge()
    ("docker", _check_docker),
    ("image", _check_image),
    ("gpu", _check_gpu),
    ("rdma", _check_rdma),
    ("weights", _check_weights),
    ("memory", _check_memory),
    ("containers", _check_containers),
    ("disk", _check_disk),
    ("clock", _check_clock),
    ("peer-ssh", _check_peers),
)
_DOCKER_ONLY = {"docker", "image", "gpu", "containers", "disk", "peer-ssh"}


# ------------------------------------------------------------------------------------------
# The one real test (thin)


@dataclass
class _Listener:
    """The head's test listener as it runs: its lines so far, and how its stream ended."""

    lines: list[str]
    ready: asyncio.Event
    error: ClusterError | None = None
    stopped: bool = False  # we killed it on purpose: its exit status is not an error

    async def follow(self, stream: AsyncIterator[OutputLine]) -> None:
        try:
            async for line in stream:
                self.lines.append(line.text)
                if line.text.startswith(("listening", "bind-failed")):
                    self.ready.set()
        except ClusterError as exc:
            if not self.stopped:
                self.error = exc
        finally:
            self.ready.set()

    def report(self) -> ListenerReport:
        try:
            return parse_listener("\n".join(self.lines))
        except ClusterError as exc:
            self.error = self.error or exc
            return ListenerReport(listening=False)


async def probe_reachability(
    inventory: Inventory,
    transports: Mapping[str, Transport],
    plan: RendezvousPlan,
    *,
    timeout_s: float = 3.0,
) -> Reachability | None:
    """Listen on the head's fabric address and rendezvous port; connect from every node with a
    fabric address, bound to that address; stop the listener. None when the head has no
    fabric address (the fabric checks say why)."""
    if plan.head_addr is None:
        return None
    started = time.monotonic()
    head = inventory.head
    head_addr = plan.head_addr
    sources = {r.node: r.address for r in plan.ranks if r.address is not None}
    argv = listener_argv(head_addr, plan.head_port, len(sources), timeout_s * 2 + 10)
    listener = _Listener(lines=[], ready=asyncio.Event())
    task = asyncio.create_task(listener.follow(transports[head.name].stream(argv)))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(listener.ready.wait(), 15)
    results: dict[str, ConnectResult] = {}
    errors: dict[str, str] = {}
    first = listener.report()
    if first.listening or first.bind_error:

        async def connect(node: Node) -> None:
            probe = connect_probe(sources[node.name], head_addr, plan.head_port, timeout_s)
            try:
                result = await transports[node.name].run(probe.argv, timeout_s=timeout_s + 15)
                results[node.name] = probe.read(result)
            except ClusterError as exc:
                errors[node.name] = exc.line()

        await asyncio.gather(*(connect(n) for n in inventory.nodes if n.name in sources))
        if first.pid is not None and not task.done():
            # Every connect has answered: stop the listener now rather than at its time limit
            # (closing the SSH channel would not), so the port is free again at once.
            listener.stopped = True
            with contextlib.suppress(ClusterError):
                await transports[head.name].run(["kill", str(first.pid)], timeout_s=10)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(task), 3)
    if not task.done():
        listener.stopped = True
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return Reachability(
        head=head.name,
        address=head_addr,
        port=plan.head_port,
        listener=listener.report(),
        listener_error=listener.error.line() if listener.error else None,
        results=results,
        sources=sources,
        errors=errors,
        elapsed_s=round(time.monotonic() - started, 3),
    )


class PreflightResult(BaseModel):
    """Everything preflight learned: the report, the facts and both plans."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    report: PreflightReport
    facts: tuple[NodeFacts, ...]
    rendezvous: RendezvousPlan
    launch: LaunchPlan | None = None
    launch_error: str | None = None


def runtime_of(inventory: Inventory) -> Runtime:
    return "process" if inventory.connection is Connection.local else "docker"


async def run_preflight(
    recipe: Recipe,
    inventory: Inventory,
    options: ConnectOptions | None = None,
    *,
    run: Run | None = None,
    factory: TransportFactory | None = None,
    limits: PreflightLimits | None = None,
    image_will_be_pushed: bool = False,
    image_ready: Mapping[str, bool] | None = None,
    peers: bool | None = None,
) -> PreflightResult:
    """Gather facts, plan, test the rendezvous port for real, judge; write the run directory.

    `peers`: ask whether nodes can SSH to each other; None (default) asks only when the image
    chain will run (some node lacks the image). Never raises for what it finds (the report
    carries it); the caller refuses on errors."""
    limits = limits or PreflightLimits()
    started = time.monotonic()
    runtime = runtime_of(inventory)
    docker = runtime == "docker"
    request = FactsRequest(
        image=recipe.image.reference if docker else None,
        weights_dir=recipe.model.host_dir,
        docker=docker,
    )
    transports = open_transports(inventory, options or ConnectOptions(), factory)
    try:
        facts = await gather_facts(inventory, transports, request)
        missing_image = any(f.image is not None and not f.image.present for f in facts)
        if peers or (peers is None and docker and missing_image and len(inventory.nodes) > 1):
            facts = await add_peers(inventory, transports, facts)
        plan = plan_rendezvous(recipe, inventory, facts)
        head_facts = facts[0] if facts else None
        reach = None
        if head_facts is not None and head_facts.reachable:
            reach = await probe_reachability(
                inventory, transports, plan, timeout_s=limits.tcp_timeout_s
            )
    finally:
        await close_transports(transports)
    run_id = run.id if run is not None else new_run_id()
    launch: LaunchPlan | None = None
    launch_error: str | None = None
    try:
        launch = plan_launch(recipe, inventory, plan, run_id)
    except PlanError as exc:
        launch_error = str(exc)
    problems, ran = judge(
        recipe,
        inventory,
        facts,
        plan,
        reachability=reach,
        limits=limits,
        runtime=runtime,
        run_id=run.id if run is not None else None,
        image_will_be_pushed=image_will_be_pushed,
        image_ready=image_ready,
    )
    report = PreflightReport(
        recipe=recipe.name,
        inventory=str(inventory.path),
        nodes=len(inventory.nodes),
        runtime=runtime,
        checks=tuple(ran),
        problems=tuple(problems),
        reachability=reach,
        elapsed_s=round(time.monotonic() - started, 3),
    )
    result = PreflightResult(
        report=report, facts=facts, rendezvous=plan, launch=launch, launch_error=launch_error
    )
    if run is not None:
        write_preflight(run, result)
    return result


def write_preflight(run: Run, result: PreflightResult) -> None:
    """`preflight.json` (the report), `facts.json` and both plans under `plans/`, one event."""
    run.write_json("preflight.json", result.report.to_json())
    run.write_json("facts.json", [f.model_dump(mode="json") for f in result.facts])
    run.write_json("plans/rendezvous.json", result.rendezvous.model_dump(mode="json"))
    if result.launch is not None:
        run.write_json("plans/launch.json", result.launch.model_dump(mode="json"))
    report = result.report
    run.append_event(
        {
            "kind": "preflight",
            "ok": report.ok,
            "errors": len(report.errors),
            "warnings": len(report.warnings),
            "problems": [f"{p.severity}: {p.node or 'cluster'}: {p.what}" for p in report.problems],
        }
    )
