"""`cluster image push | probe` against eight real sshd + dockerd nodes (issue 5's acceptance).

The image is MB-sized on purpose (busybox plus ~8 MB of this machine's shared libraries: real
bytes, so zstd behaves as it does on a real image); the large-image figures come from
`bench/image_push.py`. The controller's own docker is a one-node second testbed (prefix `cti`):
its dockerd is reached through its unix socket as DOCKER_HOST, as a controller's local daemon.
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.images import chain_script
from orchestrator.testbed import REAL_DOCKER, Testbed
from orchestrator.testbed.dockerd import TRIXIE_ENGINE, engine_binaries

pytestmark = pytest.mark.netns
CLUSTER = [sys.executable, "-m", "orchestrator.cli"]
TAG = "ctb/push:1"
EXTRA_BYTES = 8 << 20


@dataclass(frozen=True)
class PushImage:
    tag: str
    archive: Path
    controller_docker_host: str


def _rootfs(root: Path) -> None:
    """busybox with its applets, plus real shared libraries (compressible like a real image)."""
    for d in ("bin", "etc", "tmp", "lib/extra"):
        (root / d).mkdir(parents=True, exist_ok=True)
    busybox = shutil.which("busybox") or "/bin/busybox"
    shutil.copy2(busybox, root / "bin" / "busybox")
    for applet in ("sh", "true", "cat", "ls"):
        (root / "bin" / applet).symlink_to("busybox")
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    total = 0
    for lib in sorted(glob.glob("/usr/lib/*-linux-gnu/*.so*")):
        p = Path(lib)
        if total >= EXTRA_BYTES:
            break
        if p.is_symlink() or not p.is_file() or p.stat().st_size > 1 << 20:
            continue
        shutil.copyfile(p, root / "lib" / "extra" / p.name)
        total += p.stat().st_size


@pytest.fixture(scope="module")
def push_image(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PushImage]:
    """The test image in a second, one-node testbed's dockerd (the controller's docker) and as
    a `docker save` archive; torn down after the module."""
    ctl = Testbed(
        Path(f"{testbed.root}-img"), prefix="cti", mgmt_subnet="198.18.4", fab_subnet="198.18.5"
    )
    work = tmp_path_factory.mktemp("image")
    try:
        ctl.up(1)
        rootfs = work / "rootfs"
        _rootfs(rootfs)
        tar = subprocess.Popen(
            ["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE
        )
        docker = [REAL_DOCKER, "-H", ctl.node(0).docker_host]
        subprocess.run(
            [*docker, "import", "-c", 'CMD ["/bin/sh"]', "-", TAG],
            stdin=tar.stdout,
            check=True,
            capture_output=True,
            timeout=120,
        )
        assert tar.wait(timeout=60) == 0
        archive = work / "push.tar"
        ctl.docker(0, "save", "-o", str(archive), TAG)
        yield PushImage(TAG, archive, ctl.node(0).docker_host)
    finally:
        ctl.down()


def remove_everywhere(tb: Testbed, nodes: list[int] | None = None) -> None:
    def rmi(k: int) -> None:
        tb.docker(k, "rmi", "-f", TAG, check=False)

    threads = [threading.Thread(target=rmi, args=(k,)) for k in nodes or range(len(tb.nodes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)


def cluster(
    *args: str, env: dict[str, str] | None = None, timeout: float = 240
) -> tuple[int, str, str, float]:
    started = time.monotonic()
    proc = subprocess.run(
        [*CLUSTER, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started


def rows(report: dict) -> dict[str, dict]:
    return {n["node"]: n for n in report["nodes"]}


def test_a_push_from_the_controllers_docker_reaches_all_eight_verified_and_ready_and_a_repush_skips_them(
    clean_testbed, push_image
):
    tb = clean_testbed
    remove_everywhere(tb)
    env = {"DOCKER_HOST": push_image.controller_docker_host}
    code, out, err, _ = cluster("image", "push", TAG, "-i", str(tb.inventory), "--json", env=env)
    assert code == 0, err
    report = json.loads(out)
    assert report["source"] == "the controller's docker"
    assert report["mode"] == "chain", report["mode_reason"]
    assert report["compression"] == "zstd"
    assert len(report["rounds"]) == 1
    by = rows(report)
    assert len(by) == 8
    for node in tb.nodes:
        row = by[node.name]
        assert row["action"] == "loaded" and row["verified"] is True, row
        assert row["probe"]["ready"] and row["probe"]["tries"] == 1, row
        assert row["sends"] == 1
    ids = {tb.docker(k, "image", "inspect", "-f", "{{.Id}}", TAG).stdout.strip() for k in range(8)}
    assert len(ids) == 1

    code, out, err, elapsed = cluster(
        "image", "push", TAG, "-i", str(tb.inventory), "--json", env=env
    )
    assert code == 0, err
    again = json.loads(out)
    assert {n["action"] for n in again["nodes"]} == {"skipped"}
    assert again["rounds"] == [] and again["mode"] is None
    assert all(n["probe"] is None for n in again["nodes"])
    assert elapsed < 20  # loosely: the figure comes from bench/image_push.py

    code, out, err, _ = cluster(
        "image", "push", TAG, "-i", str(tb.inventory), "--probe-all", "--json", env=env
    )
    assert code == 0, err
    assert all(n["action"] == "skipped" and n["probe"]["ready"] for n in json.loads(out)["nodes"])

    code, out, err, _ = cluster("image", "probe", TAG, "-i", str(tb.inventory), "--json")
    assert code == 0, err
    assert all(n["present"] and n["ready"]["ready"] for n in json.loads(out)["nodes"])


def test_a_push_from_a_node_that_holds_the_image_reaches_the_other_seven(clean_testbed, push_image):
    tb = clean_testbed
    remove_everywhere(tb, list(range(1, 8)))
    tb.docker(0, "load", "-q", "-i", str(push_image.archive))
    code, out, err, _ = cluster(
        "image", "push", TAG, "-i", str(tb.inventory), "--from-node", "ctb-node0", "--json"
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["mode"] == "chain"
    assert report["rounds"][0]["source"] == "node ctb-node0"
    by = rows(report)
    assert by["ctb-node0"]["action"] == "skipped" and by["ctb-node0"]["note"] == "the source"
    for k in range(1, 8):
        row = by[f"ctb-node{k}"]
        assert row["action"] == "loaded" and row["verified"], row
        assert row["probe"]["ready"]


def test_three_nodes_with_the_lazy_unpack_race_end_ready_and_show_their_retries(
    clean_testbed, push_image
):
    tb = clean_testbed
    remove_everywhere(tb)
    lazy = (1, 3, 5)
    for k in lazy:
        tb.install_docker_wrapper(k, failures=2)
    code, out, err, _ = cluster(
        "image", "push", TAG, "-i", str(tb.inventory), "--from-tar", str(push_image.archive)
    )
    assert code == 0, err
    table = {line.split("│")[2].strip(): line for line in out.splitlines() if "ctb-node" in line}
    for k in range(8):
        line = table[f"ctb-node{k}"]
        assert "loaded" in line and "yes" in line, line
        if k in lazy:
            assert "ready (3 tries" in line, line
            assert tb.docker_wrapper_stats(k)["failed"] == 2
        else:
            assert "ready (1 try" in line, line


def test_a_lazy_unpack_window_longer_than_the_probe_budget_fails_naming_those_nodes(
    clean_testbed, push_image
):
    tb = clean_testbed
    lazy = (2, 4, 6)
    remove_everywhere(tb, list(lazy))
    for k in lazy:
        tb.install_docker_wrapper(k, failures=1000)
    code, out, err, _ = cluster(
        "image",
        "push",
        TAG,
        "-i",
        str(tb.inventory),
        "--from-tar",
        str(push_image.archive),
        "--ready-timeout",
        "4",
        "--json",
    )
    assert code == 5, err
    by = rows(json.loads(out))
    for k in range(8):
        row = by[f"ctb-node{k}"]
        if k in lazy:
            assert row["action"] == "loaded" and row["verified"]
            assert not row["probe"]["ready"] and row["probe"]["gave_up"] == "window"
            assert row["probe"]["tries"] >= 2
            assert "stat /bin/sh: no such file or directory" in row["probe"]["last_error"]
        else:
            assert row["action"] == "skipped"
    assert "3 of 8 nodes cannot run" in err
    for k in lazy:
        assert f"ctb-node{k}" in err


def _stop_what_node4_still_runs(tb: Testbed, before: set[Path]) -> None:
    """Node 4 was cut off while its part of the chain ran; once its link is back, the chain
    script's own `cleanup` mode stops that process group and removes its work folder."""
    tb.restore_link(4)
    script = chain_script()
    for work in set(Path("/tmp").glob("cluster-image.*.ctb-node4")) - before:
        tag = work.name.removeprefix("cluster-image.").removesuffix(".ctb-node4")
        tb.ssh(4, ["sh", "-c", script, "cluster-image", script, "cleanup", tag, "ctb-node4"])
        assert not work.exists()


