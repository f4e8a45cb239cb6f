"""Tidying pasted lines (orchestrator/postmortem/tidy.py): the dressings issue 15 lists, each
on a line shaped like the corpus's, and the hard wraps a paste of one long message leaves."""

from __future__ import annotations

import pytest

from orchestrator.postmortem.signatures import load_signatures
from orchestrator.postmortem.tidy import tidy_line, tidy_text


@pytest.mark.parametrize(
    ("raw", "tidy"),
    [
        # a literal colour code opening the line, with the blank left where ESC was, in front of
        # a compose column or a Ray prefix: both come off, as they do behind a real ESC byte
        (" [36mvllm-1  | [0m RuntimeError: boom", "RuntimeError: boom"),
        ("\x1b[36mvllm-1  |\x1b[0m RuntimeError: boom", "RuntimeError: boom"),
        (" [0;36m(raylet, ip=10.0.0.1) [0m Out of memory", "Out of memory"),
        ("^[[0;36m(pid=123, ip=10.0.0.2)^[[0m RuntimeError: boom", "RuntimeError: boom"),
        # a compose column, then vLLM's colour-wrapped process prefix
        ("vllm-openai-1 | \x1b[1;36m(EngineCore pid=5)\x1b[0;0m ERROR boom", "ERROR boom"),
        # Markdown quotes of quotes
        ("> > RuntimeError: boom", "RuntimeError: boom"),
        (">> RuntimeError: boom", "RuntimeError: boom"),
        # pasted line numbers: `12 | `, `12: `, and a tab after the number
        ("12 | RuntimeError: boom", "RuntimeError: boom"),
        ("  12: RuntimeError: boom", "RuntimeError: boom"),
        ("12\tRuntimeError: boom", "RuntimeError: boom"),
        # what must stay: rank prefixes, a traceback's indentation, a stamp
        ("[rank3]: RuntimeError: boom", "[rank3]: RuntimeError: boom"),
        ('  File "x.py", line 3, in <module>', '  File "x.py", line 3, in <module>'),
        ("2025-01-01 10:00:00 ERROR boom", "2025-01-01 10:00:00 ERROR boom"),
    ],
)  # fmt: skip
def test_the_dressings_issue_15_lists_come_off(raw: str, tidy: str) -> None:
    assert tidy_line(raw) == tidy


def test_one_long_message_wrapped_once_is_joined_back() -> None:
    # the paste's longest line, cut mid-word, its tail in lower case on the next line
    text = (
        "ValueError: TRTLLM MHA backend is only supported on Blackwell GPUs (SM100). Plea\n"
        "se use a different backend.\n"
        "short line\n"
    )
    out = tidy_text(text).split("\n")
    assert out[0] == (
        "ValueError: TRTLLM MHA backend is only supported on Blackwell GPUs (SM100). "
        "Please use a different backend."
    )
    assert out[1] == "" and out[2] == "short line"
    assert len(out) == len(text.split("\n"))
    kinds = {c.sig.id for c in load_signatures().match_text(out[0])}
    assert "backend-choice-refused-for-this-gpu" in kinds


def test_a_record_printed_twice_is_not_taken_for_a_wrap_width() -> None:
    # two identical INFO lines share a length; that is one record repeated, not a wrap, and
    # must not hide the real wrap of the longest line (a TensorRT-LLM paste, fifth set d-0067)
    info = "[TensorRT-LLM][INFO] [MemUsageChange] allocation in IExecutionContext creation: GPU 12569 (MiB)"
    text = (
        f"{info}\n{info}\n"
        "E1103 02:59:01.152656 81041 backend_model.cc:553] ERROR: Failed to create instance: "
        "[TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, mCudaSt\n"
        "ream->get()): out of memory (/app/tensorrt_llm/runtime/tllmBuffers.h:112)\n"
    )
    out = tidy_text(text).split("\n")
    assert out[2].endswith(
        "mCudaStream->get()): out of memory (/app/tensorrt_llm/runtime/tllmBuffers.h:112)"
    )
    assert out[3] == "" and out[0] == out[1] == info


def test_one_template_with_other_numbers_is_not_a_wrap_width() -> None:
    # Triton's shutdown countdown prints one template with other digits of the same width;
    # the server's last words after it ("error: creating server: ...") are a record of their
    # own, not the countdown's tail (the thirty-ninth set, c-0008: read "no failure" before)
    text = (
        "I0704 06:09:11.743576 1945 server.cc:302] Timeout 28: Found 1 live models and 0"
        " in-flight non-inference requests\n"
        "Remove feature extractor!\n"
        "I0704 06:09:12.743705 1945 server.cc:302] Timeout 27: Found 0 live models and 0"
        " in-flight non-inference requests\n"
        "error: creating server: Internal - failed to load all models\n"
    )
    assert tidy_text(text) == text


def test_a_c_functions_record_after_the_longest_line_is_not_its_tail() -> None:
    # llama.cpp's allocator line is the paste's longest, ends in a word, and the next record
    # starts in lower case with its function's name: not a wrap (the forty-third set, f-0007;
    # joined, the KV cache's own line was read two lines off and memory running out won)
    text = (
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2048.00 MiB on device 0:"
        " cudaMalloc failed: out of memory\n"
        "alloc_tensor_range: failed to allocate ROCm0 buffer of size 2147483648\n"
    )
    assert tidy_text(text) == text


def test_a_long_line_followed_by_its_own_record_is_not_joined() -> None:
    # the longest line ends a word and the next is a record of its own: not a wrap
    lines = [
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "CUDA kernel errors might be asynchronously reported at some other API call",
        "[rank0]: done",
    ]
    assert tidy_text("\n".join(lines)).split("\n") == lines
    # ends mid-word, but the next line starts in upper case: a record, not a tail
    cut = ["x" * 70 + "abc", "Next record", "tail"]
    assert tidy_text("\n".join(cut)).split("\n") == cut
