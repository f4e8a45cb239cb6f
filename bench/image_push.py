"""Benchmark (issue 30): `cluster image push` by layer on the 8-node testbed, in one run.

    flock /tmp/netns.lock .venv/bin/python bench/image_push.py [--mb 300] [--rate 25mbit]

Brings up the testbed with a ninth node whose dockerd plays the controller's docker (reached on
its unix socket, as DOCKER_HOST; its link is not on the path), builds there a ~300 MB image of
REAL content (this machine's shared libraries, plus busybox) as two layers: a base with 90% of
the bytes and a top layer with 10% (`ctb/bench:1`), and a second tag `ctb/bench:2` that shares
the base and has another 10% top layer. Every node's management link (the one the chain uses) is
shaped to 25 Mbit/s, and it measures:

(a) T(push ctb/bench:1 to 8) / T(docker save | ssh | docker load to 1 node), the baseline being
    sparkrun's and eugr's per-host pipeline (uncompressed): target <= 0.5x;
(b) T(push ctb/bench:2 to 8 nodes holding ctb/bench:1) / the same baseline: target <= 0.2x, and
    the bytes each node received against the new layer compressed alone (zstd -1 and -9);
(c) a re-push when all 8 hold it: target < 2 s;
(d) nodes 4-7 moved to Debian trixie's Docker 26 with the containerd image store (unpacked
    under /opt/docker-trixie by .ci/system-deps.sh; the others stay on 20.10 with overlay2),
    each given the same image by a `docker load` of its own: a push of it to all 8 sends
    nothing (no round; the bytes into each node's link are the probes' alone), and its time.
    Without that engine (d) says it was NOT measured, and why.

T(push) is the whole `cluster image push` command, process start to exit, including probing
every node, the hop check, verification and the exec-readiness probe. Where the time of (a)
goes: `docker save` alone (the read), the push's phases (probed, planned, hops checked with the
source opened, the round, verified, ready), each node's first and last byte received and its
load's end (the chain's head start, the per-hop latency, the import after the last byte), the
wire bytes over the link rate, and CPU seconds per command (9 nodes share 2 cores). Prints the
figures; exits non-zero only when a push fails. About 6 minutes.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.images.model import ZSTD_WIRE_LEVEL  # noqa: E402
from orchestrator.testbed import REAL_DOCKER, Testbed  # noqa: E402
from orchestrator.testbed.dockerd import TRIXIE_ENGINE, engine_binaries  # noqa: E402

TAG = "ctb/bench:1"
RATE = "100mbit"


def build_rootfs(root: Path, mb: int) -> int:
    """busybox + shared libraries of this machine, up to `mb` MiB: real, compressible bytes."""
    (root / "bin").mkdir(parents=True)
    (root / "lib" / "real").mkdir(parents=True)
    busybox = shutil.which("busybox") or "/bin/busybox"
    shutil.copy2(busybox, root / "bin" / "busybox")
    for applet in ("sh", "true", "cat", "ls"):
        (root / "bin" / applet).symlink_to("busybox")
    total, limit = 0, mb << 20
    for lib in sorted(glob.glob("/usr/lib/*-linux-gnu/**/*.so*", recursive=True)):
        p = Path(lib)
        if p.is_symlink() or not p.is_file():
            continue
        size = p.stat().st_size
        if total + size > limit:
            continue
        shutil.copyfile(p, root / "lib" / "real" / f"{total:012d}-{p.name}")
        total += size
        if total > limit - (1 << 20):
            break
    return total


def sub_inventory(full: Path, out: Path, names: list[str]) -> Path:
    import yaml

    data = yaml.safe_load(full.read_text())
    hosts = data["all"]["children"]["sparks"]["hosts"]
    data["all"]["children"]["sparks"]["hosts"] = {n: hosts[n] for n in names}
    for i, n in enumerate(names):
        data["all"]["children"]["sparks"]["hosts"][n]["rank"] = i
    data["all"]["vars"]["cluster_known_hosts"] = str(full.parent / "known_hosts")
    out.write_text(yaml.safe_dump(data))
    return out


def remove_image(tb: Testbed, nodes: list[int]) -> None:
    def rmi(k: int) -> None:
        tb.docker(k, "rmi", "-f", TAG, check=False, timeout=300)

    threads = [threading.Thread(target=rmi, args=(k,)) for k in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    subprocess.run(["sync"], check=False)


class CpuByCommand:
    """CPU seconds per command name of every process alive during a window (sampled from
    /proc twice a second): where a CPU-bound push spends the machine."""

    def __init__(self) -> None:
        self.base = self._snapshot()
        self.seen: dict[int, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _snapshot() -> dict[int, tuple[str, int]]:
        out = {}
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == os.getpid():
                continue
            try:
                st = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            comm = st[st.index("(") + 1 : st.rindex(")")]
            f = st[st.rindex(")") + 2 :].split()
            out[int(d)] = (comm, int(f[11]) + int(f[12]))
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            self.seen.update(self._snapshot())
            time.sleep(0.5)

    def __enter__(self) -> CpuByCommand:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def top(self, n: int = 8) -> list[tuple[str, float]]:
        tick = os.sysconf("SC_CLK_TCK")
        agg: dict[str, float] = {}
        for pid, (comm, t) in self.seen.items():
            name = comm.split("/")[0]
            before = self.base.get(pid, (comm, 0))[1]
            agg[name] = agg.get(name, 0.0) + (t - before) / tick
        return sorted(agg.items(), key=lambda kv: -kv[1])[:n]


def push(inventory: Path, ctl_host: str, tag: str = TAG) -> tuple[float, dict[str, Any]]:
    argv = [sys.executable, "-m", "orchestrator.cli", "image", "push", tag, "-i", str(inventory)]
    started = time.monotonic()
    proc = subprocess.run(
        [*argv, "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
        env={**os.environ, "DOCKER_HOST": ctl_host},
    )
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"push failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return elapsed, json.loads(proc.stdout)


def baseline(tb: Testbed, ctl_host: str) -> float:
    """`docker save IMG | ssh node0 docker load`, as sparkrun and eugr's scripts do per host."""
    started = time.monotonic()
    save = subprocess.Popen([REAL_DOCKER, "-H", ctl_host, "save", TAG], stdout=subprocess.PIPE)
    load = subprocess.run(
        [*tb.ssh_argv(0), "--", "docker load"],
        stdin=save.stdout,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert save.stdout is not None
    save.stdout.close()
    if save.wait() != 0 or load.returncode != 0:
        raise SystemExit(f"baseline failed: {load.stderr.strip()[-500:]}")
    return time.monotonic() - started


TAG2 = "ctb/bench:2"
BASE = "ctb/bench-base:1"


def build_layered(tb: Testbed, work: Path, mb: int) -> dict[str, Any]:
    """On the controller's docker: BASE (90% of the bytes), TAG = BASE + its own layer (10%),
    TAG2 = BASE + another layer (10%, other content). Returns the sizes that matter."""
    ctl = tb.node(8)
    rootfs = work / "rootfs"
    content = build_rootfs(rootfs, mb)
    real = rootfs / "lib" / "real"
    files = sorted(real.iterdir())
    tops = [work / "top1" / "x", work / "top2" / "x"]
    for t in tops:
        t.mkdir(parents=True)
    # Move ~10% of an image's bytes into each top layer: largest files first, each into the
    # emptier top while it fits, so both tops end close to the share and alike.
    moved, want = [0, 0], content // 11  # top / (content - the other top) = 10%
    for f in sorted(files, key=lambda p: p.stat().st_size, reverse=True):
        size = f.stat().st_size
        k = 0 if moved[0] <= moved[1] else 1
        if moved[k] + size > want:
            continue
        moved[k] += size
        shutil.move(str(f), tops[k] / f.name)
    docker = [REAL_DOCKER, "-H", ctl.docker_host]
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(
        [*docker, "import", "-c", 'CMD ["/bin/sh"]', "-", BASE],
        stdin=tar.stdout,
        check=True,
        capture_output=True,
        timeout=600,
    )
    tar.wait()
    for tag, top in ((TAG, tops[0]), (TAG2, tops[1])):
        (top.parent / "Dockerfile").write_text(f"FROM {BASE}\nCOPY x /{tag[-1]}\n")
        subprocess.run(
            [*docker, "build", "-q", "-t", tag, str(top.parent)],
            check=True,
            capture_output=True,
            timeout=600,
            env={**os.environ, "DOCKER_BUILDKIT": "0"},
        )
    shutil.rmtree(rootfs)
    # TAG2's own layer as docker save writes it, and its size compressed alone.
    started = time.monotonic()
    save = subprocess.run([*docker, "save", TAG2], check=True, capture_output=True, timeout=600)
    save_s = time.monotonic() - started
    with tarfile.open(fileobj=io.BytesIO(save.stdout)) as archive:
        manifest = archive.extractfile("manifest.json")
        assert manifest is not None
        layers = json.load(manifest)[0]["Layers"]
        member = archive.extractfile(layers[-1])
        assert member is not None
        layer = member.read()
    z = {
        lvl: len(
            subprocess.run(
                ["zstd", lvl, "-T0", "-q", "-c"], input=layer, check=True, capture_output=True
            ).stdout
        )
        for lvl in ("-1", f"-{ZSTD_WIRE_LEVEL}", "-9")
    }
    return {
        "content": content,
        "image_bytes": len(save.stdout),
        "save_s": save_s,
        "layer_raw": len(layer),
        "layer_z1": z["-1"],
        "layer_zw": z[f"-{ZSTD_WIRE_LEVEL}"],
        "layer_z9": z["-9"],
        "top_share": len(layer) / len(save.stdout),
    }


def _tx_to(tb: Testbed, k: int) -> int:
    """Bytes the host side of node k's management link has sent into the node."""
    host_veth, _ = tb.node(k).iface_pair("mgmt")
    return int(Path(f"/sys/class/net/{host_veth}/statistics/tx_bytes").read_text())


def measure_two_stores(tb: Testbed, inv8: Path, ctl_host: str, work: Path) -> dict[str, Any]:
    """(d): nodes 4-7 on Docker 26's containerd image store, 0-3 on 20.10's overlay2, all
    holding TAG2 (the containerd nodes by a `docker load` of their own); then a push."""
    missing = [str(b) for b in engine_binaries(TRIXIE_ENGINE) if not os.access(b, os.X_OK)]
    if missing:
        return {"skipped": f"no second engine here ({', '.join(missing)} missing)"}
    cs = (4, 5, 6, 7)
    for k in cs:
        tb.switch_engine(k, TRIXIE_ENGINE, {"features": {"containerd-snapshotter": True}})
    archive = work / "tag2.tar"
    subprocess.run([REAL_DOCKER, "-H", ctl_host, "save", "-o", str(archive), TAG2], check=True)
    for k in cs:
        tb.docker(k, "load", "-q", "-i", str(archive), timeout=600)
    archive.unlink()
    info = {
        k: tb.docker(
            k, "info", "-f", "{{.ServerVersion}} {{.Driver}} {{json .DriverStatus}}"
        ).stdout.strip()
        for k in (0, cs[0])
    }
    ids = {
        k: tb.docker(k, "image", "inspect", "-f", "{{.Id}}", TAG2).stdout.strip() for k in (0, 4)
    }
    before = {k: _tx_to(tb, k) for k in range(8)}
    t, rep = push(inv8, ctl_host, TAG2)
    into = {k: _tx_to(tb, k) - before[k] for k in range(8)}
    return {
        "seconds": t,
        "rounds": len(rep["rounds"]),
        "actions": sorted({n["action"] for n in rep["nodes"]}),
        "stores": sorted({str(n["store"]) for n in rep["nodes"]}),
        "into_link_max": max(into.values()),
        "info": info,
        "ids": ids,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=300, help="image content in MiB")
    ap.add_argument("--rate", default="25mbit", help="every management link's rate")
    args = ap.parse_args()
    tb = Testbed()
    tb.up(9)
    work = Path(tempfile.mkdtemp(prefix="bench-image-"))
    try:
        ctl = tb.node(8)
        sizes = build_layered(tb, work, args.mb)
        names = [tb.node(k).name for k in range(8)]
        inv8 = sub_inventory(tb.inventory, work / "inventory-8.yaml", names)
        print(
            f"{TAG}: {sizes['image_bytes'] / 1e6:.0f} MB as docker save writes it; {TAG2} shares"
            f" all but its last layer ({sizes['layer_raw'] / 1e6:.1f} MB raw, "
            f"{sizes['top_share']:.1%} of the bytes; zstd alone -1 {sizes['layer_z1'] / 1e6:.2f}"
            f" MB, -9 {sizes['layer_z9'] / 1e6:.2f} MB); {os.cpu_count()} cores shared by 9 "
            f"nodes; docker save alone (read) {sizes['save_s']:.1f} s"
        )
        for k in range(9):
            tb.shape_link(k, "mgmt", args.rate)
        # (a) the peers' way to one node, then the whole image to eight.
        remove_image(tb, [0])
        t_base = baseline(tb, ctl.docker_host)
        remove_image(tb, list(range(8)))
        cpu = CpuByCommand()
        with cpu:
            t_a, rep_a = push(inv8, ctl.docker_host, TAG)
        assert all(n["action"] == "loaded" and n["verified"] for n in rep_a["nodes"])
        # (b) the second tag to eight nodes that hold the first.
        t_b, rep_b = push(inv8, ctl.docker_host, TAG2)
        assert all(n["action"] == "loaded" and n["verified"] for n in rep_b["nodes"])
        # (c) again, when all hold it.
        again = [push(inv8, ctl.docker_host, TAG2)[0] for _ in range(3)]
        two_stores = measure_two_stores(tb, inv8, ctl.docker_host, work)
    finally:
        tb.down()
        shutil.rmtree(work, ignore_errors=True)
    rate_bps = float(args.rate.removesuffix("mbit")) * 1e6 / 8
    rnd_a = rep_a["rounds"][0]
    loads = sorted(n["seconds"] for n in rep_a["nodes"] if n["seconds"] is not None)
    ready = [n["probe"]["seconds"] for n in rep_a["nodes"] if n.get("probe")]
    print(f"-- links {args.rate}, one run --")
    print(f"T(docker save | ssh | docker load, 1 node): {t_base:.1f} s")
    print(
        f"T(push {TAG} to 8): {t_a:.1f} s: round {rnd_a['seconds']:.1f} s, "
        f"{rnd_a['raw_bytes'] / 1e6:.0f} MB raw -> {rnd_a['wire_bytes'] / 1e6:.0f} MB on the "
        f"wire ({rnd_a['raw_bytes'] / rnd_a['wire_bytes']:.2f}x; that many bytes alone take "
        f"{rnd_a['wire_bytes'] / rate_bps:.1f} s at {args.rate}); loads done at "
        f"{loads[0]:.1f}-{loads[-1]:.1f} s; exec-ready probes {min(ready):.1f}-{max(ready):.1f} s"
    )
    ph = rep_a.get("phases", {})
    by_rank = sorted(rep_a["nodes"], key=lambda n: n["rank"])
    first_b = [n.get("first_byte_s") for n in by_rank]
    last_b = [n.get("last_byte_s") for n in by_rank]
    tails = [
        n["seconds"] - n["last_byte_s"]
        for n in by_rank
        if n.get("last_byte_s") is not None and n["seconds"] is not None
    ]
    if ph:
        print(
            "where (a)'s time goes (s from the push's start; bytes seen to ~1 s): probed "
            f"{ph.get('probed', 0):.1f}, planned {ph.get('planned', 0):.1f}, hops checked and "
            f"source open {ph.get('hops_checked_1', 0):.1f}, round 1 ended "
            f"{ph.get('round_1', 0):.1f}, verified and exec-ready (side by side) "
            f"{ph.get('verified_1', 0):.1f}, exit {t_a:.1f} (process start and teardown: "
            f"{t_a - rep_a['seconds']:.1f})"
        )
    if None not in first_b and None not in last_b:
        hop = (first_b[-1] - first_b[0]) / max(1, len(first_b) - 1)
        print(
            f"  first byte: node 0 at {first_b[0]:.1f}, node 7 at {first_b[-1]:.1f} (head start "
            f"{first_b[-1] - first_b[0]:.1f} s, {hop:.2f} s per hop); last byte: node 0 at "
            f"{last_b[0]:.1f}, node 7 at {last_b[-1]:.1f}; wire alone at the link rate "
            f"{rnd_a['wire_bytes'] / rate_bps:.1f} s; import after the last byte (load end - "
            f"last byte) {min(tails):.1f}-{max(tails):.1f} s, node 7 {tails[-1]:.1f} s"
        )
    busy = ", ".join(f"{name} {sec:.1f}" for name, sec in cpu.top())
    print(f"CPU seconds during the push to 8: {busy}")
    rnd_b = rep_b["rounds"][0]
    per_node = [n["received_bytes"] for n in rep_b["nodes"]]
    print(
        f"T(push {TAG2} to 8 holding {TAG}): {t_b:.1f} s ({rep_b['layer_plan']}; round "
        f"{rnd_b['seconds']:.1f} s, {rnd_b['raw_bytes'] / 1e6:.1f} MB raw, "
        f"{rnd_b['wire_bytes'] / 1e6:.2f} MB on the wire)"
    )
    loads_b = sorted(n["seconds"] for n in rep_b["nodes"] if n["seconds"] is not None)
    ready_b = [n["probe"]["seconds"] for n in rep_b["nodes"] if n.get("probe")]
    print(
        f"  loads done at {loads_b[0]:.1f}-{loads_b[-1]:.1f} s after its start; exec-ready "
        f"probes {min(ready_b):.1f}-{max(ready_b):.1f} s; load average "
        f"{os.getloadavg()[0]:.1f} at the end (the VM is shared)"
    )
    print(f"re-push {TAG2}, all 8 hold it: " + ", ".join(f"{x:.2f} s" for x in again))
    lo, hi, wl = sizes["layer_z9"], sizes["layer_z1"], sizes["layer_zw"]
    worst = max(per_node)
    print("== figures (issue 30) ==")
    print(f"(a) push to 8 / save|ssh|load to 1: {t_a / t_base:.2f}x (target <= 0.5x)")
    print(f"(b) new tag to 8 / (a)'s one copy: {t_b / t_base:.2f}x (target <= 0.2x)")
    print(
        f"    wire bytes per node {min(per_node) / 1e6:.2f}-{worst / 1e6:.2f} MB vs the layer "
        f"alone compressed at the wire's level -{ZSTD_WIRE_LEVEL} {wl / 1e6:.2f} MB: "
        f"{worst / wl:.3f}x (target: within 5%); -1 {hi / 1e6:.2f} MB, -9 {lo / 1e6:.2f} MB"
    )
    print(f"(c) re-push when all hold it: {statistics.median(again):.2f} s (target < 2 s)")
    if "skipped" in two_stores:
        print(f"(d) two storage drivers: NOT measured: {two_stores['skipped']}")
    else:
        d = two_stores
        print(
            f"(d) two storage drivers, all 8 hold {TAG2} (ids: overlay2 {d['ids'][0][:19]}, "
            f"containerd store {d['ids'][4][:19]}): push {d['seconds']:.2f} s, {d['rounds']} "
            f"rounds, actions {d['actions']}, stores {d['stores']}, at most "
            f"{d['into_link_max'] / 1e3:.0f} kB into any node's link (the probes) (target: "
            "nothing sent)"
        )
        print(f"    engines: node0 {d['info'][0]}; node4 {d['info'][4]}")


if __name__ == "__main__":
    main()