def _rx_bytes(tb: Testbed, k: int) -> int:
    host_veth, _ = tb.node(k).iface_pair("mgmt")
    return int(Path(f"/sys/class/net/{host_veth}/statistics/tx_bytes").read_text())


# -- by layer (issue 30) ------------------------------------------------------------------------

OLD, NEW = "ctb/layers:1", "ctb/layers:2"


@dataclass(frozen=True)
class Layered:
    """Two tags on the controller's docker sharing the push image's layer; each adds its own."""

    old_archive: Path
    new_id: str  # the config digest (Id on Docker 20.10's overlay2)
    new_layer_bytes: int  # the uncompressed size of NEW's own layer (its layer.tar)
    docker: list[str]


def _libs(dest: Path, skip: int, limit: int) -> None:
    dest.mkdir(parents=True)
    total = 0
    for lib in sorted(glob.glob("/usr/lib/*-linux-gnu/*.so*"))[skip:]:
        p = Path(lib)
        if p.is_symlink() or not p.is_file() or p.stat().st_size > 1 << 20:
            continue
        shutil.copyfile(p, dest / p.name)
        total += p.stat().st_size
        if total >= limit:
            return


@pytest.fixture(scope="module")
def layered(push_image: PushImage, tmp_path_factory: pytest.TempPathFactory) -> Layered:
    work = tmp_path_factory.mktemp("layers")
    docker = [REAL_DOCKER, "-H", push_image.controller_docker_host]
    for tag, skip in ((OLD, 300), (NEW, 600)):
        ctx = work / tag.replace("/", "_").replace(":", "_")
        _libs(ctx / "x", skip, 6 << 20)
        (ctx / "Dockerfile").write_text(f"FROM {TAG}\nCOPY x /{tag[-1]}\n")
        subprocess.run(
            [*docker, "build", "-q", "-t", tag, str(ctx)],
            check=True,
            capture_output=True,
            timeout=120,
            env={**os.environ, "DOCKER_BUILDKIT": "0"},
        )
    old_archive = work / "old.tar"
    subprocess.run([*docker, "save", "-o", str(old_archive), OLD], check=True, timeout=120)
    new_archive = work / "new.tar"
    subprocess.run([*docker, "save", "-o", str(new_archive), NEW], check=True, timeout=120)
    inspect = [*docker, "image", "inspect", "-f", "{{.Id}}", NEW]
    new_id = subprocess.run(inspect, check=True, capture_output=True, text=True).stdout.strip()
    with tarfile.open(new_archive) as tar:
        layers = json.load(tar.extractfile("manifest.json"))[0]["Layers"]  # type: ignore[arg-type]
        new_layer_bytes = tar.getmember(layers[-1]).size
    return Layered(old_archive, new_id, new_layer_bytes, docker)


