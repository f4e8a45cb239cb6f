"""The layer plan, the held-layers probe's parser and the layer filter (issue 30)."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

from orchestrator.images.layer_filter import filter_tar, main
from orchestrator.images.layers import failed_partial, plan_layers
from orchestrator.probes.base import ProbeParseError
from orchestrator.probes.image import (
    HeldLayers,
    ImageStoreKind,
    chain_ids,
    parse_image_layers,
)

# Captured on Docker 20.10.24 (overlay2): two diff ids and the chain id the daemon filed the
# second layer under (/var/lib/docker/image/overlay2/layerdb/sha256/<chain id>).
BASE = "sha256:c9510b36cb171acccccce851465bb068a3bf8a0191dfec75f997eb08a1e23545"
TOP = "sha256:d1270150396e6edb734718f2b98893b9cb3ddb8a31f8539772f9b40f65c4d1ba"
TOP_CHAIN = "sha256:c5393c8e821363336ad1f33cff5fb44bbc5188e87355cb243748b7e7c0302b52"
# What that daemon's `docker load` said about a partial archive lacking a layer it did not hold.
LOAD_ERROR = (
    "open /var/lib/docker/tmp/docker-import-1198342937/"
    "e5102afc04e53b6f6120b8469270a6b3c0239f6f88123d4ea516a9d4fbf698be/layer.tar: "
    "no such file or directory"
)
GRAPH = ImageStoreKind.graphdriver


def test_chain_ids_are_dockers():
    assert chain_ids([BASE, TOP]) == [BASE, TOP_CHAIN]
    assert chain_ids([]) == []


def test_held_layers_parses_every_image_and_ignores_empty_lines():
    held = parse_image_layers(f"{json.dumps([BASE, TOP])}\n\n{json.dumps([BASE])}\nnull\n")
    assert held.images == 2
    assert held.chains == {BASE, TOP_CHAIN}
    with pytest.raises(ProbeParseError):
        parse_image_layers('{"not": "a list"}\n')


def _held(*layer_lists: list[str]) -> HeldLayers:
    return parse_image_layers("\n".join(json.dumps(x) for x in layer_lists))


def test_every_target_holds_the_base_so_only_the_top_layer_travels():
    new_top = "sha256:" + "a" * 64
    held = {n: _held([BASE, TOP]) for n in ("n0", "n1")}
    plan = plan_layers([BASE, new_top], ["n0", "n1"], held, dict.fromkeys(held, GRAPH))
    assert plan.drop == (BASE,)
    assert [(n.node, n.missing, n.partial) for n in plan.nodes] == [
        ("n0", (1,), True),
        ("n1", (1,), True),
    ]
    assert plan.summary() == "1 of 2 layers: the rest is on every target already"


def test_a_layer_is_held_only_on_top_of_the_same_layers_below_it():
    # n0 holds TOP, but on another base: the chain differs, so TOP is missing there.
    other = "sha256:" + "b" * 64
    plan = plan_layers([BASE, TOP], ["n0"], {"n0": _held([other, TOP], [BASE])}, {"n0": GRAPH})
    assert plan.nodes[0].missing == (1,)
    assert plan.drop == (BASE,)


def test_the_stream_carries_the_union_of_what_the_targets_lack():
    held = {"n0": _held([BASE]), "n1": _held([])}
    plan = plan_layers([BASE, TOP], ["n0", "n1"], held, dict.fromkeys(held, GRAPH))
    assert plan.whole and plan.drop == ()
    assert plan.missing_of("n1") is not None and plan.missing_of("n1").missing == (0, 1)


@pytest.mark.parametrize(
    ("store", "held", "why"),
    [
        (ImageStoreKind.containerd, _held([BASE]), "containerd image store"),
        (ImageStoreKind.unknown, _held([BASE]), "unknown"),
        (GRAPH, None, "could not be listed"),
    ],
)
def test_a_node_that_cannot_take_a_partial_archive_gets_the_whole_image_and_says_why(
    store, held, why
):
    plan = plan_layers(
        [BASE, TOP], ["n0", "n1"], {"n0": held, "n1": _held([BASE])}, {"n0": store, "n1": GRAPH}
    )
    n0 = plan.missing_of("n0")
    assert n0 is not None and not n0.partial and n0.missing == (0, 1)
    assert n0.why_whole is not None and why in n0.why_whole
    assert plan.whole and why in plan.summary()


def test_a_node_whose_partial_load_failed_gets_the_whole_image_next_time():
    plan = plan_layers([BASE, TOP], ["n0"], {"n0": _held([BASE])}, {"n0": GRAPH}, whole_for=["n0"])
    assert plan.whole and "partial load failed" in (plan.nodes[0].why_whole or "")


def test_a_failed_partial_load_is_recognised_by_dockers_own_words():
    assert failed_partial(f"docker load exited 1: {LOAD_ERROR}")
    assert failed_partial(
        "docker load exited 1: open /x/blobs/sha256/ab: no such file or directory"
    )
    assert not failed_partial("docker load exited 1: write /x: no space left on device")


# -- the filter -------------------------------------------------------------------------------


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _legacy_archive(layers: list[bytes]) -> bytes:
    """A `docker save` of Docker <= 24: <v1 id>/layer.tar (one a symlink), config, manifest."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        names = []
        for i, data in enumerate(layers):
            v1 = hashlib.sha256(f"v1-{i}".encode()).hexdigest()
            _member(tar, f"{v1}/VERSION", b"1.0")
            _member(tar, f"{v1}/layer.tar", data)
            names.append(f"{v1}/layer.tar")
        link = tarfile.TarInfo(hashlib.sha256(b"v1-dup").hexdigest() + "/layer.tar")
        link.type = tarfile.SYMTYPE
        link.linkname = "../" + names[0]
        tar.addfile(link)
        _member(tar, "cfg.json", b"{}")
        _member(tar, "manifest.json", json.dumps([{"Layers": names}]).encode())
    return buf.getvalue()


