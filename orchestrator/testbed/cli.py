"""The command line (`python -m orchestrator.testbed ...`): bring up, tear down, inspect, faults."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Sequence

from .constants import (
    DEFAULT_FAB_SUBNET,
    DEFAULT_MGMT_SUBNET,
    DEFAULT_NODES,
    DEFAULT_PREFIX,
    DEFAULT_ROOT,
    ENV_ROOT,
    NETS,
    TEST_IMAGE,
)
from .errors import TestbedError
from .prerequisites import missing_prerequisites
from .testbed import Testbed


def _print_status(tb: Testbed) -> int:
    rows = tb.status()
    if not rows:
        print(f"no testbed under {tb.root}")
        return 3
    ok = True
    for r in rows:
        parts = [f"{r['node']:<12}", f"netns={'yes' if r['netns'] else 'NO'}"]
        for which in ("sshd", "containerd", "dockerd"):
            d = r[which]
            word = "alive" if d["alive"] else ("stopped" if d["stopped"] else "DEAD")
            ok = ok and d["alive"]
            parts.append(f"{which}={d['pid']}({word})")
        for ifname, a in r["addrs"].items():
            parts.append(f"{ifname}={','.join(a['addrs']) or '-'}/mtu{a['mtu']}/{a['state']}")
        ok = ok and r["netns"]
        print("  ".join(parts))
    st = tb.state()
    print(f"inventory: {tb.inventory}   known_hosts: {tb.known_hosts}   key: {tb.client_key}")
    if st.get("timings"):
        print(f"timings: {st['timings']}")
    return 0 if ok else 1


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m orchestrator.testbed",
        description="A netns testbed of real sshd + dockerd nodes (root only).",
    )
    p.add_argument(
        "--root", default=None, help=f"state folder (default ${ENV_ROOT} or {DEFAULT_ROOT})"
    )
    p.add_argument("--prefix", default=None, help=f"name prefix (default {DEFAULT_PREFIX})")
    p.add_argument(
        "--mgmt-subnet", default=None, help=f"first 3 octets (default {DEFAULT_MGMT_SUBNET})"
    )
    p.add_argument(
        "--fab-subnet", default=None, help=f"first 3 octets (default {DEFAULT_FAB_SUBNET})"
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="bring up N nodes (tears down a previous testbed first)")
    up.add_argument("n", nargs="?", type=int, default=DEFAULT_NODES)
    up.add_argument("--image", action="store_true", help=f"also load {TEST_IMAGE} on every node")
    dn = sub.add_parser("down", help="tear everything down")
    dn.add_argument("--keep-logs", default=None, help="copy node logs to this folder first")
    sub.add_parser("status", help="per node: namespace, daemons, addresses")
    sub.add_parser("heal", help="undo every fault (and the session settings)")
    se = sub.add_parser("session", help="what SSH sessions on the nodes find (print, or change)")
    se.add_argument(
        "--docker-env",
        choices=["on", "off"],
        default=None,
        help="sshd exports DOCKER_HOST (on, the default) or not (off: only the inventory's "
        "docker_host reaches a node's daemon)",
    )
    se.add_argument(
        "--shell-delay", type=float, default=None, help="seconds root's ~/.bashrc sleeps (0: none)"
    )
    sub.add_parser("pids", help="every PID the testbed recorded")
    s = sub.add_parser("ssh", help="ssh to a node with the testbed key and known_hosts")
    s.add_argument("node")
    s.add_argument("command", nargs=argparse.REMAINDER)
    im = sub.add_parser("image", help=f"load the test image ({TEST_IMAGE}) on nodes")
    im.add_argument("nodes", nargs="*")
    fl = sub.add_parser("flags", help="docker run flags for slow reads / memory on a node")
    fl.add_argument("node")
    fl.add_argument("--read-bps", default=None, help="e.g. 10mb")
    fl.add_argument("--memory", default=None, help="e.g. 256m")

    faults = sub.add_parser("fault", help="inject or undo one fault").add_subparsers(
        dest="fault", required=True
    )

    def fault(name: str, hlp: str) -> argparse.ArgumentParser:
        """One fault's parser: every fault acts on one node, named first."""
        x = faults.add_parser(name, help=hlp)
        x.add_argument("node")
        return x

    for name, hlp in (("link-down", "cut a link"), ("link-up", "restore a link")):
        x = fault(name, hlp)
        x.add_argument("net", nargs="?", default="fabric", choices=NETS)
        if name == "link-down":
            x.add_argument("--side", default="node", choices=["node", "bridge"])
    x = fault("shape", "rate-limit a link (tc tbf, both ends)")
    x.add_argument("net", choices=NETS)
    x.add_argument("rate", help="e.g. 100mbit")
    x = fault("unshape", "remove rate limits / netem")
    x.add_argument("net", nargs="?", default=None, choices=NETS)
    x = fault("delay", "netem delay (needs sch_netem)")
    x.add_argument("net", choices=NETS)
    x.add_argument("delay", help="e.g. 50ms")
    x = fault("loss", "random packet loss with nftables")
    x.add_argument("net", choices=NETS)
    x.add_argument("percent", type=int)
    x = fault("port-drop", "drop a port's traffic on a node (nftables)")
    x.add_argument("port", type=int)
    x.add_argument("--proto", default="tcp", choices=["tcp", "udp"])
    fault("nft-clear", "remove port drops and loss on a node")
    for d in ("sshd", "dockerd", "containerd"):
        for verb in ("stop", "start"):
            fault(f"{d}-{verb}", f"{verb} the node's {d}")
    x = fault("docker-wrapper", "lazy-unpack docker wrapper on a node")
    x.add_argument("--failures", type=int, default=1)
    fault("docker-wrapper-remove", "remove the docker wrapper")
    x = fault("listener", "TCP listener that accepts and never speaks")
    x.add_argument("port", type=int)
    fault("listener-stop", "stop a node's silent listeners")
    return p


