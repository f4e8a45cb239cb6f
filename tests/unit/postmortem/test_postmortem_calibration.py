"""Issue 29: the answer's outcome, its calibrated confidence, the withheld fallback, provenance.

Fakes only: short logs written to tmp_path, diagnosed through `postmortem_logs` (what
`cluster postmortem --logs FILE` calls), and calibrations built in the test.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.postmortem import postmortem_logs
from orchestrator.postmortem.calibration import Calibration, counts, load_calibration
from orchestrator.postmortem.families import FAMILIES, classify, exception_of
from orchestrator.postmortem.learned import NEVER, LinearModel, _shipped_model, using_model
from orchestrator.postmortem.signatures import (
    TRACKER_FAMILIES,
    Signature,
    load_signatures,
    tracker_family,
)
from tests.postmortem_corpus import Provenance

HEALTHY_CUT = (
    "[2025-03-09 00:50:00 TP0] Load weight begin. avail mem=78.00 GB\n"
    "[2025-03-09 00:51:00 TP0] Load weight end. type=Qwen3ForCausalLM, avail mem=40.00 GB\n"
    "[2025-03-09 00:51:05 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
)
# the module (the package's `diagnose` attribute is the function of that name)
diagnose_mod = importlib.import_module("orchestrator.postmortem.diagnose")
WATCHDOG = "[2025-03-09 00:57:15 TP0] Watchdog timeout (self.watchdog_timeout=300)\n"


def _log(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rank-0.log"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_boot_cut_before_ready_is_no_failure_with_its_phase_and_last_line(
    tmp_path: Path,
) -> None:
    d = postmortem_logs([_log(tmp_path, HEALTHY_CUT)])
    assert d.category == "unknown"  # as before: the category of schema 1 readers
    assert d.outcome == "no-failure"
    assert d.no_failure is not None
    assert d.no_failure.furthest_phase in ("loaded", "warming")
    assert d.no_failure.last_line is not None
    assert "Capture cuda graph begin" in d.no_failure.last_line.text
    assert "No failure found; furthest phase" in d.verdict


def test_a_named_failure_carries_its_confidence_and_what_named_it(tmp_path: Path) -> None:
    d = postmortem_logs([_log(tmp_path, HEALTHY_CUT + WATCHDOG)])
    assert d.category == "watchdog-timeout"
    assert d.outcome == "failed"
    assert d.decided_by is not None and d.decided_by.startswith("sig:")
    assert d.confidence is not None and 0.0 < d.confidence <= 1.0
    assert d.named_by.startswith("signature ")
    assert "rank-0.log:4" in d.named_by


def test_below_the_threshold_the_category_is_withheld_as_closest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    strict = Calibration(threshold=0.99, paths={}, kinds={"sig": (1, 4)})
    monkeypatch.setattr(diagnose_mod, "load_calibration", lambda: strict)
    d = postmortem_logs([_log(tmp_path, HEALTHY_CUT + WATCHDOG)])
    assert d.category == "unknown"
    assert d.closest == "watchdog-timeout"
    assert d.outcome == "failed-unknown"  # it failed: not the no-failure outcome
    assert d.confidence is not None and d.confidence < 0.99
    assert d.verdict.startswith("Cause not named: the closest category is watchdog-timeout")


def test_the_json_document_has_the_new_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _log(tmp_path, HEALTHY_CUT)
    main(["postmortem", "--logs", str(path), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "cluster.postmortem/1"
    assert doc["outcome"] == "no-failure"
    assert doc["no_failure"]["furthest_phase"]
    assert {"confidence", "closest", "decided_by", "named_by"} <= doc.keys()


def test_confidence_is_the_paths_smoothed_precision_leaning_on_its_kind() -> None:
    paths, kinds = counts([("sig:a", True)] * 9 + [("sig:a", False), ("sig:b", False)])
    calib = Calibration(threshold=0.5, paths=paths, kinds=kinds)
    assert paths["sig:a"] == (9, 10) and kinds["sig"] == (9, 11)
    seen, new, bad = (calib.confidence(p) for p in ("sig:a", "sig:never-seen", "sig:b"))
    assert seen is not None and new is not None and bad is not None
    assert 0.8 < seen < 0.9
    assert new == pytest.approx((9 + 1) / (11 + 2))
    assert bad < new


def test_the_shipped_calibration_loads_and_names_only_known_families() -> None:
    calib = load_calibration()
    assert 0.0 <= calib.threshold <= 1.0
    assert calib.paths, "calibration.json: regenerate with bench/postmortem_corpus.py --calibrate"
    for fams in calib.families.values():
        assert set(fams) <= set(TRACKER_FAMILIES)
    assert all(0 <= i < len(FAMILIES) for i in calib.families)


def test_every_signature_of_the_corpus_files_has_a_known_provenance() -> None:
    sigs = load_signatures()
    with_prov = [c for c in sigs if c.sig.provenance]
    assert len(with_prov) >= 100
    for c in with_prov:
        assert set(c.sig.provenance) <= set(TRACKER_FAMILIES), c.id


def test_an_unknown_provenance_is_refused() -> None:
    raw = {
        "id": "x-y",
        "title": "a title",
        "category": "out-of-memory",
        "engines": ["vllm"],
        "versions": "any",
        "patterns": [{"regex": "some words", "keyword": "some"}],
        "meaning": "what it means here",
        "remedy": "what to do about it",
        "sources": ["https://github.com/vllm-project/vllm/issues/1"],
        "fixtures": ["f"],
        "provenance": ["vllm", "nowhere"],
    }
    with pytest.raises(ValueError, match="nowhere"):
        Signature.model_validate(raw)


def test_trackers_map_to_families() -> None:
    assert tracker_family("vllm-project/vllm") == "vllm"
    assert tracker_family("https://github.com/sgl-project/sglang/issues/3") == "sglang"
    assert tracker_family("NVIDIA/nccl") == "torch-nccl"
    assert tracker_family("moby/moby") == "containerd-moby"
    assert tracker_family("huggingface/transformers") == "hf"
    assert tracker_family("flashinfer-ai/flashinfer") == "kernels"
    assert tracker_family("gpustack/gpustack") == "other"


def test_leave_one_out_switches_off_only_the_rules_of_that_family_alone() -> None:
    prov = Provenance(
        signatures={"a": ("vllm",), "b": ("vllm", "sglang"), "c": ()},
        families={0: ("sglang",), 1: ()},
    )
    assert prov.rules_of_only("vllm") == (frozenset({"a"}), frozenset())
    assert prov.rules_of_only("sglang") == (frozenset(), frozenset({0}))


def test_a_hedged_word_is_not_a_statement() -> None:
    hedged = exception_of(
        "ValueError: TP rank 1 could finish the model loading, but there are other ranks that "
        "didn't finish loading. It is likely due to unexpected failures (e.g. OOM) or a slow node."
    )
    assert hedged is not None
    fam = classify(hedged)
    assert fam is None or fam.category != "out-of-memory"
    stated = exception_of("RuntimeError: the worker hit OOM while profiling")
    assert stated is not None
    said = classify(stated)
    assert said is not None and said.category == "out-of-memory"


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "terminate called after throwing an instance of 'std::bad_alloc'  what():  std::bad_alloc",
        "RuntimeError: cudaErrorMemoryAllocation: the workspace could not be created",
    ],
)
def test_an_allocator_failure_without_out_of_memory_is_memory(line: str) -> None:
    raised = exception_of(line)
    assert raised is not None
    fam = classify(raised)
    assert fam is not None and fam.category == "out-of-memory"


def test_the_shipped_signatures_come_back_from_the_cache_and_a_change_is_never_served_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.postmortem import signatures as sig_mod

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = tmp_path / "sigs"
    folder.mkdir()
    shipped = sorted(sig_mod.SIGNATURES_DIR.glob("*.yaml"))
    for p in shipped:
        (folder / p.name).write_bytes(p.read_bytes())
    files = sorted(folder.glob("*.yaml"))
    first = sig_mod._shipped(files)
    cached = list((tmp_path / "cache" / "cluster").glob("postmortem-signatures-*.pickle"))
    assert len(cached) == 1
    again = sig_mod._shipped(files)
    assert [c.id for c in again] == [c.id for c in first]
    assert again.match_text("Watchdog timeout (self.watchdog_timeout=300)")
    # a file edited (another size, another mtime): read anew, a second cache file
    memory = folder / "memory.yaml"
    memory.write_text(memory.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    sig_mod._shipped(sorted(folder.glob("*.yaml")))
    assert len(list((tmp_path / "cache" / "cluster").glob("*.pickle"))) == 2


def _toy_model(best: str) -> LinearModel:
    return LinearModel(
        categories=("out-of-memory", "ready", "unknown"),
        bias=(0.0, 0.0, 0.0),
        weights={"l=frobnicated": (5.0, 0.0, 0.0) if best != "ready" else (0.0, 9.0, 0.0)},
        threshold=0.5,
    )


def test_the_model_speaks_only_where_the_rules_named_nothing_and_says_from_which_lines(
    tmp_path: Path,
) -> None:
    path = _log(tmp_path, HEALTHY_CUT + "the widget was frobnicated\n")
    with using_model(_toy_model("out-of-memory")):
        d = postmortem_logs([path])
        named = postmortem_logs([_log(tmp_path, HEALTHY_CUT + WATCHDOG)])
    assert d.category == "out-of-memory"
    assert d.decided_by == "model:out-of-memory"
    assert d.outcome == "failed"
    assert d.named_by.startswith("the model (learned.py), from lines ")
    assert d.named_by.endswith("rank-0.log:4")
    assert d.confidence is not None and d.confidence >= 0.5
    assert d.verdict.startswith("Probably out-of-memory (named by the model")
    assert named.category == "watchdog-timeout"  # a signature decided: the model is not asked


def test_the_model_never_answers_ready(tmp_path: Path) -> None:
    path = _log(tmp_path, HEALTHY_CUT + "the widget was frobnicated\n")
    with using_model(_toy_model("ready")):
        d = postmortem_logs([path])
    assert d.category == "unknown"
    assert d.outcome == "no-failure"


def _sure_of(category: str, dissent_at: float = 0.8) -> LinearModel:
    """A model that reads every boot as `category` with probability ~1 (its bias alone)."""
    cats = ("out-of-memory", "disk", "watchdog-timeout", "ready", "unknown")
    return LinearModel(
        categories=cats,
        bias=tuple(12.0 if c == category else 0.0 for c in cats),
        weights={},
        threshold=0.99,
        dissent_at=dissent_at,
    )


OOM_PASTE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 1.02 GiB is free.\n"
)


def test_a_model_sure_of_another_category_withholds_the_rules_answer_on_a_paste(
    tmp_path: Path,
) -> None:
    path = _log(tmp_path, HEALTHY_CUT + OOM_PASTE)
    with using_model(_sure_of("disk")):
        split = postmortem_logs([path])
    with using_model(_sure_of("disk", dissent_at=1.1)):
        named = postmortem_logs([path])
    assert named.category == "out-of-memory" and named.dissent is None
    assert (split.category, split.closest, split.outcome) == (
        "unknown",
        "out-of-memory",
        "failed-unknown",
    )
    assert split.dissent is not None and split.dissent.category == "disk"
    assert split.dissent.probability > 0.99
    assert split.verdict.startswith("Cause not named: the evidence is split. The rules read ")
    assert "the model reads disk" in split.verdict
    assert split.as_json()["dissent"]["category"] == "disk"


def test_the_model_agreeing_or_reading_a_coarser_category_is_no_split(tmp_path: Path) -> None:
    with using_model(_sure_of("out-of-memory")):
        oom = postmortem_logs([_log(tmp_path, HEALTHY_CUT + OOM_PASTE)])
        kv = postmortem_logs(
            [
                _log(
                    tmp_path,
                    "ValueError: No available memory for the cache blocks. Try increasing "
                    "`gpu_memory_utilization` when initializing the engine.\n",
                )
            ]
        )
    assert (oom.category, oom.dissent) == ("out-of-memory", None)
    # a KV cache with no room is a memory shortage named more precisely: not a contradiction
    assert (kv.category, kv.dissent) == ("kv-cache-budget", None)


def test_a_reading_the_rules_weighed_is_no_split(tmp_path: Path) -> None:
    # the watchdog after the OOM is the consequence the blame set aside, not another answer
    text = HEALTHY_CUT + OOM_PASTE + WATCHDOG
    with using_model(_sure_of("watchdog-timeout")):
        d = postmortem_logs([_log(tmp_path, text)])
    assert (d.category, d.dissent) == ("out-of-memory", None), d.verdict


def test_the_shipped_model_loads_with_a_threshold_of_at_least_one_half() -> None:
    model = _shipped_model()
    assert model.categories and model.weights
    assert 0.5 <= model.threshold <= 1.0
    assert "ready" in NEVER and "unknown" in NEVER
    assert 0.5 <= model.dissent_at <= 1.0


MONITORED = """Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/{where}", line 2000, in run
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)
  File "/usr/local/lib/python3.12/dist-packages/torch/distributed/distributed_c10d.py", line 4000, in monitored_barrier
    return group_to_use.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)
