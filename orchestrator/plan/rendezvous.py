"""The rendezvous plan (pure): where the ranks meet, and each rank's network environment.

* **The head** is rank 0's node. **The rendezvous address** is the head's `fabric_iface` IPv4
  address as the head itself reports it (`ip -j addr`), never the default route: on a Spark the
  default route may be Wi-Fi (`wlP9s9`), and control traffic pinned to it dies with the Wi-Fi
  (sparkrun PR #219). When the fabric interface's subnet contains the inventory address, that
  address is used (the built-in simulated cluster: every node is 127.0.0.1x on `lo`).
* **The port** is the recipe's `ports.rendezvous`; the head's listening sockets say whether it is
  free (preflight then proves it with a real listener and a connect from every node).
* **Per-rank env** comes from *that node's* facts and inventory entry, never from the head's:
  interface names differ per host when a cable sits in the other CX-7 port, and pushing the head's
  names to the workers breaks them (sparkrun#135). Inventory values (`fabric_iface`, `ib_hca`)
  win over detection.

Per variable (value, then why):

* `NCCL_SOCKET_IFNAME`: the fabric iface. NCCL's bootstrap and socket transport; a wrong name
  fails as `Bootstrap : no socket interface found` (marin#6940), or hangs.
* `GLOO_SOCKET_IFNAME`: the fabric iface. torch's Gloo CPU groups (SGLang's TP CPU group, the
  post-load barrier); unset, Gloo uses the hostname's address: `Gloo connectFullMesh failed`
  (sglang#3226).
* `TP_SOCKET_IFNAME`: the fabric iface. TensorPipe (torch RPC), used by some engine paths.
* `NCCL_IB_HCA`: the ACTIVE RoCE devices behind the fabric iface *and its CX-7 twin*. One PCIe
  Gen5 x4 half carries ~100 Gb/s; both twins give the port's 200.
* `NCCL_IB_GID_INDEX`: the RoCEv2 GID index carrying the node's fabric IPv4. Index 0 is the
  RoCEv1 link-local entry, which cannot cross subnets; 3 is common, 5 is seen.
* `UCX_NET_DEVICES`: `<hca>:1,...`, else the fabric iface. UCX (NIXL, some MPI paths) on the
  devices NCCL uses.
* `OMPI_MCA_btl_tcp_if_include`: the fabric iface. Open MPI's TCP transport, when an image
  uses MPI.
* `VLLM_HOST_IP` (vLLM only): the node's fabric address, the address vLLM workers advertise;
  otherwise the default route's.

No RDMA device (the testbed, a machine without a CX-7): `NCCL_IB_HCA` and `NCCL_IB_GID_INDEX` are
left unset, and the rank's notes say NCCL will use sockets (`NET/Socket`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.models.inventory import Inventory, Node
from orchestrator.models.recipe import Engine, Recipe
from orchestrator.probes.interfaces import Interface, fabric_faults
from orchestrator.probes.node_facts import NodeFacts
from orchestrator.probes.rdma import RdmaDevice, fabric_devices
from orchestrator.probes.sockets import holders

IFACE_VARS = (
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "OMPI_MCA_btl_tcp_if_include",
)
"""Variables whose value is a list of network interface names."""


class RankRendezvous(StrictModel):
    """One rank's place in the rendezvous: its node, fabric address and network env."""

    rank: int
    node: str
    iface: str = Field(description="the fabric interface (inventory fabric_iface)")
    address: str | None = Field(description="this node's fabric IPv4; None when not found")
    prefixlen: int | None = None
    hcas: tuple[str, ...] = Field(default=(), description="NCCL_IB_HCA, in order")
    gid_index: int | None = None
    env: dict[str, str] = Field(description="the per-host variables for this rank's container")
    sources: dict[str, str] = Field(description="variable -> where its value came from")
    notes: tuple[str, ...] = ()

    @property
    def network(self) -> str | None:
        """The fabric subnet, e.g. 192.168.100.0/24."""
        if self.address is None or self.prefixlen is None:
            return None
        return str(ipaddress.ip_interface(f"{self.address}/{self.prefixlen}").network)


