"""Image distribution, the pure core: probes on captured output, identity across image stores,
the push plan, the judging of what a chain said, and the chain script itself run locally (a fake
`docker` and a fake `ssh` on PATH stand in for the nodes; tests/netns has the real thing)."""

from __future__ import annotations

import base64
import gzip
import hashlib
import hmac
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.dockercli import DockerCli
from orchestrator.errors import ImageError
from orchestrator.images import (
    ChainEvent,
    Compression,
    HopStatus,
    Mode,
    NodeState,
    RoundLog,
    Source,
    SourceImage,
    SourceKind,
    chain_script,
    choose_mode,
    compression_pays,
    decide_compression,
    filter_known_hosts,
    judge_round,
    next_round,
    parse_chain_line,
    plan_push,
    read_archive,
)
from orchestrator.probes.image import (
    CHAIN_TOOLS,
    ImageFacts,
    ImageIdentity,
    ImageStore,
    ImageStoreKind,
    identity_of,
    image_inspect_probe,
    image_store_probe,
    matches_digest,
    parse_chain_tools,
    same_image,
)
from orchestrator.probes.runtime import docker_info_probe

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "image"
REF = "ctb/busybox:1"
CONFIG_DIGEST = "sha256:c2e13f01e100af4a25029aac1f6c432252e06c3a4ad32037c750bcc81904fed3"


def case(folder: str, name: str) -> tuple[int, str, str]:
    d = FIX / folder
    exit_file, stderr = d / f"{name}.exit", d / f"{name}.stderr"
    return (
        int(exit_file.read_text()) if exit_file.exists() else 0,
        (d / f"{name}.stdout").read_text(),
        stderr.read_text() if stderr.exists() else "",
    )


def inspect(name: str, ref: str = REF) -> ImageFacts:
    return image_inspect_probe(ref, DockerCli()).interpret(*case("inspect", name))


def store(name: str) -> ImageStore:
    return image_store_probe(DockerCli()).interpret(*case("store", name))


# -- probes on captured output ---------------------------------------------------------------


def test_an_image_on_an_overlay2_node_parses_to_its_id_platform_and_layers() -> None:
    facts = inspect("testbed-busybox")
    assert facts.present and facts.id == CONFIG_DIGEST
    assert facts.platform == "linux/amd64"
    assert facts.repo_digests == ()  # after a docker load: no registry digest
    assert facts.layers == (
        "sha256:d3972ea4b01667303e6bf68ca4a1d8b5d05c2884232ddc676d502af85cc8a171",
    )
    assert facts.size == 1985512


@pytest.mark.parametrize("name", ["absent-client20", "absent-client28"])
def test_an_absent_image_is_an_answer_from_both_docker_clients(name: str) -> None:
    facts = inspect(name, "ctb/none:1")
    assert not facts.present and facts.id is None


def test_the_image_store_of_the_testbed_is_a_graph_driver_and_the_edited_one_containerd() -> None:
    overlay = store("testbed-node")
    assert overlay.reachable and overlay.driver == "overlay2"
    assert overlay.kind is ImageStoreKind.graphdriver
    assert overlay.platform == "linux/amd64"
    c8d = store("containerd-store-edited")
    assert c8d.kind is ImageStoreKind.containerd and c8d.driver == "overlayfs"
    assert c8d.platform == "linux/arm64"


def test_the_store_probe_is_the_runtime_probes_docker_info_not_a_second_one() -> None:
    assert image_store_probe(DockerCli()).argv == docker_info_probe(DockerCli()).argv


def test_the_chain_tools_of_a_testbed_node_include_zstd_tee_p_and_proc_io() -> None:
    tools = CHAIN_TOOLS.interpret(*case("tools", "testbed-node"))
    assert tools.zstd and tools.tee_p and tools.proc_io and tools.missing == ()
    assert parse_chain_tools("ssh mkfifo dd tee sed\n").missing == ()
    assert parse_chain_tools("mkfifo dd\n").missing == ("ssh", "tee", "sed")


# -- identity across save/load and stores ------------------------------------------------------


