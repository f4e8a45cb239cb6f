"""The engine-line corpus is well formed, cited, and covers what the parsers need."""

from __future__ import annotations

from collections import Counter

import pytest
import yaml

from tests.engine_lines import (
    CORPUS_DIR,
    SOURCE_PATTERN,
    EngineLine,
    by_id,
    corpus_files,
    load_corpus,
    with_kind,
)

EXPECTED_FILES = {
    "sglang.yaml",
    "vllm.yaml",
    "nccl-torch.yaml",
    "docker-containerd.yaml",
    "mistral-common-misc.yaml",
    "postmortem-extra.yaml",
    "postmortem-train.yaml",
    "postmortem-sources.yaml",
    "postmortem-kernels-image-memory.yaml",
    "postmortem-net-image-watchdog.yaml",
    "postmortem-kernel-tokenizer-kv.yaml",
    "kernel-node.yaml",
}


def test_the_corpus_has_the_expected_files_and_none_is_empty() -> None:
    assert {path.name for path in corpus_files()} == EXPECTED_FILES
    per_file = Counter(entry.file for entry in load_corpus())
    assert set(per_file) == EXPECTED_FILES
    assert all(count > 0 for count in per_file.values())


@pytest.mark.parametrize("name", sorted(EXPECTED_FILES))
def test_every_file_is_a_yaml_list_of_mappings(name: str) -> None:
    document = yaml.safe_load((CORPUS_DIR / name).read_text(encoding="utf-8"))
    assert isinstance(document, list) and document
    assert all(isinstance(entry, dict) for entry in document)


def test_every_entry_validates_against_the_model() -> None:
    entries = load_corpus()
    assert len(entries) >= 50
    assert all(isinstance(entry, EngineLine) for entry in entries)


def test_entry_ids_are_unique_across_the_corpus() -> None:
    counts = Counter(entry.id for entry in load_corpus())
    assert [name for name, count in counts.items() if count > 1] == []


def test_every_source_is_a_url_a_seed_or_a_kept_capture() -> None:
    for entry in load_corpus():
        assert entry.source.strip() == entry.source and entry.source
        assert SOURCE_PATTERN.match(entry.source), entry.id
        if entry.source.startswith("captured: "):
            assert (CORPUS_DIR.parents[1].parent / entry.source.removeprefix("captured: ")).exists()


def test_every_entry_has_a_version_even_if_it_is_unknown() -> None:
    assert all(entry.version.strip() for entry in load_corpus())


def test_the_corpus_has_both_benign_and_failure_lines() -> None:
    benign = [entry for entry in load_corpus() if entry.benign]
    failures = [entry for entry in load_corpus() if not entry.benign]
    assert len(benign) >= 10 and len(failures) >= 10
    assert {
        "sglang-deepgemm-scale-fmt-warning",
        "transformers-mistral-incorrect-regex-warning",
    } <= {entry.id for entry in benign}


def test_a_single_line_holds_no_line_break_and_a_block_has_several_lines() -> None:
    for entry in load_corpus():
        if entry.line is not None:
            assert "\n" not in entry.line, entry.id
        else:
            assert entry.lines is not None and len(entry.lines) >= 2, entry.id


def test_no_verbatim_line_carries_an_editors_ellipsis() -> None:
    for entry in load_corpus():
        if not entry.paraphrase:
            assert "…" not in entry.text, f"{entry.id}: elided text is not a real line"


def test_paraphrases_are_rare_come_from_the_seeds_and_explain_themselves() -> None:
    paraphrases = [entry for entry in load_corpus() if entry.paraphrase]
    assert len(paraphrases) <= 6
    for entry in paraphrases:
        assert entry.source.startswith("seeds/"), entry.id
        assert entry.note, entry.id
        assert not entry.benign, entry.id


def test_every_seed_report_is_cited_by_some_line() -> None:
    cited = {entry.source[:9] for entry in load_corpus() if entry.source.startswith("seeds/")}
    assert cited == {"seeds/000", "seeds/001", "seeds/002", "seeds/003"}


@pytest.mark.parametrize(
    ("engine", "tag"),
    [
        ("sglang", "server-args"),
        ("sglang", "load-begin"),
        ("sglang", "load-end"),
        ("sglang", "shards"),
        ("sglang", "kv-cache"),
        ("sglang", "cuda-graph"),
        ("sglang", "ready"),
        ("sglang", "barrier"),
        ("sglang", "watchdog"),
        ("vllm", "startup"),
        ("vllm", "shards"),
        ("vllm", "load-end"),
        ("vllm", "kv-cache"),
        ("vllm", "oom"),
        ("vllm", "http"),
        ("vllm", "cr-joined"),
        ("nccl", "interface"),
        ("gloo", "rendezvous"),
        ("torch", "rendezvous"),
        ("torch", "watchdog"),
        ("docker", "unpack"),
        ("containerd", "exec-readiness"),
    ],
)
def test_the_corpus_has_a_line_for_every_milestone_and_failure_the_supervisor_reads(
    engine: str, tag: str
) -> None:
    assert [entry for entry in with_kind(tag) if entry.engine == engine], (engine, tag)


def test_the_lines_named_in_the_design_are_present_word_for_word() -> None:
    assert by_id("sglang-ready-to-roll").text == "The server is fired up and ready to roll!"
    barrier = by_id("sglang-barrier-unbalanced-loading").text
    assert "could finish the model loading, but there are other ranks" in barrier
    assert "Load weight end." in by_id("sglang-load-weight-end").text
    assert (
        by_id("nccl-bootstrap-no-socket-interface").text == "Bootstrap : no socket interface found"
    )
    assert "connectFullMesh failed" in by_id("gloo-connect-full-mesh-failed-sglang").text
    assert "1/2 clients joined" in by_id("torch-dist-store-error-clients-joined").text
    assert (
        "stat /server: no such file or directory"
        in by_id("containerd-rootfs-not-ready-stat-no-such-file").text
    )


def test_the_carriage_return_shape_keeps_the_prefix_only_segment() -> None:
    entry = by_id("vllm-shard-progress-worker-prefix")
    assert entry.lines is not None
    assert entry.lines[0] == "(Worker_TP0 pid=1440) "
    assert entry.lines[1].startswith("Loading safetensors checkpoint shards:")


def test_an_unknown_id_is_a_key_error_that_names_it() -> None:
    with pytest.raises(KeyError, match="no-such-line"):
        by_id("no-such-line")


def test_with_kind_returns_only_entries_carrying_that_tag() -> None:
    progress = with_kind("progress")
    assert progress and all("progress" in entry.kind for entry in progress)
    assert with_kind("no-such-tag") == []


def test_an_entry_with_both_line_and_lines_is_refused() -> None:
    with pytest.raises(ValueError, match="exactly one of"):
        EngineLine(
            id="bad-entry",
            engine="other",
            version="unknown",
            source="seeds/000 test",
            kind=("error",),
            benign=False,
            line="a",
            lines=("b", "c"),
        )


def test_an_entry_whose_source_is_not_a_citation_is_refused() -> None:
    with pytest.raises(ValueError, match="neither a URL nor a seed"):
        EngineLine(
            id="bad-entry",
            engine="other",
            version="unknown",
            source="from memory",
            kind=("error",),
            benign=False,
            line="a",
        )


def test_entries_are_frozen() -> None:
    entry = by_id("sglang-ready-to-roll")
    with pytest.raises(ValueError, match="frozen"):
        entry.benign = False  # type: ignore[misc]
