"""SGLang's dialect: `[2026-03-24 22:12:00 TP3] msg` records on stderr, every TP rank.

SGLang prints `Load weight begin/end` on every TP rank but the shard bar once (TP0), so the
log gives milestones per rank; per-rank byte progress comes from the sampler.
"""

from __future__ import annotations

from orchestrator.dialects.base import Milestone as M
from orchestrator.dialects.base import marker

ENGINE = "sglang"

READY = "The server is fired up and ready to roll!"  # http_server.py, after the warm-up request

MARKERS = (
    marker(M.server_args, ENGINE, "server_args="),
    marker(M.dist_begin, ENGINE, "Init torch distributed begin"),
    marker(M.dist_init, ENGINE, "Init torch distributed ends"),
    marker(M.load_begin, ENGINE, "Load weight begin"),
    # `Load weight end (EAGLE draft).` is the draft model's: the period keeps it out
    marker(M.load_end, ENGINE, "Load weight end", r"Load weight end\."),
    marker(M.warmup, ENGINE, "KV Cache is allocated"),
    marker(M.warmup, ENGINE, "Memory pool end"),
    marker(M.warmup, ENGINE, "Capture cuda graph", r"Capture cuda graph (?:begin|end)"),
    marker(M.warmup, ENGINE, "FlashInfer autotune", r"Running FlashInfer autotune"),
    marker(M.ready, ENGINE, "fired up and ready to roll"),
    # serving: the scheduler's per-batch lines (scheduler_metrics_mixin.py)
    marker(M.traffic, ENGINE, "Prefill batch", r"Prefill batch[.,]? #new-seq"),
    marker(M.traffic, ENGINE, "Decode batch", r"Decode batch[.,]? #running-req"),
    marker(M.traffic, ENGINE, "new fill batch", r"new fill batch\. #seq"),  # SGLang 0.1 (2024)
    marker(
        M.barrier_failed,
        ENGINE,
        "could finish the model loading",
        r"could finish the model loading, but there are other ranks",
    ),
)