class RendezvousPlan(StrictModel):
    """Where every rank meets: the head's fabric address and port, and per-rank env."""

    recipe: str
    engine: Engine
    nnodes: int = Field(description="nodes in the inventory (the recipe must agree)")
    head: str = Field(description="rank 0's node")
    head_iface: str
    head_addr: str | None = Field(description="the head's fabric IPv4: {head_addr}")
    head_port: int = Field(description="ports.rendezvous: {head_port}")
    serve_port: int
    head_port_holders: tuple[str, ...] = Field(
        default=(), description="listeners already on the rendezvous port (addr:port)"
    )
    serve_port_holders: tuple[str, ...] = ()
    ranks: tuple[RankRendezvous, ...]

    @property
    def complete(self) -> bool:
        """Every rank has a fabric address: the launch plan can be made."""
        return self.head_addr is not None and all(r.address for r in self.ranks)

    @property
    def head_port_free(self) -> bool:
        return not self.head_port_holders

    def rank(self, rank: int) -> RankRendezvous:
        return next(r for r in self.ranks if r.rank == rank)


def fabric_address(node: Node, iface: Interface | None) -> tuple[str, int] | None:
    """The node's fabric IPv4 and prefix length: its inventory address when the fabric subnet
    contains it, else the interface's first IPv4 address (the kernel's primary)."""
    if iface is None or not iface.ipv4:
        return None
    cidrs = [ipaddress.ip_interface(c) for c in iface.ipv4]
    try:
        wanted = ipaddress.ip_address(node.address)
    except ValueError:  # a host name, not an address
        wanted = None
    for cidr in cidrs:
        if wanted is not None and wanted in cidr.network:
            return str(wanted), cidr.network.prefixlen
    return str(cidrs[0].ip), cidrs[0].network.prefixlen


def _gid_index(
    devices: Iterable[RdmaDevice], iface: str, address: str | None
) -> tuple[int | None, str]:
    """The RoCEv2 GID index of the device behind `iface` (else the first device that has one)."""
    ordered = sorted(devices, key=lambda d: iface not in d.netdevs)
    for device in ordered:
        index = device.rocev2_gid_index(address)
        if index is not None:
            return index, device.name
    return None, ""


