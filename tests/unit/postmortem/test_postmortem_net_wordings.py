"""Image, rendezvous and watchdog wordings of the runtimes' and engines' own sources and of public
pastes (issue 15): each real line names its signature, a one-line log of it gets the category
`cluster postmortem --logs` would report, and the look-alikes healthy boots print stay unnamed.

The lines are in `tests/fixtures/engine-lines/postmortem-net-image-watchdog.yaml`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.postmortem import postmortem_logs
from orchestrator.postmortem.signatures import load_signatures
from orchestrator.postmortem.tidy import tidy_line
from tests.engine_lines import by_id

SIGS = load_signatures()

# fixture id -> (signature it must name, category of a log holding only that line)
NAMED = {
    "runc-exec-entrypoint-no-such-file": (
        "container-program-or-interpreter-missing",
        "image-unpack-race",
    ),
    "runc-exec-entrypoint-no-such-file-compose": (
        "container-program-or-interpreter-missing",
        "image-unpack-race",
    ),
    "tini-exec-entrypoint-failed-no-such-file": (
        "container-program-or-interpreter-missing",
        "image-unpack-race",
    ),
    "runc-standard-init-exec-no-such-file-colon": (
        "container-program-or-interpreter-missing",
        "image-unpack-race",
    ),
    "runc-standard-init-exec-no-such-file-quoted": (
        "container-program-or-interpreter-missing",
        "image-unpack-race",
    ),
    "runc-exec-entrypoint-permission-denied": (
        "container-program-or-interpreter-missing",
        "image-unpack-race",
    ),
    "runc-exec-entrypoint-permission-denied-no-colon": (
        "container-program-or-interpreter-missing",
        "image-unpack-race",
    ),
    "runc-container-linux-exec-permission-denied": (
        "container-program-or-interpreter-missing",
        "image-unpack-race",
    ),
    "qemu-x86-64-loader-missing": (
        "amd64-program-under-qemu-without-its-loader",
        "image-unpack-race",
    ),
    "qemu-x86-64-static-loader-missing": (
        "amd64-program-under-qemu-without-its-loader",
        "image-unpack-race",
    ),
    "ctr-import-content-digest-not-found": (
        "containerd-layer-apply-or-rootfs-mount-failed",
        "image-unpack-race",
    ),
    "nerdctl-load-content-digest-not-found": (
        "containerd-layer-apply-or-rootfs-mount-failed",
        "image-unpack-race",
    ),
    "dockerd-layer-does-not-exist": ("image-store-inconsistent", "image-unpack-race"),
    "dockerd-no-such-image-tag": ("image-pull-refused-by-registry", "image-unpack-race"),
    "docker-load-import-dir-no-such-file": ("docker-register-layer-failed", "image-unpack-race"),
    "gloo-pair-connect-refused": ("gloo-pair-connect-failed", "rendezvous-network"),
    "gloo-enforce-so-error-connection-refused": ("gloo-pair-connect-failed", "rendezvous-network"),
    "nccl-socket-start-connect-exceeded-retries-format": (
        "nccl-peer-connection-failed",
        "rendezvous-network",
    ),
    "nccl-socket-poll-connect-exceeded-timeouts-format": (
        "nccl-peer-connection-failed",
        "rendezvous-network",
    ),
    "nccl-os-socket-poll-connect-failed-format": (
        "nccl-peer-connection-failed",
        "rendezvous-network",
    ),
    "nccl-oob-no-device-found-matching-format": ("nccl-no-socket-interface", "rendezvous-network"),
    "ray-gcs-connect-timeout-worker": ("ray-gcs-unreachable", "rendezvous-network"),
    "ray-gcs-cluster-id-timed-out": ("ray-gcs-unreachable", "rendezvous-network"),
    "ray-gcs-connect-timeout-empty-address": ("ray-gcs-unreachable", "rendezvous-network"),
    "ray-gcs-lost-within-60-seconds": ("ray-gcs-unreachable", "rendezvous-network"),
    "torch-tcpstore-use-libuv-without-libuv": (
        "torch-store-libuv-backend-missing",
        "rendezvous-network",
    ),
    "vllm-rpc-call-execute-model-timed-out": ("vllm-engine-iteration-timeout", "watchdog-timeout"),
    "vllm-new-engine-core-start-timeout-fragment": (
        "vllm-engine-startup-timeout",
        "watchdog-timeout",
    ),
    "torch-nccl-failed-collective-stack-not-found": (
        "torch-nccl-watchdog-debug-dump",
        "watchdog-timeout",
    ),
    "torch-nccl-preparing-to-dump-debug-info": (
        "torch-nccl-watchdog-debug-dump",
        "watchdog-timeout",
    ),
    "torch-nccl-first-pg-to-signal-dumping-fragment": (
        "torch-nccl-watchdog-debug-dump",
        "watchdog-timeout",
    ),
    "torch-nccl-observed-dump-signal-fragment": (
        "torch-nccl-watchdog-debug-dump",
        "watchdog-timeout",
    ),
    "docker-getimageblob-no-such-file": ("docker-register-layer-failed", "image-unpack-race"),
    "dockerd-overlay2-readlink-no-such-file": ("image-store-inconsistent", "image-unpack-race"),
    "dockerd-overlay2-open-no-such-file": ("image-store-inconsistent", "image-unpack-race"),
    "balena-imagedb-content-no-such-file": ("image-store-inconsistent", "image-unpack-race"),
    "nccl-ib-async-event-port-error": ("transport-failed-under-a-collective", "rendezvous-network"),
    "nccl-ib-async-event-local-catastrophic": (
        "transport-failed-under-a-collective",
        "rendezvous-network",
    ),
    "nccl-ib-async-event-wq-error-autolinked": (
        "transport-failed-under-a-collective",
        "rendezvous-network",
    ),
    "podman-no-image-in-manifest-list-arm64": (
        "image-has-no-build-for-this-platform",
        "image-unpack-race",
    ),
    "crio-no-image-in-manifest-list-crictl": (
        "image-has-no-build-for-this-platform",
        "image-unpack-race",
    ),
    "podman-no-image-in-image-index-amd64": (
        "image-has-no-build-for-this-platform",
        "image-unpack-race",
    ),
    "containerd-ingest-no-space-left": ("docker-register-layer-failed", "image-unpack-race"),
    "podman-writing-blob-no-space": ("docker-register-layer-failed", "image-unpack-race"),
    "torch-nccl-unique-id-store-socket-timeout": (
        "torch-nccl-unique-id-not-received",
        "rendezvous-network",
    ),
    "torch-nccl-unique-id-store-wait-timeout": (
        "torch-nccl-unique-id-not-received",
        "rendezvous-network",
    ),
    "torch-tcpstore-connect-timed-out-old": ("torch-store-connect-timeout", "rendezvous-network"),
    "nccl-invalid-comm-id-format": ("nccl-bootstrap-address-unusable", "rendezvous-network"),
    "nccl-getaddrinfo-failed-format": ("nccl-bootstrap-address-unusable", "rendezvous-network"),
    "nccl-no-valid-ipv4-pair-format": ("nccl-bootstrap-address-unusable", "rendezvous-network"),
    "torch-nccl-global-timeout-from-another-rank-fragment": (
        "torch-nccl-watchdog-debug-dump",
        "watchdog-timeout",
    ),
    "nccl-ib-async-fatal-event-format": (
        "transport-failed-under-a-collective",
        "rendezvous-network",
    ),
}


@pytest.mark.parametrize(("entry_id", "expected"), sorted(NAMED.items()))
def test_each_line_names_its_signature_and_category(
    entry_id: str, expected: tuple[str, str], tmp_path: Path
) -> None:
    sig_id, category = expected
    text = by_id(entry_id).text
    assert SIGS[sig_id] in SIGS.match_text(text), text
    log = tmp_path / "excerpt.log"
    log.write_text(text + "\n", encoding="utf-8")
    assert postmortem_logs([log]).category == category, text


def test_a_paste_with_compose_columns_is_still_named(tmp_path: Path) -> None:
    """The compose column the tidy strips, as docker compose up prints it."""
    log = tmp_path / "excerpt.log"
    log.write_text(
        "Attaching to velociraptor\n"
        f"velociraptor  | {by_id('runc-exec-entrypoint-no-such-file-compose').text}\n"
        "velociraptor exited with code 0\n",
        encoding="utf-8",
    )
    assert postmortem_logs([log]).category == "image-unpack-race"


def test_a_specific_failure_outranks_the_watchdogs_dump_lines(tmp_path: Path) -> None:
    """The dump lines are weak: the watchdog's own timeout line on the rank is the evidence."""
    log = tmp_path / "excerpt.log"
    log.write_text(
        "[rank0]:[E607 21:52:16.253530467 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=3106, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600008 milliseconds before timing out.\n"
        f"{by_id('torch-nccl-failed-collective-stack-not-found').text}\n",
        encoding="utf-8",
    )
    report = postmortem_logs([log])
    assert report.category == "watchdog-timeout"
    assert report.root_cause is not None
    assert report.root_cause.signature == "nccl-watchdog-collective-timeout"