def _names(data: bytes) -> dict[str, bytes | None]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        out: dict[str, bytes | None] = {}
        for m in tar:
            f = tar.extractfile(m) if m.isfile() else None
            out[m.name] = f.read() if f else None
        return out


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_the_filter_drops_legacy_layers_by_their_content_and_keeps_the_rest_byte_for_byte():
    a, b = b"A" * 70_000, b"B" * 1000
    out = io.BytesIO()
    result = filter_tar(io.BytesIO(_legacy_archive([a, b])), out, {_sha(a)})
    got = _names(out.getvalue())
    assert [v for k, v in got.items() if k.endswith("/layer.tar") and v is not None] == [b]
    assert "manifest.json" in got and got["cfg.json"] == b"{}"
    assert sum(1 for k in got if k.endswith("VERSION")) == 2  # only the layer files go
    assert result == {"kept": [(_sha(b), len(b))], "dropped": [(_sha(a), len(a))]}


def test_the_filter_drops_oci_blobs_by_name():
    a, b = b"layer-a", b"layer-b"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for data in (a, b):
            _member(tar, "blobs/sha256/" + hashlib.sha256(data).hexdigest(), data)
        _member(tar, "index.json", b"{}")
    out = io.BytesIO()
    result = filter_tar(io.BytesIO(buf.getvalue()), out, {_sha(b)})
    got = _names(out.getvalue())
    assert set(got) == {"blobs/sha256/" + hashlib.sha256(a).hexdigest(), "index.json"}
    assert result["dropped"] == [(_sha(b), len(b))]


