"""Eight simulator ranks started by hand boot to ready and answer, in both engines' words.

The golden checks compare every milestone line the ranks really printed with the corpus line it
imitates (tests/fixtures/engine-lines/): same prefix, same fields, same order; only the values
(timestamps, numbers, pids, names) differ.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.engine_lines import by_id
from tests.sim.conftest import Cluster, RankProc, addr, get, post

pytestmark = pytest.mark.sim


def shape(line: str) -> str:
    """A line with its values replaced: what must agree between the simulator and the corpus."""
    s = re.sub(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", "<ts>", line)
    s = re.sub(r"\b\d{2}-\d{2} \d{2}:\d{2}:\d{2}\b", "<ts>", s)
    s = re.sub(r" TP\d+\]", "]", s)  # SGLang marks the rank only when tp > 1
    s = re.sub(r"pid=\d+", "pid=<n>", s)
    s = re.sub(r"\((Worker_TP|EngineCore_DP|APIServer|RayWorkerWrapper)[^ ]*", "(<proc>", s)
    s = re.sub(r"type=[\w.]+", "type=<arch>", s)
    s = re.sub(r"quant=[\w.-]+", "quant=<quant>", s)
    s = re.sub(r"http://[\d.]+:\d+", "http://<addr>", s)
    s = re.sub(r"\d+(?:,\d{3})*(?:\.\d+)?", "<n>", s)
    s = re.sub(r"s/it|it/s", "<unit>", s)  # tqdm flips the unit below one item per second
    return re.sub(r"\s+", " ", s).strip()


def find(rank: RankProc, pattern: str) -> str:
    for line in rank.lines():
        if re.search(pattern, line):
            return line
    raise AssertionError(f"rank {rank.rank} printed no line matching {pattern!r}:\n{rank.text()}")


SGLANG_GOLDEN = [
    # (corpus id, what finds the simulator's line, compare whole line or the corpus as a prefix)
    ("sglang-server-args-dump-dict", r"server_args=\{", "keys"),
    # The corpus line predates `elapsed=` (sglang PR #15426); the rest is the same.
    ("sglang-init-torch-distributed-ends", r"Init torch distributed ends", "without-elapsed"),
    ("sglang-custom-allreduce-disabled-multinode", r"CustomAllreduce is disabled", "suffix"),
    ("sglang-load-weight-begin", r"Load weight begin", "line"),
    ("sglang-load-weight-end", r"Load weight end", "line"),
    ("sglang-kv-cache-allocated-mla", r"KV Cache is allocated", "line"),
    ("sglang-flashinfer-autotune-begin", r"Running FlashInfer autotune", "line"),
    ("sglang-capture-cuda-graph-begin", r"Capture cuda graph begin", "line"),
    ("sglang-capture-cuda-graph-end", r"Capture cuda graph end", "line"),
    ("sglang-max-total-num-tokens", r"max_total_num_tokens=", "line"),
]
SGLANG_GOLDEN_RANK0 = [
    ("sglang-shard-progress-start", r"^Loading safetensors checkpoint shards:\s+0%", "line"),
    ("sglang-shard-progress-mid", r"^Loading safetensors checkpoint shards: 100%", "line"),
    ("sglang-uvicorn-startup-complete", r"Application startup complete", "line"),
    ("sglang-uvicorn-running", r"Uvicorn running on", "prefix"),
    ("sglang-ready-to-roll", r"fired up and ready", "suffix"),
]
VLLM_GOLDEN = [
    ("vllm-loading-weights-took", r"Loading weights took", "line"),
    ("vllm-model-loading-took", r"Model loading took", "line"),
    ("vllm-available-kv-cache-memory", r"Available KV cache memory", "line"),
]
VLLM_GOLDEN_RANK0 = [
    (
        "vllm-shard-progress",
        r"^Loading safetensors checkpoint shards:\s+\d+% Completed \| [1-9]",
        "line",
    ),
    ("vllm-gpu-kv-cache-size", r"GPU KV cache size", "suffix"),
    ("vllm-max-concurrency", r"Maximum concurrency", "suffix"),
    ("vllm-init-engine-took", r"init engine \(profile", "suffix"),
    ("vllm-api-server-starting", r"Starting vLLM server on", "line"),
    ("vllm-application-startup-complete", r"Application startup complete", "suffix"),
]


def check_golden(rank: RankProc, golden: list[tuple[str, str, str]]) -> None:
    for entry_id, pattern, mode in golden:
        mine, real = shape(find(rank, pattern)), shape(by_id(entry_id).text)
        if mode == "line":
            ok = mine == real
        elif mode == "keys":  # a dict dump: the same prefix, then the corpus's keys in order
            keys = re.findall(r"'(\w+)': ", by_id(entry_id).text)
            ok = (
                mine.split("{")[0] == real.split("{")[0]
                and re.findall(r"'(\w+)': ", find(rank, pattern))[: len(keys)] == keys
            )
        elif mode == "prefix":
            ok = mine.startswith(real)
        elif mode == "suffix":  # the corpus line lacks a prefix the simulator's process adds
            ok = mine.endswith(real)
        else:  # "without-elapsed"
            ok = mine.replace("elapsed=<n> s, ", "") == real
        assert ok, f"{entry_id} (rank {rank.rank}):\n  sim:    {mine}\n  corpus: {real}"


def test_eight_sglang_ranks_boot_to_fired_up_and_answer_a_chat_completion(cluster: Cluster) -> None:
    ranks, serve = cluster.start("sglang", 8, env={"SGLANG_UNBALANCED_LOAD_TIMEOUT_S": "7200"})
    ranks[0].wait_for("The server is fired up and ready to roll!", 45)
    base = f"http://{addr(0)}:{serve}"
    assert get(base + "/health")[0] == 200
    models = json.loads(get(base + "/v1/models")[1])
    assert models["data"][0]["id"] == "mistral-large-4"
    answer = json.loads(post(base + "/v1/chat/completions", {
        "model": "mistral-large-4", "messages": [{"role": "user", "content": "Say hello."}],
    }))  # fmt: skip
    assert answer["choices"][0]["message"]["content"].startswith("This is the sglang simulator")
    again = json.loads(post(base + "/v1/chat/completions", {
        "model": "mistral-large-4", "messages": [{"role": "user", "content": "Say hello."}],
    }))  # fmt: skip
    assert again["choices"] == answer["choices"]  # deterministic
    stream = post(base + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Say hello."}], "stream": True, "max_tokens": 4,
    }).decode()  # fmt: skip
    events = [e.removeprefix("data: ") for e in stream.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == "This is the sglang" and chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert ranks[0].wait_for('"POST /v1/chat/completions HTTP/1.1" 200 OK')

    for rank in ranks:
        rank.wait_for("max_total_num_tokens=", 20)
        check_golden(rank, SGLANG_GOLDEN)
        assert f" TP{rank.rank}] Load weight end." in rank.text()
        shards = "Loading safetensors checkpoint shards" in rank.text()
        assert shards == (rank.rank == 0), "tqdm shard progress is printed on TP0 only"
        assert rank.proc.poll() is None
    check_golden(ranks[0], SGLANG_GOLDEN_RANK0)
    # tqdm redraws with carriage returns; the server args are dumped before anything else.
    assert "\rLoading safetensors checkpoint shards:   0% Completed | 0/13" in ranks[0].text()
    assert ranks[0].lines()[1].split("] ", 1)[1].startswith("server_args={")


def test_eight_vllm_ranks_boot_to_startup_complete_and_answer_a_completion(
    cluster: Cluster,
) -> None:
    ranks, serve = cluster.start("vllm", 8)
    ranks[0].wait_for("Application startup complete.", 45)
    base = f"http://{addr(0)}:{serve}"
    answer = json.loads(post(base + "/v1/completions", {"prompt": "def fib(n):", "max_tokens": 6}))
    assert answer["choices"][0]["text"] == "This is the vllm simulator serving"
    assert answer["choices"][0]["finish_reason"] == "length"
    stream = post(base + "/v1/completions", {"prompt": "x", "stream": True}).decode()
    assert stream.rstrip().endswith("data: [DONE]")
    assert get(base + "/health")[0] == 200

    for rank in ranks:
        rank.wait_for("Available KV cache memory", 20)
        check_golden(rank, VLLM_GOLDEN)
        assert f"(Worker_TP{rank.rank} pid=" in rank.text()
        assert ("Loading safetensors" in rank.text()) == (rank.rank == 0), "rank-0-only progress"
        assert ("Starting vLLM server" in rank.text()) == (rank.rank == 0), "--headless ranks"
    check_golden(ranks[0], VLLM_GOLDEN_RANK0)
    # The worker prefix, then tqdm's carriage return (vllm#46367's raw shape).
    assert re.search(r"\(Worker_TP0 pid=\d+\) \rLoading safetensors", ranks[0].text())
    assert find(ranks[0], r"non-default args: \{'model_tag'")