def plan_rank(recipe: Recipe, node: Node, facts: NodeFacts | None) -> RankRendezvous:
    """One rank's env from its own node's facts (inventory values override detection)."""
    iface_name = node.fabric_iface
    iface = facts.interface(iface_name) if facts is not None else None
    found = fabric_address(node, iface)
    address, prefixlen = found if found else (None, None)
    env: dict[str, str] = {}
    sources: dict[str, str] = {}
    notes: list[str] = []
    for var in IFACE_VARS:
        env[var] = iface_name
        sources[var] = "inventory fabric_iface"
    if facts is not None and facts.interfaces is not None:
        # The one interface rule (preflight and `inventory check` judge by it too).
        names = ", ".join(i.name for i in facts.interfaces) or "none"
        notes += [
            f"{fault.what} (it has: {names})"
            if fault.code == "fabric-iface-missing"
            else fault.what
            for fault in fabric_faults(node.name, iface_name, facts.interfaces)
        ]
    rdma = facts.rdma if facts is not None else None
    devices: list[RdmaDevice] = []
    hcas: tuple[str, ...] = ()
    if node.ib_hca:
        hcas = node.ib_hca
        sources["NCCL_IB_HCA"] = "inventory ib_hca"
        if rdma is not None:
            devices = [d for d in rdma.devices if d.name in hcas]
    elif rdma is not None:
        # The fabric port's own device first, then its twin: `rocep1s0f1,roceP2p1s0f1`.
        found_devices = [d for d in fabric_devices(rdma, iface_name) if d.active]
        devices = sorted(found_devices, key=lambda d: iface_name not in d.netdevs)
        hcas = tuple(d.name for d in devices)
        sources["NCCL_IB_HCA"] = f"detected: ACTIVE RoCE devices behind {iface_name} and its twin"
    if rdma is None and facts is not None:
        why = facts.errors.get("rdma", "not probed")
        notes.append(f"RDMA devices unknown ({why}): NCCL_IB_HCA not set")
    gid_index: int | None = None
    if hcas:
        env["NCCL_IB_HCA"] = ",".join(hcas)
        gid_index, source_dev = _gid_index(devices, iface_name, address)
        if gid_index is not None:
            env["NCCL_IB_GID_INDEX"] = str(gid_index)
            sources["NCCL_IB_GID_INDEX"] = f"detected: RoCEv2 GID of {source_dev}" + (
                f" carrying {address}" if address else ""
            )
        else:
            notes.append(
                "no RoCEv2 GID found for "
                + ",".join(hcas)
                + ": NCCL_IB_GID_INDEX not set (NCCL's default index may be RoCEv1)"
            )
        env["UCX_NET_DEVICES"] = ",".join(f"{h}:1" for h in hcas)
        sources["UCX_NET_DEVICES"] = "the NCCL_IB_HCA devices, port 1"
    else:
        env["UCX_NET_DEVICES"] = iface_name
        sources["UCX_NET_DEVICES"] = "inventory fabric_iface (no RDMA device)"
        sources.pop("NCCL_IB_HCA", None)
        if rdma is not None:
            what = (
                "no RDMA device on this node"
                if not rdma.present
                else f"no ACTIVE RDMA device behind {iface_name}"
            )
            notes.append(
                f"{what}: NCCL_IB_HCA and NCCL_IB_GID_INDEX are not set; NCCL will use "
                "sockets (NET/Socket)"
            )
    if recipe.engine is Engine.vllm and address is not None:
        env["VLLM_HOST_IP"] = address
        sources["VLLM_HOST_IP"] = f"this node's {iface_name} address"
    return RankRendezvous(
        rank=node.rank,
        node=node.name,
        iface=iface_name,
        address=address,
        prefixlen=prefixlen,
        hcas=hcas,
        gid_index=gid_index,
        env=env,
        sources=sources,
        notes=tuple(notes),
    )


def _by_name(facts: Mapping[str, NodeFacts] | Iterable[NodeFacts]) -> dict[str, NodeFacts]:
    if isinstance(facts, Mapping):
        return dict(facts)
    return {f.node: f for f in facts}


def plan_rendezvous(
    recipe: Recipe, inventory: Inventory, facts: Mapping[str, NodeFacts] | Iterable[NodeFacts]
) -> RendezvousPlan:
    """The rendezvous of `recipe` on `inventory`, from each node's facts. Pure."""
    by_name = _by_name(facts)
    ranks = tuple(plan_rank(recipe, n, by_name.get(n.name)) for n in inventory.nodes)
    head = inventory.head
    head_rank = ranks[0]
    head_facts = by_name.get(head.name)
    port_holders: tuple[str, ...] = ()
    serve_holders: tuple[str, ...] = ()
    if head_facts is not None and head_facts.listening is not None:
        listening = head_facts.listening
        address = head_rank.address or "0.0.0.0"  # noqa: S104 (matches wildcard listeners only)
        port_holders, serve_holders = (
            tuple(f"{s.address}:{s.port}" for s in holders(listening, address, port))
            for port in (recipe.ports.rendezvous, recipe.ports.serve)
        )
    return RendezvousPlan(
        recipe=recipe.name,
        engine=recipe.engine,
        nnodes=len(inventory.nodes),
        head=head.name,
        head_iface=head.fabric_iface,
        head_addr=head_rank.address,
        head_port=recipe.ports.rendezvous,
        serve_port=recipe.ports.serve,
        head_port_holders=port_holders,
        serve_port_holders=serve_holders,
        ranks=ranks,
    )