def make_archive(tmp_path: Path, *, compress: bool = False, tags: list[str] | None = None) -> Path:
    """A `docker save`-shaped tar from the captured config and manifest (no layer bytes)."""
    config = (FIX / "archive" / "busybox-config.json").read_bytes()
    manifest = json.loads((FIX / "archive" / "busybox-manifest.json").read_text())
    if tags is not None:
        manifest[0]["RepoTags"] = tags
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (
            (manifest[0]["Config"], config),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tmp_path / ("image.tar.gz" if compress else "image.tar")
    path.write_bytes(gzip.compress(buf.getvalue()) if compress else buf.getvalue())
    return path


@pytest.mark.parametrize("compress", [False, True])
def test_an_archive_names_the_same_image_as_the_node_that_loaded_it(
    tmp_path: Path, compress: bool
) -> None:
    src = read_archive(make_archive(tmp_path, compress=compress), REF)
    assert src.identity.config_digest == CONFIG_DIGEST
    assert src.platform == "linux/amd64"
    node = identity_of(inspect("testbed-busybox"), ImageStoreKind.graphdriver)
    assert node.config_digest == CONFIG_DIGEST
    assert same_image(src.identity, node)


def test_a_containerd_store_reports_another_id_for_the_same_image_and_it_still_matches(
    tmp_path: Path,
) -> None:
    src = read_archive(make_archive(tmp_path), REF)
    c8d_facts = inspect("containerd-store-edited")
    assert c8d_facts.id != CONFIG_DIGEST  # sparkrun#152: an Id comparison would re-push forever
    c8d = identity_of(c8d_facts, store("containerd-store-edited").kind)
    assert c8d.config_digest is None and c8d.manifest_digest == c8d_facts.id
    assert same_image(src.identity, c8d)
    overlay = identity_of(inspect("testbed-busybox"), ImageStoreKind.graphdriver)
    assert same_image(overlay, c8d)


def test_an_image_with_another_command_is_not_the_same_image() -> None:
    doc = json.loads(case("inspect", "testbed-busybox")[1])
    doc["Config"]["Cmd"] = ["/bin/true"]
    other = image_inspect_probe(REF, DockerCli()).interpret(0, json.dumps(doc), "")
    assert not same_image(
        identity_of(other, ImageStoreKind.containerd),
        identity_of(inspect("testbed-busybox"), ImageStoreKind.containerd),
    )
    assert not same_image(ImageIdentity(), ImageIdentity())


def test_a_recipe_digest_matches_a_config_digest_a_manifest_digest_or_a_repo_digest() -> None:
    ident = ImageIdentity(
        config_digest="sha256:" + "a" * 64,
        repo_digests=("lmsysorg/sglang@sha256:" + "b" * 64,),
    )
    assert matches_digest(ident, "sha256:" + "a" * 64)
    assert matches_digest(ident, "sha256:" + "b" * 64)
    assert not matches_digest(ident, "sha256:" + "c" * 64)
    assert matches_digest(ImageIdentity(manifest_digest="sha256:" + "d" * 64), "sha256:" + "d" * 64)


def test_an_archive_without_the_reference_says_what_it_holds(tmp_path: Path) -> None:
    path = make_archive(tmp_path, tags=["other/image:2"])
    with pytest.raises(ImageError, match="holds other/image:2"):
        read_archive(path, REF)
    with pytest.raises(ImageError, match="not a readable"):
        (tmp_path / "junk.tar").write_bytes(b"not a tar")
        read_archive(tmp_path / "junk.tar", REF)


def test_a_short_docker_hub_name_matches_its_long_spelling_in_the_archive(tmp_path: Path) -> None:
    path = make_archive(tmp_path, tags=["ubuntu:latest"])
    assert read_archive(path, "docker.io/library/ubuntu").reference == "docker.io/library/ubuntu"


# -- the plan ------------------------------------------------------------------------------------

ARM = ImageStore(
    reachable=True,
    driver="overlay2",
    kind=ImageStoreKind.graphdriver,
    architecture="arm64",
    os_type="linux",
)


def facts(digest: str | None, arch: str = "arm64") -> ImageFacts:
    if digest is None:
        return ImageFacts(reference="img:1", present=False)
    return ImageFacts(
        reference="img:1",
        present=True,
        id=digest,
        os="linux",
        architecture=arch,
        content_key="sha256:" + hashlib.sha256(digest.encode()).hexdigest(),
    )


TOOLS = parse_chain_tools("zstd ssh mkfifo dd tee sed tee-p proc-io")
WANT = "sha256:" + "1" * 64
OTHER = "sha256:" + "2" * 64


def state(k: int, digest: str | None = None, **kw: object) -> NodeState:
    base: dict[str, object] = {
        "node": f"spark-{k}",
        "rank": k,
        "reachable": True,
        "store": ARM,
        "image": facts(digest),
        "tools": TOOLS,
    }
    base.update(kw)
    return NodeState(**base)  # type: ignore[arg-type]


def source(
    arch: str = "arm64", kind: SourceKind = SourceKind.controller, node: str | None = None
) -> SourceImage:
    return SourceImage(
        source=Source(kind=kind, node=node),
        reference="img:1",
        identity=ImageIdentity(config_digest=WANT),
        os="linux",
        architecture=arch,
        size_bytes=300 << 20,
        has_zstd=True,
    )


def test_nodes_holding_the_image_are_skipped_and_the_rest_sent_in_rank_order() -> None:
    states = [
        state(0, WANT),
        state(1),
        state(2, OTHER),  # a different image under the same name: replaced
        state(3, WANT),
        state(4, reachable=False, error="node spark-4: connection refused", image=None),
        state(5),
    ]
    plan = plan_push("img:1", source(), states)
    assert plan.skipped == ("spark-0", "spark-3")
    assert plan.targets == ("spark-1", "spark-2", "spark-5")
    assert [p.node for p in plan.unreachable] == ["spark-4"]
    assert plan.compression is Compression.zstd


def test_an_x86_image_is_refused_for_arm64_nodes_before_any_byte_moves() -> None:
    with pytest.raises(ImageError) as caught:
        plan_push("img:1", source(arch="amd64"), [state(0), state(1)])
    msg = str(caught.value)
    assert "linux/amd64" in msg and "spark-0 (linux/arm64)" in msg and "nothing was sent" in msg


def test_an_image_of_another_platform_than_the_recipe_is_refused() -> None:
    with pytest.raises(ImageError, match="the recipe runs linux/arm64"):
        plan_push("img:1", source(arch="amd64"), [], platform="linux/arm64")
    plan = plan_push("img:1", source(), [state(0)], platform="linux/arm64/v8")
    assert plan.targets == ("spark-0",)


def test_a_source_that_is_not_the_recipes_digest_is_refused() -> None:
    with pytest.raises(ImageError, match="not the recipe's digest"):
        plan_push("img:1", source(), [state(0)], expected_digest=OTHER)
    assert plan_push("img:1", source(), [state(0)], expected_digest=WANT).targets == ("spark-0",)


def test_a_node_source_is_skipped_as_the_source() -> None:
    plan = plan_push(
        "img:1", source(kind=SourceKind.node, node="spark-0"), [state(0, WANT), state(1)]
    )
    assert plan.skipped == ("spark-0",) and plan.targets == ("spark-1",)


def test_zstd_is_used_when_every_end_has_it_and_said_so_when_not() -> None:
    assert decide_compression("auto", source_has_zstd=True, nodes_without_zstd=[])[0] is (
        Compression.zstd
    )
    mode, why = decide_compression("auto", source_has_zstd=True, nodes_without_zstd=["spark-2"])
    assert mode is Compression.none and "spark-2" in why
    with pytest.raises(ImageError, match="zstd is missing on the source"):
        decide_compression("zstd", source_has_zstd=False, nodes_without_zstd=[])
    assert decide_compression("none", source_has_zstd=True, nodes_without_zstd=[])[0] is (
        Compression.none
    )


def test_compression_pays_only_when_the_sample_shrinks() -> None:
    assert compression_pays(16 << 20, 6 << 20)[0]
    pays, why = compression_pays(16 << 20, 15 << 20)
    assert not pays and "1.07x" in why


def test_the_chain_runs_when_every_hop_works_else_a_fanout_that_says_why() -> None:
    assert choose_mode("auto", local=False, broken_hops=[])[0] is Mode.chain
    mode, why = choose_mode(
        "auto", local=False, broken_hops=[("spark-1", "spark-2", "Permission denied (publickey).")]
    )
    assert mode is Mode.fanout and "spark-1 cannot reach spark-2" in why and "publickey" in why
    with pytest.raises(ImageError, match="--mode chain"):
        choose_mode("chain", local=False, broken_hops=[("a", "b", "x")])
    assert choose_mode("auto", local=True, broken_hops=[])[0] is Mode.fanout


# -- judging what the chain said ---------------------------------------------------------------

ORDER = [f"spark-{k}" for k in range(8)]


def log_of(lines: list[str], **kw: object) -> RoundLog:
    log = RoundLog(**kw)  # type: ignore[arg-type]
    for i, line in enumerate(lines):
        ev = parse_chain_line(line)
        assert ev is not None, line
        log.events.append((float(i), ev))
    return log


def clean(k: int, nxt: int | None, size: int = 1000) -> list[str]:
    lines = [
        f"@@cluster-image start spark-{k} 100{k}",
        f"@@cluster-image progress spark-{k} {size // 2}",
        f"@@cluster-image loadout spark-{k} Loaded image: img:1",
        f"@@cluster-image load spark-{k} 0 0",
        f"@@cluster-image recv spark-{k} {size}",
    ]
    if nxt is not None:
        lines.append(f"@@cluster-image hop spark-{k} spark-{nxt} 0")
    return [*lines, f"@@cluster-image end spark-{k}"]


def sent(size: int = 1000) -> str:
    return f"@@cluster-image sent controller {size} {size * 3}"


def test_a_protocol_line_parses_and_anything_else_is_ignored() -> None:
    ev = parse_chain_line("@@cluster-image loadout spark-1 Loaded image: img:1")
    assert ev == ChainEvent(
        "loadout", "spark-1", ("Loaded", "image:", "img:1"), "Loaded image: img:1"
    )
    assert parse_chain_line("Loaded image: img:1") is None


def test_a_clean_chain_loads_every_node() -> None:
    lines = [line for k in range(8) for line in clean(k, k + 1 if k < 7 else None)]
    outcomes = judge_round(ORDER, log_of([*lines, sent()]), upstream_label="tarball x")
    assert [o.status for o in outcomes] == [HopStatus.loaded] * 8
    assert all(o.ended and o.received == 1000 for o in outcomes)


def test_a_cut_hop_names_the_far_node_with_the_senders_evidence_and_starves_the_rest() -> None:
    lines = [line for k in range(3) for line in clean(k, k + 1)]
    lines += [
        "@@cluster-image start spark-3 1003",
        "@@cluster-image start spark-4 1004",
        "@@cluster-image start spark-5 1005",
        "@@cluster-image progress spark-5 200",
        "@@cluster-image loadout spark-3 Loaded image: img:1",
        "@@cluster-image load spark-3 0 0",
        "@@cluster-image recv spark-3 1000",
        "@@cluster-image hoperr spark-3 Timeout, server 198.18.0.14 not responding.",
        "@@cluster-image hop spark-3 spark-4 255",
        "@@cluster-image end spark-3",
        sent(),
    ]
    outcomes = {o.node: o for o in judge_round(ORDER, log_of(lines), upstream_label="x")}
    assert all(outcomes[f"spark-{k}"].status is HopStatus.loaded for k in range(4))
    four = outcomes["spark-4"]
    assert four.status is HopStatus.failed
    assert four.evidence == (
        "ssh from spark-3 to spark-4 failed (exit 255): Timeout, server 198.18.0.14 not responding."
    )
    for k in (5, 6, 7):
        assert outcomes[f"spark-{k}"].status is HopStatus.starved
        assert "spark-4" in outcomes[f"spark-{k}"].evidence
        assert not outcomes[f"spark-{k}"].ended


def test_error_unpacking_image_is_a_failure_even_when_docker_load_exits_0() -> None:
    lines = [line for k in range(8) for line in clean(k, k + 1 if k < 7 else None)]
    i = lines.index("@@cluster-image load spark-2 0 0")
    lines.insert(
        i, "@@cluster-image loadout spark-2 Error unpacking image img:1: failed to extract layer"
    )
    outcomes = judge_round(ORDER, log_of([*lines, sent()]), upstream_label="x")
    assert outcomes[2].status is HopStatus.failed
    assert "Error unpacking image" in outcomes[2].evidence and "(exit 0)" in outcomes[2].evidence
    assert [o.status for o in outcomes].count(HopStatus.loaded) == 7


def test_a_node_whose_own_load_fails_does_not_starve_the_nodes_after_it() -> None:
    lines = [line for k in range(8) for line in clean(k, k + 1 if k < 7 else None)]
    lines = [
        line.replace("load spark-1 0 0", "load spark-1 1 0").replace(
            "loadout spark-1 Loaded image: img:1",
            "loadout spark-1 write /var/lib/docker/tmp: no space left on device",
        )
        for line in lines
    ]
    outcomes = judge_round(ORDER, log_of([*lines, sent()]), upstream_label="x")
    assert outcomes[1].status is HopStatus.failed and "no space left" in outcomes[1].evidence
    assert all(o.status is HopStatus.loaded for o in outcomes[2:])


def test_a_first_hop_that_cannot_connect_fails_node_0_and_starves_everyone_else() -> None:
    log = log_of([sent(0)])
    log.first_hop_rc["spark-0"] = 255
    log.first_hop_stderr["spark-0"] = "ssh: connect to host 10.0.0.10 port 22: Connection refused\n"
    outcomes = judge_round(ORDER, log, upstream_label="the controller's docker")
    assert outcomes[0].status is HopStatus.failed
    assert outcomes[0].evidence.endswith("Connection refused")
    assert {o.status for o in outcomes[1:]} == {HopStatus.starved}


def test_a_stalled_round_and_a_broken_source_are_said_as_such() -> None:
    stalled = judge_round(ORDER[:2], log_of([], stalled=True), upstream_label="x")
    assert {o.status for o in stalled} == {HopStatus.stalled}
    broken = judge_round(
        ORDER[:2], log_of([], source_error="docker save on spark-0 exited 1"), upstream_label="x"
    )
    assert {o.status for o in broken} == {HopStatus.failed}
    assert broken[1].evidence == "docker save on spark-0 exited 1"


def test_starved_nodes_are_resent_from_the_nearest_node_upstream_that_holds_the_image() -> None:
    verified = {"spark-0", "spark-1", "spark-2", "spark-3"}
    assert next_round(ORDER, verified, ["spark-5", "spark-6", "spark-7"]) == (
        "spark-3",
        ["spark-5", "spark-6", "spark-7"],
    )
    assert next_round(ORDER, {"spark-6"}, ["spark-1", "spark-2"]) == (
        "spark-6",
        ["spark-1", "spark-2"],
    )
    assert next_round(ORDER, set(), ["spark-1"]) == (None, ["spark-1"])
    assert next_round(ORDER, verified, []) == (None, [])


def test_known_hosts_keeps_only_lines_for_the_chains_nodes_hashed_or_not() -> None:
    salt = os.urandom(20)
    mac = hmac.new(salt, b"10.0.0.12", hashlib.sha1).digest()
    hashed = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(mac).decode()}"
    text = "\n".join(
        [
            "# comment",
            "10.0.0.10,spark-0 ssh-ed25519 AAAA0",
            "[10.0.0.11]:2222 ssh-ed25519 AAAA1",
            f"{hashed} ssh-ed25519 AAAA2",
            "@cert-authority 10.0.0.* ssh-ed25519 AAAACA",
            "github.com ssh-ed25519 AAAAGH",
        ]
    )
    kept = filter_known_hosts(text, [("10.0.0.10", 22), ("10.0.0.11", 2222), ("10.0.0.12", 22)])
    assert "AAAA0" in kept and "AAAA1" in kept and "AAAA2" in kept and "AAAACA" in kept
    assert "github" not in kept and "comment" not in kept


