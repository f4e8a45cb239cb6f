"""`cluster weights`: the node program's stream (send, recv, verification, temporary names), the
manifest and plan, the source walk (symlinks, hub cache sums), the model checks, the chain
script's `wchain`/`wsource` modes run locally with a stand-in ssh, the warm arithmetic, and
bad input at the CLI."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.main import main
from orchestrator.errors import ConfigError
from orchestrator.images import chain_script
from orchestrator.images.model import HopStatus
from orchestrator.images.rounds import RoundLog, judge_round, parse_chain_line
from orchestrator.weights import node_program as prog
from orchestrator.weights.checks import check_model
from orchestrator.weights.manifest import FileEntry, Manifest, missing_on
from orchestrator.weights.model import Holding, WeightsOptions
from orchestrator.weights.plan import destination, group_by_files, space_problem
from orchestrator.weights.program import node_program
from orchestrator.weights.source import scan_source
from orchestrator.weights.status import decide_warm, engine_claim
from tests.weights_model import make_model, write_safetensors

GIB = 1 << 30


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return make_model(tmp_path / "src" / "tiny", shards=3, shard_bytes=256 << 10)


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def _spec(src: Path, dest: Path, send: list[str] | None = None) -> dict[str, Any]:
    m = scan_source(src).manifest
    return {
        "dest": str(dest),
        "root": str(src),
        "send": send if send is not None else [f.path for f in m.files],
        "manifest": m.as_json(),
    }


def stream_of(spec: dict[str, Any]) -> bytes:
    """The stream `send` writes; the sums it computed land in spec["manifest"]."""
    out = io.BytesIO()
    assert prog.send(spec, out) == 0
    return out.getvalue()


def recv(spec: dict[str, Any], data: bytes, tag: str = "t1", capsys: Any = None) -> tuple[int, str]:
    try:
        rc = prog.recv(spec, tag, "n1", io.BytesIO(data))
        line = ""
    except prog.Fail as exc:
        rc, line = exc.status, exc.line
    return rc, line


def test_send_then_recv_writes_every_file_verified_and_records_it(
    model: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "node" / "models" / "tiny"
    spec = _spec(model, dest)
    rc, _ = recv(spec, stream_of(spec))
    assert rc == 0
    for p in model.iterdir():
        assert (dest / p.name).read_bytes() == p.read_bytes()
    state = json.loads((dest / ".cluster-weights" / "state.json").read_text())
    assert set(state["verified"]) == {p.name for p in model.iterdir()}
    assert state["manifest"]["files"]  # the manifest arrived with every sum filled in
    assert all(f["sha256"] for f in state["manifest"]["files"])
    assert list((dest / ".cluster-weights" / "incoming").iterdir()) == []
    summary = prog.summarize(str(dest), state)
    assert summary["complete"] and set(summary["files"].values()) == {"held"}


def test_a_file_whose_sum_does_not_match_never_takes_its_name(model: Path, tmp_path: Path) -> None:
    dest = tmp_path / "d"
    spec = _spec(model, dest)
    data = bytearray(stream_of(spec))
    # Flip one byte inside the first shard's data (after its header line).
    bad = "model-00001-of-00003.safetensors"
    start = data.index(b"\n", data.index(bad.encode())) + 1
    data[start + 1000] ^= 0xFF
    rc, _ = recv(spec, bytes(data))
    assert rc == 1
    names = {f["path"] for f in spec["manifest"]["files"]}
    assert not (dest / bad).exists()  # never under its final name
    assert all((dest / n).exists() for n in names - {bad})
    state = json.loads((dest / ".cluster-weights" / "state.json").read_text())
    assert bad not in state["verified"]
    assert prog.summarize(str(dest), state)["files"][bad] == "missing"


def test_a_stream_cut_mid_file_keeps_the_whole_files_and_nothing_half_written(
    model: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "d"
    spec = _spec(model, dest)
    data = stream_of(spec)
    cut = data[: len(data) // 2]
    rc, line = recv(spec, cut)
    assert rc == 4 and "the stream ended inside" in line
    state = prog.load_state(str(dest))
    whole = set(state["verified"])
    assert whole  # the first shard arrived whole and was verified
    on_disk = {p.name for p in dest.iterdir() if p.is_file()}
    assert on_disk == whole  # no partial file under a final name
    assert list((dest / ".cluster-weights" / "incoming").iterdir()) == []
    # The re-send carries only what is missing, and completes the copy.
    lack = [p for p in spec["send"] if p not in whole]
    assert lack
    assert all(f["sha256"] for f in spec["manifest"]["files"])  # computed by the first send
    rc, _ = recv({**spec, "send": lack}, stream_of({**spec, "send": lack}))
    assert rc == 0
    assert prog.summarize(str(dest), prog.load_state(str(dest)))["complete"]


def test_paths_that_leave_the_model_are_refused_by_the_receiver(tmp_path: Path) -> None:
    for bad in ("../x", "/etc/passwd", "a/../../b", ".cluster-weights/state.json", ""):
        with pytest.raises(prog.Fail):
            prog.safe_relpath(bad)
    header = json.dumps({"t": "file", "path": "../escape", "size": 1}).encode() + b"\n"
    rc, line = recv({"dest": str(tmp_path / "d")}, header + b"x")
    assert rc == 2 and "refused path" in line
    assert not (tmp_path / "escape").exists()


def test_a_second_writer_to_the_same_destination_is_refused(tmp_path: Path) -> None:
    import fcntl

    dest = tmp_path / "d"
    (dest / ".cluster-weights").mkdir(parents=True)
    with open(dest / ".cluster-weights" / "lock", "a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        rc, line = recv({"dest": str(dest)}, b'{"t":"end"}\n')
    assert rc == 3 and "another push is writing" in line


def test_probe_names_changed_and_missing_files_and_reads_the_page_cache(
    model: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "d"
    spec = _spec(model, dest)
    assert recv(spec, stream_of(spec))[0] == 0
    shard = sorted(p.name for p in model.glob("*.safetensors"))[0]
    with open(dest / shard, "r+b") as f:
        f.write(b"\0\0")
    os.utime(dest / shard, ns=(1, 1))
    (dest / "config.json").unlink()
    (dest / "stale.bin").write_bytes(b"x")
    out = prog.probe({"dest": str(dest), "cache": True})
    assert not out["complete"]
    assert out["files"][shard] == "changed" and out["files"]["config.json"] == "missing"
    assert out["extra"] == ["stale.bin"]
    assert 0 <= out["cached_bytes"] <= sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    assert out["mem"]["MemTotal"] > 0 and out["free_bytes"] > 0
    # --verify re-hashes: the changed shard is forgotten, the rest recorded again.
    again = prog.probe({"dest": str(dest), "verify": True})
    assert again["files"][shard] != "held"


def test_cached_bytes_counts_pages_that_were_just_read(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(os.urandom(1 << 20))
    f.read_bytes()
    got = prog.cached_bytes(str(f))
    assert got is not None and 0 < got <= 1 << 20
    assert prog.cached_bytes(str(tmp_path / "absent")) is None


def test_the_manifest_id_names_content_not_order_or_place() -> None:
    a = Manifest(
        model="x",
        files=(FileEntry(path="a", size=1, sha256="1"), FileEntry(path="b", size=2, sha256="2")),
    )
    b = Manifest(model="y", files=tuple(reversed(a.files)))
    assert a.id() == b.id() and a.short_id() == b.short_id()
    c = a.with_sums({}).model_copy(
        update={"files": (a.files[0], FileEntry(path="b", size=2, sha256="3"))}
    )
    assert c.id() != a.id()
    assert [f.path for f in missing_on(a, {"a": "1", "b": "9"})] == ["b"]
    unknown = Manifest(model="u", files=(FileEntry(path="a", size=1),))
    assert missing_on(unknown, {"a": "1"}) == list(unknown.files)  # unknown sum: sent, hashed


def test_the_destination_stays_strictly_under_the_allowed_root() -> None:
    assert destination(None, None, "/models", "org/m", where="i") == "/models/org/m"
    assert destination("/models/x/", None, "/models", "m", where="i") == "/models/x"
    assert destination(None, "/models/h", "/models", "m", where="i") == "/models/h"
    for bad in ("/etc", "/models", "/models/../etc", "relative/x", "/modelsx/y"):
        with pytest.raises(ConfigError):
            destination(bad, None, "/models", "m", where="i")


def test_space_is_checked_with_headroom_and_groups_share_a_chain() -> None:
    h = Holding(node="n", rank=0, reachable=True, free_bytes=10 * GIB, free_path="/models")
    opts = WeightsOptions()
    assert space_problem(h, 8 * GIB, opts) is None
    why = space_problem(h, 9 * GIB + GIB // 2, opts)
    assert why is not None and "not enough free space at /models" in why
    assert space_problem(h, 0, opts) is None
    groups = group_by_files({"a": ["x"], "b": ["x", "y"], "c": ["x"]}, ["c", "b", "a"])
    assert groups == [(["c", "a"], ["x"]), (["b"], ["x", "y"])]


def test_the_source_walk_refuses_symlinks_out_and_reuses_hub_sums(tmp_path: Path) -> None:
    outside = tmp_path / "secret"
    outside.write_text("x")
    m = make_model(tmp_path / "m", shards=1, shard_bytes=64 << 10)
    (m / "link").symlink_to(outside)
    with pytest.raises(ConfigError) as err:
        scan_source(m)
    assert "leads out of the model dir" in err.value.line()
    (m / "link").unlink()
    (m / "inner").symlink_to(m / "config.json")  # a link inside is fine
    assert any(f.path == "inner" for f in scan_source(m).manifest.files)
    with pytest.raises(ConfigError, match="no such directory"):
        scan_source(tmp_path / "absent")
    (m / "dangling").symlink_to(m / "nowhere")
    with pytest.raises(ConfigError, match="cannot read it"):
        scan_source(m)
    # A hub cache snapshot: LFS files are symlinks to blobs named by their sha256.
    repo = tmp_path / "hub" / "models--org--name"
    snap = repo / "snapshots" / "abc123"
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    data = os.urandom(4096)
    import hashlib

    digest = hashlib.sha256(data).hexdigest()
    (repo / "blobs" / digest).write_bytes(data)
    (repo / "blobs" / ("a" * 40)).write_text("{}")  # a git blob (sha1): not a sha256
    (snap / "w.safetensors").symlink_to(Path("../../blobs") / digest)
    (snap / "config.json").symlink_to(Path("../../blobs") / ("a" * 40))
    src = scan_source(snap)
    assert src.hub_repo == "org/name" and src.default_name == "org/name"
    # A `--local-dir` download: the etag huggingface_hub recorded, while the file is not newer.
    local = tmp_path / "local"
    (local / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (local / "w.safetensors").write_bytes(data)
    meta = local / ".cache" / "huggingface" / "download" / "w.safetensors.metadata"
    meta.write_text(f"{'c' * 40}\n{digest}\n{os.stat(local / 'w.safetensors').st_mtime}\n")
    assert scan_source(local).manifest.by_path()["w.safetensors"].sha256 == digest
    os.utime(local / "w.safetensors", (2e9, 2e9))  # modified after the download: not trusted
    assert scan_source(local).manifest.by_path()["w.safetensors"].sha256 is None
    by = src.manifest.by_path()
    assert by["w.safetensors"].sha256 == digest and by["config.json"].sha256 is None
    assert src.from_hub == 1


def test_model_checks_parse_headers_match_the_index_and_want_config_and_tokenizer(
    tmp_path: Path,
) -> None:
    m = make_model(tmp_path / "m", shards=2, shard_bytes=64 << 10)
    assert check_model(m, scan_source(m).manifest) == []
    shard = m / "model-00002-of-00002.safetensors"
    with open(shard, "r+b") as f:
        f.truncate(100)
    (m / "tokenizer.json").unlink()
    problems = check_model(m, scan_source(m).manifest)
    assert any("model-00002-of-00002.safetensors: not a valid safetensors" in p for p in problems)
    assert any("tensor model.layers.1.mlp.w0.weight is not in" in p for p in problems)
    assert any(p.startswith("no tokenizer file") for p in problems)
    # Mistral's consolidated format: params.json and tekken.json, when the recipe says so.
    mi = tmp_path / "mistral"
    mi.mkdir()
    write_safetensors(mi / "consolidated.safetensors", {"w": 1024})
    (mi / "params.json").write_text("{}")
    (mi / "tekken.json").write_text("{}")
    assert len(check_model(mi, scan_source(mi).manifest)) == 2  # no config.json, no tokenizer
    flags = ("--tokenizer-mode", "mistral", "--config-format", "mistral")
    assert check_model(mi, scan_source(mi).manifest, flags) == []


def test_warm_only_when_memory_minus_what_is_not_cached_covers_the_claim() -> None:
    h = Holding(
        node="n",
        rank=0,
        reachable=True,
        manifest_id="sha256:x",
        complete=True,
        total_bytes=60 * GIB,
        cached_bytes=10 * GIB,
        mem={"MemAvailable": 110 * GIB, "MemFree": 115 * GIB, "MemTotal": 120 * GIB},
    )
    yes = decide_warm(h, 50 * GIB)  # 110 - 50 = 60 >= 50
    assert yes.warm and yes.uncached == 50 * GIB
    assert "MemAvailable 110.0 GiB − 50.0 GiB not yet cached = 60.0 GiB ≥" in yes.reason
    no = decide_warm(h, 72 * GIB)
    assert not no.warm and "< the engine's claim 72.0 GiB" in no.reason
    assert engine_claim(120 * GIB, 0.75, 66 * GIB, 1.1, None) == 90 * GIB
    assert engine_claim(None, None, None, 1.1, 5) == 5
    assert not decide_warm(h.model_copy(update={"complete": False}), 1).warm
    # A GB10 counts page cache as taken: MemFree, when lower, is the memory that matters.
    tight = h.model_copy(update={"mem": {"MemAvailable": 110 * GIB, "MemFree": 90 * GIB}})
    d = decide_warm(tight, 50 * GIB)
    assert not d.warm and d.reason.startswith("not warmed: MemFree 90.0 GiB − 50.0 GiB")


# -- the chain script's weights modes, run locally ------------------------------------------

FAKE_SSH = r"""#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-p|-l|-i) shift 2 ;;
    -T) shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done