@pytest.mark.parametrize(
    "text",
    [
        # a traceback prints the raise's source line, the template, not the message
        '    raise TimeoutError(f"RPC call to {method} timed out.") from e',
        # docker pulls what it does not have: a notice, not a failure
        "Unable to find image 'vllm/vllm-openai:latest' locally",
        # the host's runtime hook missing is not the image's program missing
        "fork/exec /usr/bin/nvidia-container-runtime-hook: no such file or directory",
        # Ray and NCCL notices of healthy multi-node starts
        "2025-02-16 16:05:50,467 INFO worker.py:1636 -- Connecting to existing Ray cluster at "
        "address: 172.23.15.13:20000...",
        "node1:12:34 [0] NCCL INFO Bootstrap : Using enp1s0f1np1:10.0.0.1<0>",
        "[rank0]:[W socket.cpp:464] [c10d] The server socket on [::ffff:10.0.0.1]:25000 has "
        "timed out, will retry.",
        # the HCA's informational events
        "node1:1:2 [0] transport/net_ib.cc:101 NCCL WARN NET/IB : mlx5_0:1 Got async event : "
        "port active",
        "node1:1:2 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : client "
        "reregistration",
        # cAdvisor looking for a container's layer that is gone: monitoring noise, not the image
        "E0731 23:40:51.184440       7 manager.go:1106] Failed to create existing container: "
        "/docker/eeda77f2: failed to identify the read-write layer ID for container "
        '"eeda77f2". - open /rootfs/var/lib/docker/image/overlay2/layerdb/mounts/eeda77f2/'
        "mount-id: no such file or directory",
    ],
)
def test_healthy_lines_and_look_alikes_are_not_these_signatures(text: str) -> None:
    named = {c.sig.id for c in SIGS.match_text(text)}
    assert not named & {
        "container-exec-stat-no-such-file",
        "container-program-or-interpreter-missing",
        "image-pull-refused-by-registry",
        "gloo-pair-connect-failed",
        "ray-gcs-unreachable",
        "torch-store-libuv-backend-missing",
        "vllm-engine-iteration-timeout",
        "torch-nccl-watchdog-debug-dump",
        "nccl-peer-connection-failed",
        "transport-failed-under-a-collective",
        "image-store-inconsistent",
    }, named


@pytest.mark.parametrize(
    ("pasted", "tidied"),
    [
        (
            "node201:1:2 [0] transport/[net_ib.cc:101](http://net_ib.cc:101/) NCCL WARN NET/IB : x",
            "node201:1:2 [0] transport/net_ib.cc:101 NCCL WARN NET/IB : x",
        ),
        (
            "Got completion from peer [10.1.3.201](http://10.1.3.201/)<33057> with status=9",
            "Got completion from peer 10.1.3.201<33057> with status=9",
        ),
        (
            "[/opt/gloo/transport/tcp/[pair.cc:799](http://pair.cc:799)] connect [10.0.0.2]:1: x",
            "[/opt/gloo/transport/tcp/pair.cc:799] connect [10.0.0.2]:1: x",
        ),
        # a link the user wrote keeps its address
        ("see [the docs](https://docs.vllm.ai/)", "see [the docs](https://docs.vllm.ai/)"),
    ],
)
def test_the_tidy_takes_off_a_trackers_auto_links(pasted: str, tidied: str) -> None:
    assert tidy_line(pasted) == tidied