# -- the chain script, run locally --------------------------------------------------------------

FAKE_DOCKER = r"""#!/bin/sh
# A stand-in docker: `load` keeps its input in $FAKE_DIR/<node>.tar, `save` writes $FAKE_IMAGE.
case "$1" in
  load)
    cat > "$FAKE_DIR/$FAKE_NODE.tar"
    if [ -e "$FAKE_DIR/unpack-error-$FAKE_NODE" ]; then
      echo "Loaded image: img:1"; echo "Error unpacking image img:1: no space left on device"
    else
      echo "Loaded image: img:1"
    fi ;;
  save) cat "$FAKE_IMAGE" ;;
  *) echo "fake docker: $*" >&2; exit 1 ;;
esac
"""

# A stand-in ssh: run the remote command line through a shell, as sshd does, as node HOST.
FAKE_SSH = r"""#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    -o) case "$2" in ControlPath=*) echo "$2" >> "$FAKE_DIR/ssh.opts" ;; esac; shift 2 ;;
    -p|-l|-i|-E) shift 2 ;;
    -T) shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done
host=$1; shift
echo "$host" >> "$FAKE_DIR/ssh.log"
FAKE_NODE=$host exec sh -c "$*"
"""


@pytest.fixture
def fake_nodes(tmp_path: Path) -> Iterator[dict[str, str]]:
    if shutil.which("zstd") is None:
        pytest.skip("zstd is not installed here")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("docker", FAKE_DOCKER), ("ssh", FAKE_SSH)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    image = tmp_path / "image.tar"
    image.write_bytes(
        b"".join(
            Path(p).read_bytes()
            for p in sorted(Path("/usr/bin").glob("z*"))[:8]
            if Path(p).is_file()
        )
        * 2
    )
    # TMPDIR short, as on a node (/tmp): a hop's connection socket lives under it.
    work = Path(tempfile.mkdtemp(prefix="ctw", dir="/tmp"))
    (tmp_path / "work").symlink_to(work)
    yield {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_DIR": str(tmp_path),
        "FAKE_IMAGE": str(image),
        "TMPDIR": str(work),
        "HOME": str(tmp_path),
    }
    shutil.rmtree(work, ignore_errors=True)


