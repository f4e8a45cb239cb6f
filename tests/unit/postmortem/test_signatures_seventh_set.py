"""The rules mined from the seventh unseen set (tests/fixtures/postmortem-seventh/, issue 29).

Each rests on a library's or server's own words (the engine-line corpus's lines, cited there by
URL): what the postmortem makes of them, through `postmortem_logs` (what
`cluster postmortem --logs FILE` calls), and the kernel wing's reading of the driver's
GPU-lost status.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.kernel.read import classify, parse_line, signature_of
from orchestrator.postmortem import postmortem_logs
from orchestrator.postmortem.model import Diagnosis
from tests.engine_lines import by_id


def _diagnose(tmp_path: Path, *lines: str) -> Diagnosis:
    path = tmp_path / "rank-0.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return postmortem_logs([path])


@pytest.mark.parametrize(
    ("line_id", "category"),
    [
        ("python-errno-28-no-space-left", "disk"),
        ("windows-os-error-112-disk-full", "disk"),
        ("docker-found-but-does-not-provide-platform", "image-unpack-race"),
        ("paddle-out-of-memory-error-on-gpu", "out-of-memory"),
        ("vllm-cpu-kv-cache-less-than-requested", "kv-cache-budget"),
        ("transformers-setup-does-not-support-bf16", "config-validator-refusal"),
    ],
)
def test_a_library_wording_names_its_category(tmp_path: Path, line_id: str, category: str) -> None:
    d = _diagnose(tmp_path, by_id(line_id).text)
    assert (d.category, d.outcome) == (category, "failed")


def test_a_full_disk_under_an_image_layer_is_not_called_the_disk(tmp_path: Path) -> None:
    """An image store's ENOSPC is the image that could not be stored (image.yaml's wordings);
    the generic disk-full rule stands aside for it."""
    d = _diagnose(
        tmp_path,
        "failed to register layer: Error processing tar file(exit status 1): write "
        "/usr/lib/x86_64-linux-gnu/libcudnn.so.8: [Errno 28] No space left on device",
    )
    assert d.category != "disk"


@pytest.mark.parametrize(
    "line_id",
    ["triton-started-http-service", "llama-server-json-http-server-listening"],
)
def test_a_servers_own_ready_line_is_ready(tmp_path: Path, line_id: str) -> None:
    assert _diagnose(tmp_path, by_id(line_id).text).category == "ready"


def test_comfyuis_gui_line_is_ready(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, "Starting server", by_id("comfyui-to-see-the-gui").text)
    assert d.category == "ready"


def test_the_drivers_gpu_lost_status_is_a_hardware_xid_79_in_the_kernel_wing() -> None:
    text = by_id("nvrm-gpu-lost-from-the-bus-assert").text
    ev = classify(parse_line(1, text, year=2025))
    assert ev is not None and (ev.family, ev.cause, ev.xid) == ("xid", True, 79)
    assert signature_of(ev) == "nvrm-xid"
