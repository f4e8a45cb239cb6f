"""Line tidying, the traceback fallback, and the no-signature policies (hang, NCCL-only, weak
evidence), each on the real line shapes they were built for."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from orchestrator.postmortem import postmortem_logs
from orchestrator.postmortem.calibration import Calibration
from orchestrator.postmortem.families import classify, exception_of
from orchestrator.postmortem.tidy import tidy_line, tidy_text

# the module (the package's `diagnose` attribute is the function of that name)
diagnose_mod = importlib.import_module("orchestrator.postmortem.diagnose")


@pytest.mark.parametrize(
    ("raw", "tidy"),
    [
        ("scalellm          | ./entrypoint.sh: line 28:     7 Killed", "./entrypoint.sh: line 28:     7 Killed"),
        ("#033[2m#033[33m(raylet)#033[0m node_manager.cc:3007: 2 Workers", "node_manager.cc:3007: 2 Workers"),
        ("\x1b[1;36m(APIServer pid=15)\x1b[0;0m INFO 08-27", "INFO 08-27"),
        ("(Worker_TP3 pid=1440) INFO x", "(Worker_TP3 pid=1440) INFO x"),
        # the blank where the tracker dropped the ESC byte goes with the code: same as above
        (" [36m(APIServer pid=15) [0;0m INFO", "INFO"),
        ("^[[0;31mERROR^[[0m boom", "ERROR boom"),
        ("> [10.0.104.20] eb8d8bd629e3: Error pulling image", "[10.0.104.20] eb8d8bd629e3: Error pulling image"),
        ("```The memory capacity is unbalanced.```", "The memory capacity is unbalanced."),
        ('"NCCL INFO Call to connect returned Connection refused, retrying "', "NCCL INFO Call to connect returned Connection refused, retrying "),
        ("│ INFO 03-21 20:19:24 [launcher.py:34] Route: /v1/models, Methods: GET     │", "INFO 03-21 20:19:24 [launcher.py:34] Route: /v1/models, Methods: GET"),
        ("(RayWorkerWrapper pid=2202490) ERROR 04-24 16:06:40 worker_base.py:157] x", "ERROR 04-24 16:06:40 worker_base.py:157] x"),
        # the rank prefixes stay: they say which rank printed the line
        ("(VllmWorker rank=3 pid=1) INFO x", "(VllmWorker rank=3 pid=1) INFO x"),
        ("[rank0]:[E ProcessGroupNCCL.cpp:1316] x", "[rank0]:[E ProcessGroupNCCL.cpp:1316] x"),
    ],
)  # fmt: skip
def test_a_pasted_lines_dressing_comes_off(raw: str, tidy: str) -> None:
    assert tidy_line(raw) == tidy


def test_hard_wraps_join_onto_the_first_line_and_the_line_count_stays() -> None:
    text = "\n".join(
        [
            "2 Workers (tasks / actors) killed due to mem",
            "ory pressure (OOM), 0 Workers crashed due t",
            "o other reasons at node (ID: abd406d415bd2b",
            "74a5), over the last time period.",
        ]
    )
    # two lines of one width make it the wrap width; 44 < WRAP_MIN, so widen the test lines
    wide = "\n".join(line.ljust(len(line)) for line in text.split("\n"))
    assert tidy_text(wide).count("\n") == wide.count("\n")
    wrapped = "\n".join(["x" * 70, "y" * 70, "tail", "[2025-01-01 00:00:00] next record"])
    out = tidy_text(wrapped).split("\n")
    assert out[0] == "x" * 70 + "y" * 70 + "tail" and out[1:3] == ["", ""]
    assert out[3] == "[2025-01-01 00:00:00] next record"


def test_log_records_of_one_length_are_not_taken_for_a_wrap() -> None:
    lines = [
        f"[2025-03-09 00:57:15 TP{k}] Watchdog timeout (self.watchdog_timeout=300)"
        for k in range(8)
    ]
    assert tidy_text("\n".join(lines)).split("\n") == lines


@pytest.mark.parametrize(
    ("line", "category", "confidence"),
    [
        ("torch.OutOfMemoryError: CUDA error: out of memory", "out-of-memory", "medium"),
        ("huggingface_hub.errors.GatedRepoError: 401 Client Error.", "tokenizer-config", "medium"),
        ("huggingface_hub.utils._http.OfflineModeIsEnabled: Cannot reach https://huggingface.co/x", "tokenizer-config", "medium"),
        ("AttributeError: 'Fp8MoEMethod' object has no attribute 'runner'", "moe-runner", "medium"),
        ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "unsupported-arch-kernel", "medium"),
        ("torch.distributed.DistNetworkError: Connection reset by peer", "rendezvous-network", "medium"),
        ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer", "rendezvous-network", "medium"),
        ("[rank11]: FileNotFoundError: No such file or directory: model-00001-of-00004.safetensors", "weights-files", "medium"),
        ("ValueError: Total number of attention heads (52) must be divisible by tensor parallel size (8).", "config-validator-refusal", "medium"),
        ('    raise ValueError(f"No supported config format found in {model}.")', "tokenizer-config", "medium"),
        ("TimeoutError: Timed out waiting for the engine to start", "watchdog-timeout", "low"),
        ("  what():  CUDA error: no kernel image is available for execution on the device", "unsupported-arch-kernel", "medium"),
        ("EntryNotFoundError                        Traceback (most recent call last)", "tokenizer-config", "medium"),
    ],
)  # fmt: skip
def test_an_exception_maps_to_its_family(line: str, category: str, confidence: str) -> None:
    raised = exception_of(line)
    assert raised is not None
    fam = classify(raised)
    assert fam is not None and (fam.category, fam.confidence) == (category, confidence)


def test_an_assert_raised_in_the_fused_moe_code_is_the_moe_runners_whatever_it_says() -> None:
    raised = exception_of("AssertionError")
    assert raised is not None and raised.msg == ""  # raised without a message
    bare = exception_of('    raise AssertionError("")')
    assert bare is not None
    fam = classify(bare, "/usr/lib/python3/vllm/model_executor/layers/fused_moe/fused_moe.py")
    assert fam is not None and fam.category == "moe-runner"
    oom = exception_of("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert oom is not None
    fam = classify(oom, "/vllm/model_executor/layers/fused_moe/fused_moe.py")
    assert fam is not None and fam.category == "out-of-memory"  # memory first, wherever


def test_lines_that_are_not_exceptions_are_not_read_as_one() -> None:
    assert exception_of("INFO: Application startup complete.") is None
    assert exception_of("WARNING 06-02 11:03:56 [config.py:1] Error-prone setting ignored") is None
    raised = exception_of("Traceback (most recent call last):")
    assert raised is not None and classify(raised) is None  # failed, saying not why


def diagnose(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "pasted.log"
    path.write_text(text, encoding="utf-8")
    return postmortem_logs([path])


def test_an_unnamed_exception_is_classified_by_family_with_medium_confidence(
    tmp_path: Path,
) -> None:
    d = diagnose(
        tmp_path,
        "INFO 12-07 02:10:11 __init__.py:60] No plugins found.\n"
        "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name'\n",
    )
    assert d.category == "tokenizer-config"
    assert d.root_cause is not None and d.root_cause.signature is None
    assert d.root_cause.confidence == "medium"


def test_a_traceback_cut_before_its_last_line_is_a_failure_never_ready(tmp_path: Path) -> None:
    d = diagnose(
        tmp_path,
        "(APIServer pid=1) INFO 04-08 20:32:02 [launcher.py:37] Available routes are:\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/site-packages/vllm/entrypoints/openai/api_server.py", line 9\n',
    )
    assert d.category == "unknown"


def test_a_paste_that_ends_during_distributed_init_has_the_hang_only_as_closest_guess(
    tmp_path: Path,
) -> None:
    """A paste cannot tell a rendezvous that hung from a log cut while it was still coming up
    (the third to seventh sets hold both, alike): nothing failed, furthest phase initializing,
    the hang the closest guess. A run directory, whose supervisor measured the silence, still
    names it (test_postmortem_diagnose.py)."""
    d = diagnose(
        tmp_path,
        "[2025-12-23 14:17:57] Using default HuggingFace chat template\n"
        "[2025-12-23 14:18:00] Init torch distributed begin.\n"
        "[Gloo] Rank 0 is connected to 0 peer ranks. Expected number of connected peer ranks is : 0\n",
    )
    assert (d.category, d.outcome, d.closest) == ("unknown", "no-failure", "rendezvous-network")
    assert d.root_cause is not None and d.root_cause.confidence == "low"


def test_a_paste_that_ends_on_a_failing_line_after_ready_is_a_failure_never_ready(
    tmp_path: Path,
) -> None:
    ready = (
        "[2025-08-02 19:20:01] The server is fired up and ready to roll!\n"
        '[2025-08-02 19:24:20] INFO:     172.16.19.148:48276 - "POST /v1/completions HTTP/1.1" 200 OK\n'
    )
    d = diagnose(tmp_path, ready + "[2025-08-02 19:24:30 TP3] detokenizer loop failed\n")
    assert (d.category, d.outcome) == ("unknown", "failed-unknown")
    # ... but a log that ends serving, or on a logger that names itself "error", is ready
    assert diagnose(tmp_path, ready).category == "ready"
    d = diagnose(tmp_path, ready + "INFO:uvicorn.error:Application startup complete.\n")
    assert d.category == "ready"


def test_an_nccl_log_that_came_up_with_nothing_failing_is_no_failure_never_ready(
    tmp_path: Path,
) -> None:
    d = diagnose(
        tmp_path,
        "gpu05:24037:24037 [0] NCCL INFO Bootstrap : Using bond0:172.30.52.37<0>\n"
        "tj5-sc-ai-h800r-dev01:532:1764 [1] NCCL INFO Connected all rings\n",
    )
    assert (d.category, d.outcome) == ("unknown", "no-failure")  # ready needs a ready marker
    d = diagnose(
        tmp_path,
        "tj5-sc-ai-h800r-dev01:532:1764 [1] NCCL INFO Connected all rings\n"
        "[2025-12-23 14:18:01] Load weight begin. avail mem=46.81 GB\n",
    )
    assert d.category != "ready"  # an engine went on to load and the excerpt stops there


def test_a_bare_killed_gives_way_to_the_engines_own_words(tmp_path: Path) -> None:
    d = diagnose(
        tmp_path,
        "[2025-03-09 00:57:15] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)\n"
        "[2025-03-09 00:57:20] Received sigquit from a child process. It usually means the child failed.\n"
        "Killed\n",
    )
    assert d.category == "watchdog-timeout"
    assert diagnose(tmp_path, "loading...\nKilled\n").category == "out-of-memory"


def test_a_bare_killed_after_the_rank_raised_is_the_end_of_that_failure_not_an_oom(
    tmp_path: Path,
) -> None:
    # the exception the rank raised is read instead (here: no family names it, so the cause
    # stays unnamed); before, the `Killed` that ends every failed run named it out-of-memory
    d = diagnose(
        tmp_path,
        "[2025-03-09 00:57:15] Traceback (most recent call last):\n"
        '  File "/app/serve.py", line 3, in <module>\n'
        "AssertionError: flash attention version 3 is not available\n"
        "Killed\n",
    )
    assert d.category != "out-of-memory"
    d = diagnose(tmp_path, "AssertionError: x\nKilled\n")
    assert d.category != "out-of-memory"
    assert diagnose(tmp_path, "Killed\nAssertionError: later\n").category == "out-of-memory"


@pytest.mark.parametrize(
    ("xid", "category"),
    [
        ("79, pid=0, GPU has fallen off the bus.", "gpu-fault"),
        ("48, An uncorrectable double bit error", "gpu-fault"),
        (
            "13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x52e7b0=0x101000e",
            "unknown",
        ),
        ("45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149", "unknown"),
    ],
)
def test_only_a_hardware_xid_names_the_gpu_as_the_cause(
    tmp_path: Path, xid: str, category: str
) -> None:
    # NVIDIA's Xid table: 13/31/43/45 are raised by an application's work (or clean up after
    # an earlier error); the GPU failing is 79, ECC, NVLink, GSP...
    d = diagnose(tmp_path, f"[93297.027938] NVRM: Xid (PCI:0000:43:00): {xid}\n")
    assert d.category == category
    assert d.outcome != "no-failure"  # an Xid is a failure, named or not


def test_a_rank_whose_node_was_lost_is_the_root_not_the_peers_that_raised_first() -> None:
    """Issue 15.6: every rank loaded; rank 3's node became unreachable; the others' barrier
    ValueError (printed before the loss was noticed) is the echo, rank 3 the cause."""
    from orchestrator.postmortem.diagnose import diagnose as diagnose_facts
    from orchestrator.postmortem.model import Evidence, Hit, RankFacts, RunFacts
    from orchestrator.postmortem.signatures import load_signatures
    from tests.engine_lines import by_id

    sigs = load_signatures()
    barrier = by_id("sglang-barrier-unbalanced-loading").text
    load_end = Evidence(file="x", line=1, text="Load weight end.", ts=100.0)

    def rank(k: int, *, lost: float | None = None) -> RankFacts:
        hits: tuple[Hit, ...] = ()
        if lost is None:
            ev = Evidence(file=f"rank-{k}/stderr.log", line=9, text=barrier, ts=580.0, rank=k)
            (c,) = [c for c in sigs.match_text(barrier)]
            hits = (Hit(signature=c.id, category=c.sig.category, role=c.sig.role, evidence=ev),)
        return RankFacts(
            rank=k,
            lines=10,
            phase="loaded",
            markers={"load_end": load_end},
            hits=hits,
            lost=None
            if lost is None
            else Evidence(file="events.jsonl", line=7, text="node_lost", ts=lost, rank=k),
        )

    run = RunFacts(kind="run", path="/runs/x", engine="sglang")
    d = diagnose_facts(run, [rank(0), rank(1), rank(2), rank(3, lost=590.0)], sigs)
    assert d.category == "rendezvous-network"
    assert d.first_failing_rank == 3
    assert {r.rank: r.role for r in d.ranks}[0] == "cascade"


def test_a_bare_assert_in_the_weight_loader_is_a_weights_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the rule's reading, whatever the shipped calibration's threshold withholds this week
    # (its family path is right 2 of 6 times on leave-one-source-out: a threshold over its
    # confidence answers `unknown, closest: weights-files`, test_postmortem_calibration.py)
    monkeypatch.setattr(diagnose_mod, "load_calibration", lambda: Calibration())
    d = diagnose(
        tmp_path,
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/vllm/model_executor/model_loader/weight_utils.py", line 9, in default_weight_loader\n'
        "    assert param.size() == loaded_weight.size()\n"
        "AssertionError\n",
    )
    assert d.category == "weights-files"
    assert d.root_cause is not None and d.root_cause.confidence == "low"