def _fault(tb: Testbed, a: argparse.Namespace) -> int:
    f = a.fault
    if f == "link-down":
        tb.cut_link(a.node, a.net, side=a.side)
    elif f == "link-up":
        tb.restore_link(a.node, a.net)
    elif f == "shape":
        tb.shape_link(a.node, a.net, a.rate)
    elif f == "unshape":
        tb.clear_shaping(a.node, a.net)
    elif f == "delay":
        tb.delay_link(a.node, a.net, a.delay)
    elif f == "loss":
        tb.drop_packets(a.node, a.net, a.percent)
    elif f == "port-drop":
        tb.drop_port(a.node, a.port, proto=a.proto)
    elif f == "nft-clear":
        tb.clear_nft(a.node)
    elif f.endswith("-stop") and f != "listener-stop":
        pid = tb.stop_daemon(a.node, f.rsplit("-", 1)[0])
        print(f"stopped pid {pid}")
    elif f.endswith("-start"):
        pid = tb.start_daemon(a.node, f.rsplit("-", 1)[0])
        print(f"running as pid {pid}")
    elif f == "docker-wrapper":
        print(tb.install_docker_wrapper(a.node, a.failures))
    elif f == "docker-wrapper-remove":
        tb.remove_docker_wrapper(a.node)
    elif f == "listener":
        print(f"listening, pid {tb.start_silent_listener(a.node, a.port)}")
    elif f == "listener-stop":
        tb.stop_listeners(a.node)
    else:  # pragma: no cover - argparse restricts the choices
        raise TestbedError(f"unknown fault {f}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    a = _build_parser().parse_args(argv)
    problems = missing_prerequisites()
    if problems and a.cmd not in ("status", "pids"):
        print("testbed cannot run here:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    tb = Testbed(a.root, prefix=a.prefix, mgmt_subnet=a.mgmt_subnet, fab_subnet=a.fab_subnet)
    try:
        if a.cmd == "up":
            took = tb.up(a.n)
            print(f"testbed up: {a.n} nodes in {took:.1f} s under {tb.root}")
            if a.image:
                t0 = time.monotonic()
                tb.load_test_image()
                print(f"{TEST_IMAGE} loaded on every node in {time.monotonic() - t0:.1f} s")
            return _print_status(tb)
        if a.cmd == "down":
            took = tb.down(keep_logs=a.keep_logs)
            print(f"testbed down in {took:.1f} s")
            return 0
        if a.cmd == "status":
            return _print_status(tb)
        if a.cmd == "heal":
            fixed = tb.heal()
            print("healed: " + (", ".join(fixed) if fixed else "nothing to fix"))
            return 0
        if a.cmd == "session":
            now = tb.set_session(
                docker_env=None if a.docker_env is None else a.docker_env == "on",
                shell_delay_s=a.shell_delay,
            )
            env = "on" if now.docker_env else "off"
            print(f"session: docker-env {env}, shell delay {now.shell_delay_s:g} s")
            return 0
        if a.cmd == "pids":
            print(" ".join(str(p) for p in tb.recorded_pids()))
            return 0
        if a.cmd == "ssh":
            cmd = list(a.command)
            if cmd and cmd[0] == "--":
                cmd = cmd[1:]
            argv_ = tb.ssh_argv(a.node)
            if cmd:
                argv_ += ["--", shlex.join(cmd) if len(cmd) > 1 else cmd[0]]
            os.execvp(argv_[0], argv_)  # noqa: S606 - `ssh` replaces this process, an argv list
        if a.cmd == "image":
            tb.load_test_image(a.nodes or None)
            print(f"{TEST_IMAGE} on {', '.join(a.nodes) or 'every node'}")
            return 0
        if a.cmd == "flags":
            print(
                shlex.join(tb.docker_run_limit_flags(a.node, read_bps=a.read_bps, memory=a.memory))
            )
            return 0
        if a.cmd == "fault":
            return _fault(tb, a)
    except TestbedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0