host=$1; shift
echo "$host" >> "$FAKE_DIR/ssh.log"
mkdir -p "$FAKE_DIR/nodes/$host" && cd "$FAKE_DIR/nodes/$host" && exec sh -c "$*"
"""


def quint(name: str) -> list[str]:
    return [name, "root", name, "22", "-"]


def run_script(
    tmp_path: Path, mode: str, tag: str, names: list[str], spec: dict[str, Any], data: bytes | None
) -> list[Any]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ssh").write_text(FAKE_SSH)
    (bin_dir / "ssh").chmod(0o755)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    first = tmp_path / "nodes" / names[0]
    first.mkdir(parents=True, exist_ok=True)
    script = chain_script()
    argv = ["sh", "-c", script, "cluster-image", script, mode, tag, "none", "5", "1", "3", ""]
    argv += [json.dumps(spec), node_program(), *[w for n in names for w in quint(n)]]
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_DIR": str(tmp_path),
        "TMPDIR": str(work),
    }
    proc = subprocess.run(argv, input=data, capture_output=True, timeout=60, env=env, cwd=first)
    assert proc.returncode == 0, proc.stderr.decode()
    return [e for e in map(parse_chain_line, proc.stdout.decode().splitlines()) if e is not None]


@pytest.mark.skipif(shutil.which("python3") is None, reason="no python3 on PATH")
def test_the_chain_script_writes_every_nodes_copy_and_forwards_and_a_node_can_resend(
    model: Path, tmp_path: Path
) -> None:
    spec = _spec(model, Path("m"))  # relative: each stand-in node's own folder
    data = stream_of(spec)
    names = ["n1", "n2", "n3"]
    events = run_script(tmp_path, "wchain", "w1-r1", names, spec, data)
    for n in names:
        copy = tmp_path / "nodes" / n / "m"
        assert {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()} == {
            p.name: p.read_bytes() for p in model.iterdir()
        }
    outcomes = judge_round(
        names, RoundLog(events=[(0.0, e) for e in events]), upstream_label="t", load_word="w"
    )
    assert [o.status for o in outcomes] == [HopStatus.loaded] * 3
    assert (tmp_path / "ssh.log").read_text().split() == ["n2", "n3"]
    assert list((tmp_path / "work").iterdir()) == []
    # n1 re-sends its copy (source mode) to a new node, n4.
    node_spec = {
        **spec,
        "root": "m",
        "manifest": prog.load_state(str(tmp_path / "nodes/n1/m"))["manifest"],
    }
    events = run_script(tmp_path, "wsource", "w1-r2", ["n1", "n4"], node_spec, None)
    by = {(e.event, e.node): e for e in events}
    assert by[("save", "n1")].fields == ("0",) and by[("load", "n4")].fields[0] == "0"
    copy = tmp_path / "nodes" / "n4" / "m"
    assert (copy / "config.json").read_bytes() == (model / "config.json").read_bytes()


def test_a_receiver_that_fails_says_why_in_the_chains_words(model: Path, tmp_path: Path) -> None:
    spec = _spec(model, Path("m"))
    data = bytearray(stream_of(spec))
    data[data.index(b"\n", data.index(b"model-00001")) + 100] ^= 1
    events = run_script(tmp_path, "wchain", "w2-r1", ["n1", "n2"], spec, bytes(data))
    outcomes = judge_round(
        ["n1", "n2"],
        RoundLog(events=[(0.0, e) for e in events]),
        upstream_label="t",
        load_word="writing the files",
    )
    assert [o.status for o in outcomes] == [HopStatus.failed] * 2
    assert "writing the files exited 1: " in outcomes[0].evidence


# -- the CLI: bad input is one line and an exit code -----------------------------------------


def _inventory(tmp_path: Path, root: str | None = None) -> Path:
    inv = tmp_path / "inv.yaml"
    extra = f"\n    cluster_weights_root: {root}" if root else ""
    inv.write_text(
        "all:\n  vars:\n    ansible_user: root" + extra + "\n  hosts:\n"
        "    a: {ansible_host: 192.0.2.1, rank: 0, fabric_iface: eth0}\n"
    )
    return inv


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["MISSING"], "no such directory"),
        (["MODEL", "--dest", "/etc/x"], "outside the allowed root /models"),
        (["MODEL", "--dest", "/srv/w/x"], "outside the allowed root /models"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_anything_moves(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], text: str
) -> None:
    argv = [a.replace("MISSING", str(tmp_path / "nope")).replace("MODEL", str(model)) for a in args]
    code = main(["weights", "push", *argv, "-i", str(_inventory(tmp_path))])
    err = capsys.readouterr().err
    assert code == 2, err
    assert text in err and "Traceback" not in err


def test_the_allowed_root_is_an_inventory_variable(
    tmp_path: Path, model: Path, capsys: Any
) -> None:
    from orchestrator.inventory import load_inventory
    from orchestrator.weights.push import resolve_dest

    inv = load_inventory(_inventory(tmp_path, "/srv/w"))
    assert inv.weights_root == "/srv/w"
    assert resolve_dest(inv, "org/m", None, None) == "/srv/w/org/m"
    code = main(
        [
            "weights",
            "push",
            str(model),
            "--dest",
            "/models/x",
            "-i",
            str(_inventory(tmp_path, "/srv/w")),
        ]
    )
    assert code == 2 and "outside the allowed root /srv/w" in capsys.readouterr().err


def test_a_receiver_cut_off_from_its_sender_gives_up_and_lets_go_of_the_lock(
    tmp_path: Path,
) -> None:
    r, w = os.pipe()
    try:
        with open(r, "rb", buffering=0) as inp:
            os.write(w, json.dumps({"t": "file", "path": "a", "size": 10}).encode() + b"\n12345")
            with pytest.raises(prog.Fail, match=r"no byte arrived for 0\.3 s"):
                prog.recv({"dest": str(tmp_path / "d"), "idle_s": 0.3}, "t9", "n1", inp)
    finally:
        os.close(w)
    assert not (tmp_path / "d" / "a").exists()
    # The lock is free again: the next push to the same destination proceeds.
    rc, _ = recv({"dest": str(tmp_path / "d")}, b'{"t":"end"}\n')
    assert rc == 0


# -- preflight: the staged copies must agree -------------------------------------------------


def _copy(mid: str | None, complete: bool = True, **kw: Any) -> Any:
    from orchestrator.probes.disk import CopyFacts

    return CopyFacts(
        dest="/m", manifest_id=mid, model="m" if mid else None, complete=complete, **kw
    )


def _preflight(copies: list[Any]) -> list[Any]:
    from tests.unit.plan.test_preflight import problems_of
    from tests.unit.plan.test_rendezvous import replace, spark_cluster

    _, facts = spark_cluster()
    for k, c in enumerate(copies):
        facts = replace(facts, k, weights_copy=c)
    return [p for p in problems_of(facts) if p.check.startswith("weights-")]


def test_preflight_refuses_nodes_whose_copies_differ_or_are_incomplete_naming_each() -> None:
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    assert _preflight([_copy(a)] * 8) == []
    found = _preflight(
        [_copy(a)] * 5
        + [_copy(b), _copy(a, complete=False, off={"s2.safetensors": "changed"}), _copy(None)]
    )
    by = {p.node: p for p in found}
    assert {p.check for p in found} == {
        "weights-copy-mismatch",
        "weights-copy-incomplete",
        "weights-copy-missing",
    }
    assert all(p.severity == "error" for p in found)
    names = {p.check: p for p in found}
    assert "bbbbbbbbbbbb" in names["weights-copy-mismatch"].what
    assert "aaaaaaaaaaaa" in names["weights-copy-mismatch"].what
    assert "s2.safetensors changed" in names["weights-copy-incomplete"].evidence
    assert "holds no staged copy" in names["weights-copy-missing"].what
    assert len(by) == 3


def test_preflight_says_what_shared_storage_costs_when_nothing_is_staged() -> None:
    from orchestrator.preflight.checks.weights_copies import load_estimate

    (warn,) = _preflight([_copy(None)] * 8)
    assert warn.check == "weights-not-staged" and warn.severity == "warning"
    assert "from a local copy" in warn.evidence and "cold" in warn.evidence
    # Seed 002: 71 GB per rank; ~8 min local, ~40 min shared warm, ~3.5 h cold.
    text = load_estimate(71_000_000_000)
    assert "~8 min from a local copy" in text and "~40 min from shared" in text
    assert "~3.5 h cold" in text


def test_unreadable_files_and_fifos_are_refused_one_line_each(tmp_path: Path) -> None:
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="weights-perm-"))  # traversable by an unprivileged user
    try:
        base.chmod(0o755)
        m = make_model(base / "m", shards=1, shard_bytes=64 << 10)
        m.chmod(0o755)
        for p in m.iterdir():
            p.chmod(0o644)
        (m / "tokenizer.json").chmod(0o000)
        os.mkfifo(m / "pipe")
        # As root every file is readable: a forked child drops to `nobody` to meet one that
        # is not, as an operator's account would.
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            code = 0
            try:
                os.close(r)
                if os.geteuid() == 0:
                    os.setgid(65534)
                    os.setuid(65534)
                try:
                    scan_source(m)
                    out = "no error"
                except ConfigError as exc:
                    out = "\n".join(exc.lines())
                os.write(w, out.encode())
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        with open(r, "rb") as f:
            said = f.read().decode()
        _, status = os.waitpid(pid, 0)
        assert status == 0, said
        assert "tokenizer.json: cannot read it (Permission denied)" in said
        assert "pipe: not a regular file" in said
        assert "nothing was sent" in said
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_warm_reads_every_held_file_once(model: Path, tmp_path: Path, capsys: Any) -> None:
    dest = tmp_path / "d"
    spec = _spec(model, dest)
    assert recv(spec, stream_of(spec))[0] == 0
    capsys.readouterr()
    assert prog.warm({"dest": str(dest)}) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["warmed_bytes"] == sum(p.stat().st_size for p in model.iterdir())


def test_the_preflight_copy_probe_runs_the_node_program_and_reads_its_answer(
    model: Path, tmp_path: Path
) -> None:
    from orchestrator.weights.copy_probe import copy_probe

    dest = tmp_path / "d"
    spec = _spec(model, dest)
    assert recv(spec, stream_of(spec))[0] == 0
    probe = copy_probe(str(dest))
    r = subprocess.run(list(probe.argv), capture_output=True, text=True, timeout=60)
    facts = probe.interpret(r.returncode, r.stdout, r.stderr, node="n1")
    want = Manifest(
        model="tiny", files=tuple(FileEntry(**f) for f in spec["manifest"]["files"])
    ).id()
    assert facts.manifest_id == want and facts.complete and facts.off == {}
    (dest / "config.json").unlink()
    r = subprocess.run(list(probe.argv), capture_output=True, text=True, timeout=60)
    facts = probe.interpret(r.returncode, r.stdout, r.stderr, node="n1")
    assert not facts.complete and facts.off == {"config.json": "missing"}
    empty = copy_probe(str(tmp_path / "never"))
    r = subprocess.run(list(empty.argv), capture_output=True, text=True, timeout=60)
    assert empty.interpret(r.returncode, r.stdout, r.stderr, node="n1").manifest_id is None


def test_the_recipe_option_completes_recipe_names() -> None:
    from orchestrator.recipes import recipe_names
    from tests.unit.cli.test_completion import bash

    small = [n for n in recipe_names() if n.startswith("mistral-small4")]
    assert bash("cluster weights push /m -r mistral-small4") == small
    assert bash("cluster weights status --recipe mistral-small4") == small
