"""Benchmark: `cluster image push` on the 8-node testbed, links shaped to 100 Mbit/s, in one run.

    sudo flock /run/cluster-testbed.lock .venv/bin/python bench/image_push.py [--mb 300] [--repeat 1]

Brings up the testbed with a ninth node whose dockerd plays the controller's docker (reached on
its unix socket, as DOCKER_HOST; its link is not on the path), builds a ~300 MB image of REAL
content (this machine's shared libraries as one layer, plus busybox), shapes every node's
management link (the one the chain uses) to 100 Mbit/s, and measures:

1. against what the peers do per node: T(push to 8) / T(docker save | ssh | docker load to 1),
   the baseline being sparkrun's and eugr's per-host pipeline (uncompressed);
2. the chain's own scaling: T(push to 8) / T(push to 1), same tool, same wire format;
3. a re-push when all 8 hold the image (target: under 3 s).

T(push) is the whole `cluster image push` command, process start to exit, including probing
every node, the hop check, verification and the exec-readiness probe; the transfer round
alone is printed beside it, and so are the CPU seconds per command during the push to 8: the
testbed's 9 nodes share 2 cores, and 8 simultaneous `docker load`s are CPU work a real Spark
does on its own 20 cores. The same figures at a second, slower rate (`--slow-rate`, default
25 Mbit/s; ~4 more minutes), where the link and not the shared CPU is the bottleneck, show the
chain's own scaling. Prints the figures; exits non-zero only when a push fails.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.netns.testbed import REAL_DOCKER, Testbed  # noqa: E402

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


def push(inventory: Path, ctl_host: str) -> tuple[float, dict[str, Any]]:
    argv = [sys.executable, "-m", "orchestrator.cli", "image", "push", TAG, "-i", str(inventory)]
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=300, help="image content in MiB")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument(
        "--slow-rate",
        default="25mbit",
        help="a second link rate at which the 2 shared cores are not the bottleneck ('none')",
    )
    args = ap.parse_args()
    tb = Testbed()
    tb.up(9)
    work = Path(tempfile.mkdtemp(prefix="bench-image-"))
    try:
        ctl = tb.node(8)
        rootfs = work / "rootfs"
        content = build_rootfs(rootfs, args.mb)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(
            [REAL_DOCKER, "-H", ctl.docker_host, "import", "-c", 'CMD ["/bin/sh"]', "-", TAG],
            stdin=tar.stdout,
            check=True,
            capture_output=True,
            timeout=600,
        )
        tar.wait()
        shutil.rmtree(rootfs)
        size = int(tb.docker(8, "image", "inspect", "-f", "{{.Size}}", TAG).stdout)
        names = [tb.node(k).name for k in range(8)]
        inv8 = sub_inventory(tb.inventory, work / "inventory-8.yaml", names)
        inv1 = sub_inventory(tb.inventory, work / "inventory-1.yaml", names[:1])
        print(
            f"image {TAG}: {size / 1e6:.0f} MB ({content / 2**20:.0f} MiB of shared libraries), "
            f"{os.cpu_count()} cores shared by all 9 nodes"
        )
        rates = [RATE] + ([args.slow_rate] if args.slow_rate != "none" else [])
        results = [measure(tb, rate, inv1, inv8, args.repeat) for rate in rates]
        again = []
        for k in range(9):
            tb.shape_link(k, "mgmt", RATE)
        for _ in range(3):
            t, rep = push(inv8, ctl.docker_host)
            assert {n["action"] for n in rep["nodes"]} == {"skipped"}
            again.append(t)
    finally:
        tb.down()
        shutil.rmtree(work, ignore_errors=True)
    for res in results:
        show(res)
    print(
        f"T(re-push, all 8 hold it, {RATE}): {statistics.median(again):.2f} s "
        f"(runs: {', '.join(f'{x:.2f}' for x in again)})"
    )
    main_res = results[0]
    print(f"== figures ({RATE}, one run) ==")
    print(
        f"1. push to 8 / peers' save|ssh|load to 1: {main_res['p8'] / main_res['b']:.2f}x "
        f"(target <= 1.0x; transfer round alone {main_res['r8'] / main_res['b']:.2f}x)"
    )
    print(
        f"2. push to 8 / push to 1: {main_res['p8'] / main_res['p1']:.2f}x (target <= 1.3x; "
        f"transfer rounds {main_res['r8'] / main_res['r1']:.2f}x)"
    )
    print(f"3. re-push when all 8 hold it: {statistics.median(again):.2f} s (target < 3 s)")


def measure(tb: Testbed, rate: str, inv1: Path, inv8: Path, repeat: int) -> dict[str, Any]:
    """Baseline, push to 1 and push to 8 with every management link shaped to `rate`."""
    ctl = tb.node(8)
    for k in range(9):
        tb.shape_link(k, "mgmt", rate)
    base, t8, t1, rounds8, rounds1 = [], [], [], [], []
    report8: dict[str, Any] = {}
    cpu = CpuByCommand()
    for _ in range(repeat):
        remove_image(tb, [0])
        base.append(baseline(tb, ctl.docker_host))
        remove_image(tb, [0])
        t, report1 = push(inv1, ctl.docker_host)
        t1.append(t)
        rounds1.append(report1["rounds"][0]["seconds"])
        remove_image(tb, list(range(8)))
        cpu = CpuByCommand()
        with cpu:
            t, report8 = push(inv8, ctl.docker_host)
        t8.append(t)
        rounds8.append(report8["rounds"][0]["seconds"])
        assert all(n["action"] == "loaded" and n["verified"] for n in report8["nodes"])
    return {
        "rate": rate,
        "b": statistics.median(base),
        "p8": statistics.median(t8),
        "p1": statistics.median(t1),
        "r8": statistics.median(rounds8),
        "r1": statistics.median(rounds1),
        "report8": report8,
        "cpu": cpu.top(),
    }


def show(res: dict[str, Any]) -> None:
    report8 = res["report8"]
    rnd = report8["rounds"][0]
    wire, raw = rnd["wire_bytes"] or 0, rnd["raw_bytes"] or 0
    b, p1, p8, r1, r8 = res["b"], res["p1"], res["p8"], res["r1"], res["r8"]
    print(f"-- links {res['rate']} --")
    print(
        f"wire: {report8['compression']} ({report8['compression_reason']}); "
        f"{raw / 1e6:.0f} MB raw -> {wire / 1e6:.0f} MB on the wire ({raw / max(wire, 1):.2f}x)"
    )
    print(f"mode: {report8['mode']} ({report8['mode_reason']})")
    print(f"T(docker save | ssh | docker load, 1 node): {b:.1f} s")
    print(f"T(push to 1): {p1:.1f} s (transfer round {r1:.1f} s)")
    print(f"T(push to 8): {p8:.1f} s (transfer round {r8:.1f} s)")
    busy = ", ".join(f"{name} {sec:.1f}" for name, sec in res["cpu"])
    print(f"CPU seconds during the push to 8: {busy}")
    print(
        f"push to 8 / save|ssh|load to 1: {p8 / b:.2f}x (round {r8 / b:.2f}x); "
        f"push to 8 / push to 1: {p8 / p1:.2f}x (rounds {r8 / r1:.2f}x)"
    )


if __name__ == "__main__":
    main()