def quint(name: str) -> list[str]:
    return [name, "root", name, "22", "-"]


def run_chain(
    env: dict[str, str], mode: str, tag: str, names: list[str], payload: bytes | None, kh: str = ""
) -> list[ChainEvent]:
    script = chain_script()
    argv = ["sh", "-c", script, "cluster-image", script, mode, tag, "zstd", "5", "1", "3", kh]
    argv += ["img:1", *[w for n in names for w in quint(n)]]
    proc = subprocess.run(
        argv,
        input=payload,
        capture_output=True,
        timeout=60,
        env={**os.environ, **env, "FAKE_NODE": names[0]},
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return [e for e in map(parse_chain_line, proc.stdout.decode().splitlines()) if e is not None]


def test_the_chain_script_feeds_every_nodes_load_and_forwards_the_same_bytes(
    fake_nodes: dict[str, str], tmp_path: Path
) -> None:
    raw = Path(fake_nodes["FAKE_IMAGE"]).read_bytes()
    wire = subprocess.run(["zstd", "-1", "-c"], input=raw, capture_output=True, check=True).stdout
    names = ["n1", "n2", "n3"]
    kh = "n2 ssh-ed25519 AAAA 'quoted' $(touch pwned) `touch pwned2`"
    events = run_chain(fake_nodes, "chain", "t1-r1", names, wire, kh=kh)
    for n in names:
        assert (tmp_path / f"{n}.tar").read_bytes() == raw
    log = RoundLog(events=[(0.0, e) for e in events])
    log.events.append((0.0, ChainEvent("sent", "controller", (str(len(wire)),), "")))
    outcomes = judge_round(names, log, upstream_label="test")
    assert [o.status for o in outcomes] == [HopStatus.loaded] * 3
    assert [o.received for o in outcomes] == [len(wire)] * 3
    assert (tmp_path / "ssh.log").read_text().split() == ["n2", "n3"]
    # Each hop is a session on the connection its round's hop check left up (named after the
    # round, not the push), in a folder of its own that the node removes when its hop ends.
    work = fake_nodes["TMPDIR"]
    assert (tmp_path / "ssh.opts").read_text().split() == [
        f"ControlPath={work}/cluster-image-cm.t1-r1.n1.n2/s",
        f"ControlPath={work}/cluster-image-cm.t1-r1.n2.n3/s",
    ]
    assert not list(tmp_path.rglob("pwned*"))  # every value stayed a value
    assert list((tmp_path / "work").iterdir()) == []  # work folders (and hop folders) removed


def test_the_chain_script_reports_an_unpack_error_and_keeps_forwarding(
    fake_nodes: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "unpack-error-n2").touch()
    raw = Path(fake_nodes["FAKE_IMAGE"]).read_bytes()
    wire = subprocess.run(["zstd", "-1", "-c"], input=raw, capture_output=True, check=True).stdout
    events = run_chain(fake_nodes, "chain", "t2-r1", ["n1", "n2", "n3"], wire)
    outcomes = judge_round(
        ["n1", "n2", "n3"], RoundLog(events=[(0.0, e) for e in events]), upstream_label="t"
    )
    assert [o.status for o in outcomes] == [HopStatus.loaded, HopStatus.failed, HopStatus.loaded]
    assert "Error unpacking image" in outcomes[1].evidence


def test_the_source_mode_saves_compresses_and_sends_down_the_chain(
    fake_nodes: dict[str, str], tmp_path: Path
) -> None:
    events = run_chain(fake_nodes, "source", "t3-r2", ["src", "n5", "n6"], None)
    raw = Path(fake_nodes["FAKE_IMAGE"]).read_bytes()
    assert (tmp_path / "n5.tar").read_bytes() == raw and (tmp_path / "n6.tar").read_bytes() == raw
    by = {(e.event, e.node): e for e in events}
    assert by[("save", "src")].fields == ("0",)
    wire, sent_raw = (int(x) for x in by[("sent", "src")].fields)
    assert sent_raw == len(raw) and 0 < wire < len(raw)
    assert by[("hop", "src")].fields == ("n5", "0")


def test_cleanup_stops_a_chain_that_waits_forever_by_its_process_group(
    fake_nodes: dict[str, str],
) -> None:
    script = chain_script()
    argv = ["sh", "-c", script, "cluster-image", script, "chain", "t4-r1", "none", "5", "1", "3"]
    argv += ["", "img:1", *quint("n1")]
    env = {**os.environ, **fake_nodes, "FAKE_NODE": "n1"}
    hung = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True
    )
    try:
        work = Path(fake_nodes["TMPDIR"]) / "cluster-image.t4-r1.n1"
        deadline = time.monotonic() + 10
        while not (work / "pgid").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        done = subprocess.run(
            ["sh", "-c", script, "cluster-image", script, "cleanup", "t4-r1", "n1"],
            env=env,
            capture_output=True,
            timeout=30,
        )
        assert done.returncode == 0 and b"stopped process group" in done.stdout
        assert hung.wait(timeout=10) != 0
        assert not work.exists()
    finally:
        if hung.poll() is None:
            hung.kill()
        hung.communicate()