def _hold_old_tag_only(tb: Testbed, layered: Layered) -> None:
    """Every node holds OLD (so the base layer), nothing else of ours."""

    def one(k: int) -> None:
        tb.docker(k, "rmi", "-f", NEW, OLD, TAG, check=False)
        tb.docker(k, "load", "-q", "-i", str(layered.old_archive))

    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(tb.nodes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)


# On `docker load` (once), first remove OLD: the base layer the plan saw there is gone, as after
# a prune between the plan and the load, so the partial archive cannot be loaded.


def test_a_new_tag_sends_only_its_new_layer_and_a_node_that_cannot_load_it_gets_the_whole_image(
    clean_testbed, push_image, layered
):
    tb = clean_testbed
    _hold_old_tag_only(tb, layered)
    mark = shlex.quote(str(tb.node(2).faults_dir / "pruned"))
    prune = (
        f'if [ ! -e {mark} ]; then : >{mark}; "$REAL" rmi -f {shlex.quote(OLD)} >/dev/null 2>&1; fi'
    )
    wrapper = tb.hook_docker(2, "load", prune)
    env = {"DOCKER_HOST": push_image.controller_docker_host}
    inv = str(tb.inventory)
    code, out, err, _ = cluster("image", "status", NEW, "-i", inv, "--json", env=env)
    assert code == 0, err
    status = json.loads(out)
    assert status["layers"] == 2
    for n in status["nodes"]:
        assert not n["present"] and n["layers_missing"] == 1 and n["partial"], n
        assert n["driver"] == "overlay2" and n["store"] == "graphdriver"
        assert 0 < n["bytes_missing"] <= layered.new_layer_bytes
    code, out, err, _ = cluster("image", "push", NEW, "-i", inv, "--json", env=env)
    assert code == 0, err
    report = json.loads(out)
    assert report["layer_plan"] == "1 of 2 layers: the rest is on every target already"
    first, second = report["rounds"]
    assert first["layers_sent"] == 1 and first["layers_dropped"] == 1
    assert first["raw_bytes"] < layered.new_layer_bytes + (256 << 10)  # the base stayed home
    by = rows(report)
    for k in range(8):
        row = by[f"ctb-node{k}"]
        assert row["action"] == "loaded" and row["verified"] and row["probe"]["ready"], row
        assert row["layers_missing"] == 1 and row["partial"] is True
        assert row["config_digest"] == row["image_id"] == layered.new_id
        assert row["sends"] == (2 if k == 2 else 1), row
    # ctb-node2 lost the base between the plan and its load: the whole image, in a round of its own.
    assert second["targets"] == ["ctb-node2"] and second["layers_sent"] is None
    assert second["raw_bytes"] > layered.new_layer_bytes + (1 << 20)
    ids = {tb.docker(k, "image", "inspect", "-f", "{{.Id}}", NEW).stdout.strip() for k in range(8)}
    assert ids == {layered.new_id}
    wrapper.unlink()

    # A node missing only NEW's own layer gets only that.
    tb.docker(5, "rmi", NEW)
    code, out, err, _ = cluster("image", "push", NEW, "-i", inv, "--json", env=env)
    assert code == 0, err
    again = json.loads(out)
    (only,) = again["rounds"]
    assert only["targets"] == ["ctb-node5"] and only["layers_dropped"] == 1
    assert only["raw_bytes"] < layered.new_layer_bytes + (256 << 10)
    assert rows(again)["ctb-node5"]["action"] == "loaded"

    code, out, err, elapsed = cluster("image", "push", NEW, "-i", inv, "--json", env=env)
    assert code == 0, err
    assert {n["action"] for n in json.loads(out)["nodes"]} == {"skipped"}
    assert elapsed < 20  # loosely: the figure comes from bench/image_push.py


