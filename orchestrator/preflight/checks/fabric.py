"""Checks of the fabric: interfaces, subnet, MTU, the head's ports, the real TCP test, RDMA."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from orchestrator.models.inventory import Connection, Node
from orchestrator.preflight.model import Reachability, Severity
from orchestrator.probes.interfaces import fabric_faults
from orchestrator.probes.rdma import RdmaDevice

if TYPE_CHECKING:
    from orchestrator.preflight.checks.context import Judge

# -- the checks, one function each -----------------------------------------------------------


def _check_fabric(j: Judge) -> None:
    for node, f in j.reachable():
        if f.interfaces is None:
            continue
        name = node.fabric_iface
        iface = f.interface(name)
        state = (
            f"{name}: operstate {iface.operstate}, flags {','.join(iface.flags)}"
            if iface is not None
            else ""
        )
        present = ", ".join(i.name for i in f.interfaces)
        evidence = {
            "fabric-iface-missing": f"ip -j addr on {node.name}: {present}",
            "fabric-iface-down": state,
            "fabric-iface-no-address": state + "; no inet address",
        }
        fix = {
            "fabric-iface-missing": f"set fabric_iface for {node.name} in the inventory to its "
            "CX-7 port that is Up (`ibdev2netdev` on the node; e.g. enp1s0f1np1 or its twin "
            "enP2p1s0f1np1): names are per host",
            "fabric-iface-down": f"`sudo ip link set {name} up` on {node.name}; with NO-CARRIER "
            "check the QSFP cable and the switch or peer port",
            "fabric-iface-no-address": f"give {name} a static IPv4 in the fabric subnet "
            "(netplan, like the other nodes)",
        }
        for fault in fabric_faults(node.name, name, f.interfaces):
            j.add(
                fault.code, Severity.error, node, fault.what, evidence[fault.code], fix[fault.code]
            )


def _check_subnet(j: Judge) -> None:
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


def _check_mtu(j: Judge) -> None:
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


def _check_ports(j: Judge) -> None:
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


def _check_tcp(j: Judge, reach: Reachability | None) -> None:
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


def _check_rdma(j: Judge) -> None:
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