def test_a_work_folder_left_by_a_killed_push_to_this_node_is_swept_by_the_next(
    fake_nodes: dict[str, str], tmp_path: Path
) -> None:
    work = Path(fake_nodes["TMPDIR"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = work / "cluster-image.old1-r1.n1"
    stale.mkdir()
    (stale / "pgid").write_text(f"{dead.pid}\n")
    alive = work / "cluster-image.old2-r1.n1"
    alive.mkdir()
    (alive / "pgid").write_text(f"{os.getpid()}\n")
    other = work / "cluster-image.old3-r1.n2"
    other.mkdir()
    raw = Path(fake_nodes["FAKE_IMAGE"]).read_bytes()
    wire = subprocess.run(["zstd", "-1", "-c"], input=raw, capture_output=True, check=True).stdout
    run_chain(fake_nodes, "chain", "t5-r1", ["n1"], wire)
    assert not stale.exists()  # its process group is gone
    assert alive.exists() and other.exists()  # still running / another node's


def test_the_chain_script_is_static_text_that_dash_accepts() -> None:
    script = chain_script()
    assert subprocess.run(["sh", "-n", "-c", script], capture_output=True).returncode == 0
    assert "{" + "}" not in script and "%(" not in script  # nothing to format into it


def test_byte_times_are_the_first_byte_and_the_first_report_of_the_final_count() -> None:
    from orchestrator.images.rounds import byte_times

    log = RoundLog()
    for at, line in (
        (1.0, "@@cluster-image start n1 77"),
        (1.2, "@@cluster-image progress n1 0"),
        (2.3, "@@cluster-image progress n1 4096"),
        (3.1, "@@cluster-image progress n2 100"),
        (3.4, "@@cluster-image progress n1 9000"),
        (9.0, "@@cluster-image recv n1 9000"),
    ):
        ev = parse_chain_line(line)
        assert ev is not None
        log.events.append((at, ev))
    assert byte_times(log, "n1") == (2.3, 3.4)
    assert byte_times(log, "n2") == (3.1, 3.1)
    assert byte_times(log, "n3") == (None, None)