def test_the_filter_process_wraps_its_producer_and_passes_on_its_exit_status(
    tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
):
    a, b = b"A" * 5000, b"B" * 5000
    archive = tmp_path / "save.tar"
    archive.write_bytes(_legacy_archive([a, b]))
    report = tmp_path / "report.json"
    assert main(["--report", str(report), "--drop", _sha(b), "--", "cat", str(archive)]) == 0
    got = _names(capfdbinary.readouterr().out)
    assert [v for k, v in got.items() if k.endswith("layer.tar") and v] == [a]
    assert json.loads(report.read_text())["dropped"] == [[_sha(b), len(b)]]
    failing = [sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"]
    assert main(["--drop", _sha(b), "--", *failing]) == 3
    assert b"boom" in capfdbinary.readouterr().err


# -- image status ------------------------------------------------------------------------------


def test_layer_sizes_come_from_history_matched_to_the_layers():
    from orchestrator.probes.image import parse_layer_sizes

    # newest first; an empty (metadata-only) entry between the two layers
    assert parse_layer_sizes("300\n0\n100\n", 2) == (100, 300)
    assert parse_layer_sizes("300\n0\n100\n", 3) == (100, 0, 300)
    assert parse_layer_sizes("300\n0\n0\n", 2) is None  # cannot tell which 0 is a layer


def test_status_rows_say_present_missing_layers_and_bytes_per_node():
    from orchestrator.images.model import NodeState, Source, SourceImage
    from orchestrator.images.status import status_rows
    from orchestrator.probes.image import ImageFacts, ImageIdentity, ImageStore

    new_top = "sha256:" + "c" * 64
    src = SourceImage(
        source=Source(),
        reference="img:2",
        identity=ImageIdentity(config_digest="sha256:" + "d" * 64),
        layers=(BASE, new_top),
        layer_sizes=(1000, 200),
    )
    store = ImageStore(reachable=True, driver="overlay2", kind=GRAPH)
    holder = ImageFacts(reference="img:2", present=True, id="sha256:" + "d" * 64)
    states = [
        NodeState(node="n0", rank=0, reachable=True, store=store, held=_held([BASE])),
        NodeState(
            node="n1",
            rank=1,
            reachable=True,
            store=store,
            image=holder,
            held=_held([BASE, new_top]),
        ),
        NodeState(
            node="n2",
            rank=2,
            reachable=True,
            held=_held([BASE]),
            store=ImageStore(reachable=True, driver="overlayfs", kind=ImageStoreKind.containerd),
        ),
        NodeState(node="n3", rank=3, reachable=False, error="ssh: timeout"),
    ]
    r = {x.node: x for x in status_rows(src, states)}
    assert (r["n0"].present, r["n0"].layers_missing, r["n0"].bytes_missing) == (False, 1, 200)
    assert (r["n1"].present, r["n1"].layers_missing, r["n1"].config_digest) == (
        True,
        0,
        "sha256:" + "d" * 64,
    )
    assert r["n2"].layers_missing == 2 and r["n2"].bytes_missing == 1200
    assert r["n2"].partial is False and "containerd" in (r["n2"].note or "")
    assert not r["n3"].reachable and r["n3"].error == "ssh: timeout"


def test_the_push_plan_carries_the_layer_plan_of_its_targets_only():
    from orchestrator.images.model import NodeState, Source, SourceImage
    from orchestrator.images.plan import plan_push
    from orchestrator.probes.image import ImageFacts, ImageIdentity, ImageStore

    want = "sha256:" + "e" * 64
    new_top = "sha256:" + "f" * 64
    src = SourceImage(
        source=Source(),
        reference="img:2",
        identity=ImageIdentity(config_digest=want),
        os="linux",
        architecture="arm64",
        layers=(BASE, new_top),
    )
    store = ImageStore(reachable=True, driver="overlay2", kind=GRAPH, architecture="arm64")
    holder = ImageFacts(reference="img:2", present=True, id=want, os="linux", architecture="arm64")
    states = [
        NodeState(node="n0", rank=0, reachable=True, store=store, held=_held([BASE])),
        NodeState(
            node="n1",
            rank=1,
            reachable=True,
            store=store,
            image=holder,
            held=_held([BASE, new_top]),
        ),
        NodeState(node="n2", rank=2, reachable=True, store=store, held=_held([BASE, TOP])),
    ]
    plan = plan_push("img:2", src, states)
    assert plan.targets == ("n0", "n2") and plan.skipped == ("n1",)
    assert plan.layers is not None and plan.layers.drop == (BASE,)
    assert [n.node for n in plan.layers.nodes] == ["n0", "n2"]
