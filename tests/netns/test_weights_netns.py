"""`cluster weights` on the 8-node netns testbed: real sshd, real node-to-node OpenSSH hops, and
each node's own /models (a per-node mount view), so eight copies are eight real copies.

Run under the heavy lock:
  flock /tmp/cluster-heavy.lock env PYTHONPATH=$PWD .venv/bin/python -m pytest -q \
      -p no:cacheprovider tests/netns/test_weights_netns.py
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.testbed import Testbed
from tests.weights_model import make_model

CLUSTER = [sys.executable, "-m", "orchestrator.cli"]
DEST = "/models/org/tiny"
SHARD = 4 << 20


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("weights") / "tiny", shards=4, shard_bytes=SHARD)


def cluster(tb: Testbed, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLUSTER, "weights", *args, "-i", str(tb.inventory), "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )


def push(tb: Testbed, model: Path, *more: str) -> tuple[int, dict[str, Any], str]:
    r = cluster(tb, "push", str(model), "--dest", DEST, *more)
    doc = json.loads(r.stdout) if r.stdout.strip() else {}
    return r.returncode, doc, r.stderr


def rows(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in doc["nodes"]}


def wipe(tb: Testbed) -> None:
    for nd in tb.nodes:
        subprocess.run(["rm", "-rf", str(nd.view("/models/org"))], check=True)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_push_gives_every_node_its_own_verified_copy_and_a_repush_sends_nothing(
    clean_testbed: Testbed, model: Path
) -> None:
    tb = clean_testbed
    wipe(tb)
    rc, doc, err = push(tb, model)
    assert rc == 0, err
    assert [r["action"] for r in doc["nodes"]] == ["sent"] * 8
    first = doc["rounds"][0]
    assert first["mode"] == "chain" and len(first["targets"]) == 8
    assert first["source"] == "the controller"
    want = {p.name: sha(p) for p in model.iterdir()}
    inodes = set()
    for nd in tb.nodes:
        copy = nd.view(DEST)
        got = {p.name: sha(p) for p in copy.iterdir() if p.is_file()}
        assert got == want, nd.name
        inodes.add(os.stat(copy / "model-00001-of-00004.safetensors").st_ino)
        assert not list((copy / ".cluster-weights" / "incoming").iterdir())
        state = json.loads((copy / ".cluster-weights" / "state.json").read_text())
        assert set(state["verified"]) == set(want)
    assert len(inodes) == 8  # eight real copies, each on its node's own view
    # Again: every node holds it, nothing moves.
    t0 = time.monotonic()
    rc, again, err = push(tb, model)
    assert rc == 0, err
    assert [r["action"] for r in again["nodes"]] == ["skipped"] * 8
    assert again["rounds"] == []
    assert again["manifest_id"] == doc["manifest_id"]
    assert time.monotonic() - t0 < 60  # generous: the bench measures it
    status = cluster(tb, "status", DEST)
    assert status.returncode == 0, status.stderr
    nodes = json.loads(status.stdout)["nodes"]
    assert [n["state"] for n in nodes] == ["complete"] * 8
    assert all(0 <= n["cached_bytes"] <= n["total_bytes"] for n in nodes)
    # --warm: never where the engine's claim would not be left intact (the arithmetic is said).
    status = cluster(tb, "status", DEST, "--warm", "--claim-gib", "100000")
    warm = json.loads(status.stdout)["warm"]
    assert sorted(warm) == [nd.name for nd in tb.nodes]
    for note in warm.values():
        assert note.startswith("not warmed: Mem") or note == "already in the page cache", note
        assert "; read " not in note
    status = cluster(tb, "status", DEST, "--warm", "--claim-gib", "0")
    for note in json.loads(status.stdout)["warm"].values():
        assert note == "already in the page cache" or (
            note.startswith("warm: Mem") and "; read 0.0 GiB" in note
        ), note


def test_a_shard_corrupted_on_one_node_is_resent_to_that_node_only(
    clean_testbed: Testbed, model: Path
) -> None:
    tb = clean_testbed
    rc, _, err = push(tb, model)
    assert rc == 0, err
    shard = "model-00002-of-00004.safetensors"
    victim = tb.node(3).view(DEST) / shard
    with open(victim, "r+b") as f:  # a bit flipped in place: the mtime moves
        f.seek(1 << 20)
        b = f.read(1)
        f.seek(1 << 20)
        f.write(bytes([b[0] ^ 0xFF]))
    status = cluster(tb, "status", DEST)
    assert status.returncode == 3
    assert "ctb-node3: incomplete: model-00002-of-00004.safetensors changed" in status.stderr
    by = {n["node"]: n for n in json.loads(status.stdout)["nodes"]}
    assert by["ctb-node3"]["state"] == "incomplete"
    assert by["ctb-node3"]["files"][shard] == "changed"
    rc, doc, err = push(tb, model)
    assert rc == 0, err
    by = rows(doc)
    assert by["ctb-node3"]["action"] == "sent" and by["ctb-node3"]["files_sent"] == 1
    assert [by[f"ctb-node{k}"]["action"] for k in (0, 1, 2, 4, 5, 6, 7)] == ["skipped"] * 7
    (only,) = doc["rounds"]
    assert only["targets"] == ["ctb-node3"] and only["files"] == 1
    assert only["bytes"] == (model / shard).stat().st_size
    assert sha(victim) == sha(model / shard)
    # A corruption that keeps size and mtime is found by --verify (a re-hash on the nodes).
    st = victim.stat()
    with open(victim, "r+b") as f:
        f.seek(0)
        f.write(b"\0")
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    rc, doc, err = push(tb, model)
    assert rc == 0 and doc["rounds"] == []  # the stamp still matches: not seen
    rc, doc, err = push(tb, model, "--verify")
    assert rc == 0, err
    (only,) = doc["rounds"]
    assert only["targets"] == ["ctb-node3"]
    assert sha(victim) == sha(model / shard)


def _tx(tb: Testbed, k: int) -> int:
    host_veth, _ = tb.node(k).iface_pair("mgmt")
    return int(Path(f"/sys/class/net/{host_veth}/statistics/tx_bytes").read_text())


def test_a_node_cut_off_mid_push_is_named_and_the_rest_resent_from_where_it_broke(
    clean_testbed: Testbed, model: Path
) -> None:
    tb = clean_testbed
    wipe(tb)
    tb.shape_link(4, "mgmt", "16mbit")  # the chain moves at node 4's pace: ~8 s for 16 MiB
    before = _tx(tb, 4)
    proc = subprocess.Popen(
        [
            *CLUSTER,
            "weights",
            "push",
            str(model),
            "--dest",
            DEST,
            "-i",
            str(tb.inventory),
            "--json",
            "--stall-timeout",
            "3",
            "--connect-timeout",
            "3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while _tx(tb, 4) - before < 6 << 20:  # node 4 holds a shard or so: cut it now
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "node 4 never received 6 MiB"
            time.sleep(0.05)
        tb.cut_link(4, "mgmt")
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        tb.restore_link(4)
    assert proc.returncode == 9, err
    doc = json.loads(out)
    by = rows(doc)
    assert by["ctb-node4"]["action"] == "failed"
    assert "ctb-node4" in by["ctb-node4"]["error"], by["ctb-node4"]["error"]
    assert "ctb-node4" in err and "did not reach 1 of 8" in err
    # The re-probe of the cut node gets three connect timeouts (10 s), and its line names the
    # node program by its size: the line is about the node, not 20 KB of the program's source.
    assert "<" in by["ctb-node4"]["error"] and "-line program> probe" in by["ctb-node4"]["error"]
    assert "did not finish within 10 s" in by["ctb-node4"]["error"], by["ctb-node4"]["error"]
    assert max(len(line) for line in err.splitlines()) < 600, err[:2000]
    for k in (0, 1, 2, 3, 5, 6, 7):
        assert by[f"ctb-node{k}"]["action"] == "sent", by[f"ctb-node{k}"]
    first, second = doc["rounds"][:2]
    assert len(first["targets"]) == 8
    assert second["targets"] == ["ctb-node5", "ctb-node6", "ctb-node7"]
    assert second["source"] == "node ctb-node3"
    assert second["files"] < first["files"]  # what arrived whole is not sent again
    # Nothing half-written under a final name on node 4: each file there is whole and right.
    copy = tb.node(4).view(DEST)
    for p in copy.glob("*.safetensors"):
        assert sha(p) == sha(model / p.name), p
    # Pushing again, with node 4 back, sends node 4 only what it lacks.
    rc, doc, err = push(tb, model)
    assert rc == 0, err
    assert [r["targets"] for r in doc["rounds"]] == [["ctb-node4"]]


def test_a_node_whose_disk_fills_mid_push_fails_alone_and_keeps_no_partial_file(
    clean_testbed: Testbed, model: Path
) -> None:
    tb = clean_testbed
    small = "/models/org/small"
    for nd in tb.nodes:
        subprocess.run(["rm", "-rf", str(nd.view(small))], check=True)
    # Node 2's destination: a tmpfs in its own mount namespace with room for the bytes but
    # only 4 inodes (the directory, .cluster-weights, lock, one file): it fills mid-push.
    tb.ssh(2, f"mkdir -p {small} && mount -t tmpfs -o size=64m,nr_inodes=5 tmpfs {small}")
    try:
        r = cluster(tb, "push", str(model), "--dest", small, "--headroom-gib", "0")
        assert r.returncode == 9, r.stderr
        by = rows(json.loads(r.stdout))
        assert by["ctb-node2"]["action"] == "failed"
        assert "no space left" in by["ctb-node2"]["error"], by["ctb-node2"]["error"]
        for k in (0, 1, 3, 4, 5, 6, 7):
            assert by[f"ctb-node{k}"]["action"] == "sent", by[f"ctb-node{k}"]
        listing = tb.ssh(2, f"find {small} -type f").stdout.split()
        assert not [p for p in listing if "/incoming/" in p], listing
        # A disk too small for the model is refused before any byte is sent to it.
        tb.ssh(2, f"umount {small} && mount -t tmpfs -o size=8m tmpfs {small}")
        r = cluster(tb, "push", str(model), "--dest", small, "--headroom-gib", "0")
        assert r.returncode == 9
        by = rows(json.loads(r.stdout))
        assert "not enough free space" in by["ctb-node2"]["error"]
        assert by["ctb-node2"]["sends"] == 0
    finally:
        tb.ssh(2, f"umount {small}", check=False)


def test_when_a_node_cannot_reach_the_next_over_ssh_the_weights_fan_out_and_say_so(
    clean_testbed: Testbed, model: Path
) -> None:
    tb = clean_testbed
    wipe(tb)
    key = tb.node(2).root_ssh / "id_ed25519"
    hidden = key.with_name("id_ed25519.hidden")
    key.rename(hidden)  # ctb-node2 can no longer open a session on ctb-node3
    try:
        rc, doc, err = push(tb, model)
    finally:
        hidden.rename(key)
    assert rc == 0, err
    (only,) = doc["rounds"]
    assert only["mode"] == "fanout" and len(only["targets"]) == 8
    assert "ctb-node2 cannot reach ctb-node3 over SSH" in only["mode_reason"]
    assert "Permission denied" in only["mode_reason"]
    assert [r["action"] for r in doc["nodes"]] == ["sent"] * 8
    want = {p.name: sha(p) for p in model.iterdir()}
    for nd in tb.nodes:  # two waves of four, each reading the source again: all whole
        got = {p.name: sha(p) for p in nd.view(DEST).iterdir() if p.is_file()}
        assert got == want, nd.name