RuntimeError: Rank 1 failed to pass monitoredBarrier in 1800000 ms
"""


@pytest.mark.parametrize(
    ("where", "category"),
    [
        ("sglang/srt/managers/scheduler.py", "load-barrier-timeout"),
        ("mytrainer/train.py", "rendezvous-network"),
    ],
)
def test_a_gloo_monitored_barrier_is_the_post_load_barrier_only_inside_sglang(
    tmp_path: Path, where: str, category: str
) -> None:
    d = postmortem_logs([_log(tmp_path, MONITORED.format(where=where))])
    assert d.category == category
    assert d.decided_by == "sig:gloo-monitored-barrier-failed"


def test_a_refusal_naming_the_gpu_raised_by_the_argument_checks_is_the_validators(
    tmp_path: Path,
) -> None:
    text = """Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/{where}", line 1200, in create_engine_config
    raise ValueError(msg)
ValueError: The frobnicator attention path is only supported on Hopper GPUs (SM90)
"""
    at_start = postmortem_logs([_log(tmp_path, text.format(where="vllm/engine/arg_utils.py"))])
    assert at_start.category == "config-validator-refusal"
    assert "also reads as unsupported-arch-kernel" in at_start.verdict
    in_kernel = postmortem_logs(
        [_log(tmp_path, text.format(where="vllm/attention/backends/frob.py"))]
    )
    assert in_kernel.category == "unsupported-arch-kernel"
    # the frames decided against the validator's reading: the verdict still says both
    assert "also reads as config-validator-refusal" in in_kernel.verdict


ENGINE_START = (
    "INFO 03-09 00:50:00 [core.py:58] Initializing a V1 LLM engine (v0.8.5) with config: "
    "model='x', tensor_parallel_size=2\n"
)
NCCL_UP = (
    "node1:123:456 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
    "node1:123:456 [0] NCCL INFO comm 0x55 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n"
)


def test_nccl_up_is_never_ready_it_is_no_failure_so_far_for_a_program_or_an_engine(
    tmp_path: Path,
) -> None:
    # `ready` needs an engine's own ready marker (issue 29): NCCL's Init COMPLETE says the
    # communicator is up, not that the program got anywhere after it (a DeepSpeed job whose
    # paste ends there was called ready)
    bare = postmortem_logs([_log(tmp_path, NCCL_UP)])
    assert (bare.category, bare.outcome) == ("unknown", "no-failure")
    engine = postmortem_logs([_log(tmp_path, ENGINE_START + NCCL_UP)])
    assert (engine.category, engine.outcome) == ("unknown", "no-failure")  # not ready, no hang
    assert engine.no_failure is not None and engine.no_failure.last_line is not None
    assert "Init COMPLETE" in engine.no_failure.last_line.text


@pytest.mark.parametrize(
    ("line", "category"),
    [
        (
            "RuntimeError: HIP error: hipErrorNoBinaryForGpu: Unable to find code object for all "
            "current devices!",
            "unsupported-arch-kernel",
        ),
        ("RuntimeError: HIP error: invalid device function", "unsupported-arch-kernel"),
        ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB", "out-of-memory"),
    ],
)
def test_rocm_spells_the_same_failures_its_own_way(line: str, category: str) -> None:
    raised = exception_of(line)
    assert raised is not None
    fam = classify(raised)
    assert fam is not None and fam.category == category


def test_a_path_the_corpus_never_exercised_is_neither_measured_nor_withheld() -> None:
    calib = Calibration(threshold=0.9, paths={"sig:a": (9, 10)}, kinds={"sig": (9, 10)})
    assert calib.confidence("lost:rendezvous-network") is None
    assert calib.confidence("supervisor:out-of-memory") is None
    assert calib.confidence("sig:new") is not None
