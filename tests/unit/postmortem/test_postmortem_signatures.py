"""The postmortem's signatures: valid data, real fixtures, no blame for warnings, grep-compatible."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.postmortem.signatures import (
    CATEGORIES,
    SIGNATURES_DIR,
    load_signature_files,
    load_signatures,
    to_ere,
)
from tests.engine_lines import by_id, load_corpus

SIGS = load_signatures()
IDS = [c.id for c in SIGS]


def test_the_category_vocabulary_is_the_fixed_one_from_the_issue() -> None:
    assert CATEGORIES == (
        "image-unpack-race",
        "load-barrier-timeout",
        "rendezvous-network",
        "kv-cache-budget",
        "unsupported-arch-kernel",
        "config-validator-refusal",
        "moe-runner",
        "out-of-memory",
        "watchdog-timeout",
        "tokenizer-config",
        "weights-files",
        "gpu-fault",
        "disk",
        "ready",
        "unknown",
    )


def test_every_failure_category_has_at_least_one_signature() -> None:
    covered = {c.sig.category for c in SIGS}
    assert set(CATEGORIES) - {"ready", "unknown"} <= covered


def test_signature_ids_are_unique_and_every_file_holds_some() -> None:
    assert len(IDS) == len(set(IDS))
    files = {c.file for c in SIGS}
    assert files == {p.name for p in SIGNATURES_DIR.glob("*.yaml")}


@pytest.mark.parametrize("sig_id", IDS)
def test_every_signature_matches_each_of_its_corpus_fixtures(sig_id: str) -> None:
    c = SIGS[sig_id]
    for fixture in c.sig.fixtures:
        entry = by_id(fixture)
        assert c in SIGS.match_text(entry.text), f"{sig_id} does not match {fixture}"


@pytest.mark.parametrize("sig_id", IDS)
def test_every_signature_rests_on_a_real_line_never_on_a_paraphrase_alone(sig_id: str) -> None:
    fixtures = [by_id(f) for f in SIGS[sig_id].sig.fixtures]
    assert any(not e.paraphrase for e in fixtures), f"{sig_id}: only paraphrases"
    assert all(not e.benign for e in fixtures), f"{sig_id}: a benign line as a failure fixture"


@pytest.mark.parametrize("sig_id", IDS)
def test_every_pattern_of_every_signature_is_exercised_by_some_real_line(sig_id: str) -> None:
    c = SIGS[sig_id]
    texts = [by_id(f).text for f in c.sig.fixtures]
    for regex in c.regexes:
        assert any(regex.search(t) for t in texts), f"{sig_id}: {regex.pattern} matches no fixture"


def _top_level_alternatives(regex: str) -> list[str]:
    """`a|b(c|d)` -> ["a", "b(c|d)"]: the branches a match must take one of."""
    alts, depth, cur, i, in_class = [], 0, "", 0, False
    while i < len(regex):
        ch = regex[i]
        if ch == "\\":
            cur += regex[i : i + 2]
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch in "()":
            depth += 1 if ch == "(" else -1
        elif ch == "|" and depth == 0:
            alts.append(cur)
            cur, i = "", i + 1
            continue
        cur += ch
        i += 1
    return [*alts, cur]


@pytest.mark.parametrize("sig_id", IDS)
def test_every_alternative_of_a_pattern_holds_its_keyword(sig_id: str) -> None:
    # The scan decodes only lines the keyword prefilter lets through: an alternative without
    # the keyword (`...registration failed|Id: \[Init\]Wait_for_all...` under the keyword
    # "registration failed") can never match, however real its line (found at stop 41).
    for pattern in SIGS[sig_id].sig.patterns:
        for alt in _top_level_alternatives(pattern.regex):
            plain = alt.replace("\\", "")
            assert any(k in plain for k in pattern.keyword), f"{sig_id}: {alt!r} lacks a keyword"


@pytest.mark.parametrize("sig_id", IDS)
def test_every_signature_says_what_to_do_and_where_it_was_seen(sig_id: str) -> None:
    sig = SIGS[sig_id].sig
    assert sig.meaning.strip() and sig.remedy.strip()
    assert sig.sources and all(s.startswith(("https://", "seeds/")) for s in sig.sources)
    assert sig.engines and sig.versions


def test_no_benign_corpus_line_matches_any_failure_signature() -> None:
    benign = [e for e in load_corpus() if e.benign]
    assert len(benign) >= 40
    blamed = {e.id: [c.id for c in SIGS.match_text(e.text)] for e in benign}
    assert {k: v for k, v in blamed.items() if v} == {}


def test_the_seeds_healthy_boot_warnings_are_among_the_lines_never_blamed() -> None:
    for warning in (
        "sglang-deepgemm-scale-fmt-warning",
        "transformers-mistral-incorrect-regex-warning",
        "sglang-overlap-scheduler-disabled",
        "torch-process-group-not-destroyed-warning",
        "docker-load-in-toto-layer-warning",
    ):
        assert SIGS.match_text(by_id(warning).text) == [], warning


def test_no_signature_matches_a_paraphrase_of_the_seeds() -> None:
    paraphrases = [e for e in load_corpus() if e.paraphrase]
    assert paraphrases
    assert {e.id: [c.id for c in SIGS.match_text(e.text)] for e in paraphrases} == {
        e.id: [] for e in paraphrases
    }


@pytest.mark.parametrize(
    ("paraphrase", "real", "sig_id"),
    [
        (
            "mistral-common-tekken-v15-unsupported",
            "mistral-common-unknown-tokenizer-version",
            "mistral-common-unknown-tokenizer-version",
        ),
        (
            "vllm-cutlass-scaled-mm-supports-fp8-missing",
            "vllm-op-namespace-no-cutlass-scaled-mm-supports-fp8",
            "engine-extension-missing-op",
        ),
        (
            "sglang-flashinfer-sparse-mla-glm-only",
            "sglang-flashinfer-sparse-mla-validator",
            "sglang-flashinfer-sparse-mla-refused",
        ),
        (
            "vllm-chat-completions-400-reasoning-effort",
            "transformers-reasoning-effort-kwargs-refused",
            "mistral-tokenizer-refuses-reasoning-effort",
        ),
        (
            "vllm-mla-head-size-320-seed001",
            "vllm-no-valid-attention-backend-gb10",
            "vllm-attention-backend-refused",
        ),
    ],
)
def test_each_paraphrased_seed_failure_is_covered_by_the_real_line_found_for_it(
    paraphrase: str, real: str, sig_id: str
) -> None:
    assert by_id(paraphrase).paraphrase
    assert not by_id(real).paraphrase
    assert SIGS[sig_id] in SIGS.match_text(by_id(real).text)


@pytest.mark.parametrize(
    ("corpus_id", "category"),
    [
        # seed 002's ledger
        ("containerd-rootfs-not-ready-stat-no-such-file", "image-unpack-race"),
        ("vllm-estimated-max-model-length-seed002", "kv-cache-budget"),
        ("flashinfer-trtllm-fmha-unsupported-architecture", "unsupported-arch-kernel"),
        ("sglang-barrier-unbalanced-loading", "load-barrier-timeout"),
        ("sglang-flashinfer-sparse-mla-validator", "config-validator-refusal"),
        ("sglang-fusedmoe-no-g1-scale-c", "moe-runner"),
        ("transformers-couldnt-find-in-cached-files", "tokenizer-config"),
        # seed 001's table
        ("mistral-common-unknown-tokenizer-version", "tokenizer-config"),
        ("vllm-mla-head-size-unsupported", "config-validator-refusal"),
        ("glibc-dl-tls-add-to-slotinfo-assertion", "unsupported-arch-kernel"),
        ("vllm-op-namespace-no-cutlass-scaled-mm-supports-fp8", "unsupported-arch-kernel"),
        ("vllm-kv-cache-needed-exceeds-available", "kv-cache-budget"),
        # seed 000 and seed 003
        ("triton-jit-cuda-operation-not-permitted", "unsupported-arch-kernel"),
        ("triton-ptxas-sm121a-not-defined", "unsupported-arch-kernel"),
        ("transformers-reasoning-effort-kwargs-refused", "tokenizer-config"),
        ("vllm-free-memory-below-utilization", "kv-cache-budget"),
        # the public ones
        ("nccl-bootstrap-no-socket-interface", "rendezvous-network"),
        ("gloo-connect-full-mesh-failed-sglang", "rendezvous-network"),
        ("torch-tcpstore-client-failed-to-connect", "rendezvous-network"),
        ("torch-dist-network-error-client-timeout", "rendezvous-network"),
        ("torch-dist-store-error-clients-joined", "rendezvous-network"),
        ("torch-nccl-watchdog-collective-timeout-vllm", "watchdog-timeout"),
        ("vllm-no-available-memory-cache-blocks", "kv-cache-budget"),
        ("torch-cuda-oom-tried-to-allocate", "out-of-memory"),
        ("kernel-memory-cgroup-oom-killed-process", "out-of-memory"),
        ("vllm-cuda-error-no-kernel-image", "unsupported-arch-kernel"),
        ("sglang-scheduler-watchdog-timeout-new", "watchdog-timeout"),
        ("vllm-engine-startup-timeout-core-processes", "watchdog-timeout"),
        ("safetensors-header-metadata-incomplete", "weights-files"),
        ("vllm-no-config-file-found", "tokenizer-config"),
    ],
)
def test_the_issues_coverage_list_maps_each_real_line_to_its_category(
    corpus_id: str, category: str
) -> None:
    found = {c.sig.category for c in SIGS.match_text(by_id(corpus_id).text)}
    assert category in found, (corpus_id, found)


def test_patterns_hold_to_the_stable_part_not_to_one_line() -> None:
    # Variants seen in the wild, each differing from its fixture in a way patterns must absorb.
    variants = {
        # newer vLLM names the device; other numbers
        "Free memory on device cuda:0 (74.9/142.5 GiB) on startup is less than desired GPU "
        "memory utilization (0.95, 135.4 GiB).": "vllm-free-memory-below-utilization",
        # a space lost in a release's string concatenation
        "TimeoutError: Timed out waiting for engines to sendinitial message on input socket.": (
            "vllm-engine-startup-timeout"
        ),
        # lower-case reason in newer safetensors
        "SafetensorError: Error while deserializing header: header too large": (
            "safetensors-bad-header"
        ),
        # another attribute, another rank number
        "AttributeError: 'FusedMoE' object has no attribute 'w13_weight_scale_2'": (
            "sglang-fusedmoe-missing-attribute"
        ),
        "ValueError: TP rank 7 could finish the model loading, but there are other ranks that "
        "didn't finish loading.": "sglang-post-load-barrier-timeout",
        # SGLang's newer watchdog wording
        "Scheduler watchdog timeout (self.watchdog_timeout=3600, self.soft=True)": (
            "sglang-scheduler-watchdog"
        ),
    }
    for text, sig_id in variants.items():
        assert SIGS[sig_id] in SIGS.match_text(text), text


def test_a_wrapped_line_is_matched_across_the_break_by_a_window_pattern() -> None:
    wrapped = (
        "ValueError: flashinfer_sparse_mla supports only GLM DSA with FP8 KV cache\n"
        "on NVIDIA SM120/SM121; got model_arch='Glm5NextForConditionalGeneration',"
    )
    assert SIGS["sglang-flashinfer-sparse-mla-refused"] in SIGS.match_text(wrapped)


def test_every_pattern_converts_to_ere_and_grep_accepts_it(tmp_path: Path) -> None:
    patterns = SIGS.ere_patterns()
    assert len(patterns) >= len(SIGS)
    if shutil.which("grep") is None:
        pytest.skip("no grep")
    pfile = tmp_path / "p.ere"
    pfile.write_text("\n".join(patterns) + "\n")
    proc = subprocess.run(
        ["grep", "-E", "-c", "-f", str(pfile), "/dev/null"], capture_output=True, text=True
    )
    assert proc.returncode == 1, proc.stderr  # 1: no match; 2 would be a bad pattern


def test_grep_with_the_converted_patterns_finds_the_same_fixture_lines(tmp_path: Path) -> None:
    if shutil.which("grep") is None:
        pytest.skip("no grep")
    for c in SIGS:
        for pattern, regex in zip(c.sig.patterns, c.regexes, strict=True):
            if pattern.lines > 1:
                continue  # grep is line based; windows are the scan's own
            lines = [
                line
                for f in c.sig.fixtures
                for line in by_id(f).text.splitlines()
                if regex.search(line)
            ]
            if not lines:
                continue
            data = tmp_path / "lines.txt"
            data.write_text("\n".join(lines) + "\n", encoding="utf-8")
            proc = subprocess.run(
                ["grep", "-E", "-c", "-e", to_ere(pattern.regex), str(data)],
                capture_output=True,
                text=True,
                env={"LC_ALL": "C.UTF-8"},
            )
            assert proc.stdout.strip() == str(len(lines)), (c.id, pattern.regex, proc.stderr)


@pytest.mark.parametrize(
    ("regex", "ere"),
    [
        (r"exitcode=-?9([^0-9]|$)", r"exitcode=-?9([^0-9]|$)"),
        (r"(?:Scheduler|EngineCore) hit", r"(Scheduler|EngineCore) hit"),
        (r"took \d+\.\d+ s\S*", r"took [0-9]+\.[0-9]+ s[^[:space:]]*"),
        (r"a.*?b", r"a.*b"),
        (r"[\d\s]+", r"[0-9[:space:]]+"),
        (r"Triton Error \[CUDA\]", r"Triton Error \[CUDA\]"),
    ],
)
def test_to_ere_translates_the_subset_signatures_use(regex: str, ere: str) -> None:
    assert to_ere(regex) == ere


@pytest.mark.parametrize("regex", [r"a(?=b)", r"(?i)abc", r"(a)\1", r"\bword", r"(?P<x>a)"])
def test_to_ere_refuses_what_grep_cannot_say(regex: str) -> None:
    with pytest.raises(ValueError):
        to_ere(regex)


def _write(tmp_path: Path, body: str, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


GOOD = """
- id: good-one
  title: a good signature
  category: out-of-memory
  engines: [torch]
  versions: any
  patterns:
    - regex: 'CUDA out of memory'
      keyword: 'out of memory'
  meaning: something ran out of memory here.
  remedy: give it more memory, or ask for less.
  sources: [https://example.org/issue/1]
  fixtures: [torch-cuda-oom-tried-to-allocate]
"""


def test_a_valid_signature_file_loads_and_compiles(tmp_path: Path) -> None:
    sigs = load_signature_files([_write(tmp_path, GOOD)])
    assert [c.id for c in sigs] == ["good-one"]
    assert sigs.match_text("torch.OutOfMemoryError: CUDA out of memory. Tried")


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ("category: out-of-memory", "category: disk-full", "category"),
        ("keyword: 'out of memory'", "keyword: 'memory leak'", "not literal text"),
        ("keyword: 'out of memory'", "keyword: 'oom'", "too short"),
        ("regex: 'CUDA out of memory'", "regex: 'CUDA (?=out) of memory'", "ERE"),
        ("regex: 'CUDA out of memory'", "regex: 'CUDA (out of memory'", "does not compile"),
        ("category: out-of-memory", "category: ready", "not a failure"),
        ("sources: [https://example.org/issue/1]", "sources: [my memory]", "URL"),
        ("fixtures: [torch-cuda-oom-tried-to-allocate]", "fixtures: []", "fixtures"),
    ],
)
def test_a_bad_signature_is_refused_naming_its_file_id_and_problem(
    tmp_path: Path, old: str, new: str, words: str
) -> None:
    assert old in GOOD
    with pytest.raises(ConfigError) as err:
        load_signature_files([_write(tmp_path, GOOD.replace(old, new))])
    message = " ".join(err.value.lines())
    assert "bad.yaml:good-one" in message
    assert words in message


def test_duplicate_ids_across_files_are_refused(tmp_path: Path) -> None:
    a = _write(tmp_path, GOOD, "a.yaml")
    b = _write(tmp_path, GOOD, "b.yaml")
    with pytest.raises(ConfigError, match="duplicate id"):
        load_signature_files([a, b])


def test_yaml_that_is_not_a_list_of_signatures_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="expected a list"):
        load_signature_files([_write(tmp_path, "id: x\n")])


def test_every_shipped_signature_file_passes_the_strict_yaml_loader() -> None:
    """At run time the shipped files are parsed by libyaml's fast loader; the strict one
    (duplicate keys, size limits) must accept them all the same."""
    from orchestrator.postmortem.signatures import SIGNATURES_DIR, load_signature_files
    from orchestrator.yamlio import load_yaml

    files = sorted(SIGNATURES_DIR.glob("*.yaml"))
    assert files
    for path in files:
        assert isinstance(load_yaml(path), list), path
    strict = load_signature_files(files)
    assert [c.id for c in strict] == [c.id for c in SIGS]