def test_a_link_cut_on_node4_mid_layer_names_node4_the_rest_load_and_a_repush_sends_it_only_that_layer(
    clean_testbed, push_image, layered
):
    tb = clean_testbed
    _hold_old_tag_only(tb, layered)
    tb.shape_link(4, "mgmt", "8mbit")  # the chain moves at node 4's pace: ~6 s for the layer
    work_dirs = set(Path("/tmp").glob("cluster-image.*.ctb-node4"))
    env = {**os.environ, "DOCKER_HOST": push_image.controller_docker_host}
    before = _rx_bytes(tb, 4)
    proc = subprocess.Popen(
        [
            *CLUSTER,
            "image",
            "push",
            NEW,
            "-i",
            str(tb.inventory),
            "--compress",
            "none",
            "--stall-timeout",
            "3",
            "--connect-timeout",
            "3",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while _rx_bytes(tb, 4) - before < 1 << 20:  # node 4 is mid-layer: cut it now
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "node 4 never received 1 MiB"
            time.sleep(0.05)
        tb.cut_link(4, "mgmt")
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        _stop_what_node4_still_runs(tb, work_dirs)
    assert proc.returncode == 5, err
    report = json.loads(out)
    by = rows(report)
    bad = by["ctb-node4"]
    assert bad["action"] == "failed" and bad["verified"] is False
    assert "ssh from ctb-node3 to ctb-node4" in bad["error"], bad["error"]
    assert "ctb-node4" in err and "did not reach 1 of 8" in err
    for k in (0, 1, 2, 3, 5, 6, 7):
        row = by[f"ctb-node{k}"]
        assert row["action"] == "loaded" and row["verified"] is True, row
        assert row["probe"]["ready"], row
    # The nodes starved by the cut got the stream again: only the new layer, from the source.
    first, second = report["rounds"][:2]
    assert first["mode"] == "chain" and len(first["targets"]) == 8
    assert second["targets"] == ["ctb-node5", "ctb-node6", "ctb-node7"]
    assert second["source"] == "the controller's docker" and second["layers_dropped"] == 1
    for k in (5, 6, 7):
        assert by[f"ctb-node{k}"]["sends"] == 2

    # Node 4 is back: a re-push sends it what it lacks, the new layer, and nothing else.
    code, out, err, _ = cluster("image", "push", NEW, "-i", str(tb.inventory), "--json", env=env)
    assert code == 0, err
    (only,) = json.loads(out)["rounds"]
    assert only["targets"] == ["ctb-node4"] and only["layers_dropped"] == 1
    assert only["raw_bytes"] < layered.new_layer_bytes + (256 << 10)


def test_when_a_node_cannot_reach_the_next_over_ssh_the_push_fans_out_and_says_so(
    clean_testbed, push_image
):
    tb = clean_testbed
    remove_everywhere(tb)
    key = tb.node(2).root_ssh / "id_ed25519"
    hidden = key.with_name("id_ed25519.hidden")
    key.rename(hidden)  # ctb-node2 can no longer open a session on ctb-node3
    try:
        code, out, err, _ = cluster(
            "image",
            "push",
            TAG,
            "-i",
            str(tb.inventory),
            "--from-tar",
            str(push_image.archive),
            "--streams",
            "4",
            "--no-probe",
            "--json",
        )
    finally:
        hidden.rename(key)
    assert code == 0, err
    report = json.loads(out)
    assert report["mode"] == "fanout"
    assert "ctb-node2 cannot reach ctb-node3 over SSH" in report["mode_reason"]
    assert "Permission denied" in report["mode_reason"]
    assert all(n["action"] == "loaded" and n["verified"] for n in report["nodes"])


# -- two storage drivers (issue 30 (d)) ----------------------------------------------------------

CONTAINERD_STORE = {"features": {"containerd-snapshotter": True}}


def _require_second_engine() -> None:
    """Debian trixie's docker.io 26 + containerd 1.7, unpacked by .ci/system-deps.sh: without
    them the containerd image store cannot run here, and that is not a pass."""
    missing = [str(b) for b in engine_binaries(TRIXIE_ENGINE) if not os.access(b, os.X_OK)]
    if not missing:
        return
    reason = (
        f"no second Docker engine: {', '.join(missing)} missing (.ci/system-deps.sh unpacks "
        "Debian trixie's docker.io and containerd there)"
    )
    if os.environ.get("CI") == "true" and os.geteuid() == 0:
        pytest.fail(f"CI=true and root, so this is a failure, not a skip: {reason}", pytrace=False)
    pytest.skip(f"!!! NOT RUN (this is not a pass): {reason} !!!")


@pytest.fixture
def three_on_the_containerd_store(clean_testbed: Testbed) -> Iterator[tuple[int, ...]]:
    """Nodes 5-7 on Docker 26 with the containerd image store (the others: 20.10, overlay2);
    back on the system's engine and their own daemon.json afterwards, pass or fail."""
    _require_second_engine()
    tb = clean_testbed
    nodes = (5, 6, 7)
    saved = {}
    for k in nodes:
        f = tb.node(k).etc_docker / "daemon.json"
        saved[k] = f.read_text() if f.exists() else None
    try:
        threads = [
            threading.Thread(target=tb.switch_engine, args=(k, TRIXIE_ENGINE, CONTAINERD_STORE))
            for k in nodes
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        for k in nodes:
            info = tb.docker(k, "info", "-f", "{{.ServerVersion}} {{json .DriverStatus}}").stdout
            assert "io.containerd.snapshotter.v1" in info, info
        yield nodes
    finally:
        for k in nodes:
            tb.stop_daemon(k, "dockerd")
            f = tb.node(k).etc_docker / "daemon.json"
            if saved[k] is None:
                f.unlink(missing_ok=True)
            else:
                f.write_text(saved[k])
        for k in nodes:
            tb.switch_engine(k, None)


def test_nodes_on_two_storage_drivers_holding_the_same_image_are_sent_nothing(
    clean_testbed, push_image, three_on_the_containerd_store
):
    tb = clean_testbed
    cs = three_on_the_containerd_store
    remove_everywhere(tb)
    env = {"DOCKER_HOST": push_image.controller_docker_host}
    inv = str(tb.inventory)
    code, out, err, _ = cluster("image", "status", TAG, "-i", inv, "--json", env=env)
    assert code == 0, err
    for n in json.loads(out)["nodes"]:
        k = int(n["node"].removeprefix("ctb-node"))
        if k in cs:
            assert n["store"] == "containerd" and n["partial"] is False, n
        else:
            assert n["driver"] == "overlay2" and n["store"] == "graphdriver", n
        assert not n["present"]
    # The whole image to all eight: the containerd-store nodes load Docker 20.10's archive.
    code, out, err, _ = cluster("image", "push", TAG, "-i", inv, "--json", env=env)
    assert code == 0, err
    by = rows(json.loads(out))
    for k in range(8):
        row = by[f"ctb-node{k}"]
        assert row["action"] == "loaded" and row["verified"] and row["probe"]["ready"], row
    ids = {
        k: tb.docker(k, "image", "inspect", "-f", "{{.Id}}", TAG).stdout.strip() for k in range(8)
    }
    # The Ids differ between the stores (config digest vs manifest digest, sparkrun#152) ...
    assert len({ids[k] for k in cs}) == 1 and len({ids[k] for k in range(5)}) == 1
    assert ids[cs[0]] != ids[0]
    # ... and still nothing is sent: every node holds it, compared by content.
    before = {k: _rx_bytes(tb, k) for k in range(8)}
    code, out, err, _ = cluster("image", "push", TAG, "-i", inv, "--json", env=env)
    assert code == 0, err
    again = json.loads(out)
    assert again["rounds"] == [] and again["mode"] is None
    assert {n["action"] for n in again["nodes"]} == {"skipped"}
    for k in range(8):  # probing only: a few KiB of SSH each, not the image
        assert _rx_bytes(tb, k) - before[k] < 256 << 10
    # `image status` agrees: present everywhere, nothing missing.
    code, out, err, _ = cluster("image", "status", TAG, "-i", inv, "--json", env=env)
    assert code == 0, err
    for n in json.loads(out)["nodes"]:
        assert n["present"] and n["layers_missing"] == 0, n
