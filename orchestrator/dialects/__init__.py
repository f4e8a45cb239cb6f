"""What the engines print, as data: one table per dialect, read by everyone who reads a log.

    timestamps.py  the time forms: docker's RFC 3339 prefix, the engines' own stamps (no imports
                   from above: the runtime, followers and status use it without the supervisor)
    base.py        Milestone, Marker (milestone, engine, keyword, regex) and the phase each
                   milestone proves (`RankPhase`)
    sglang.py      SGLang's milestones, success markers and the texts the simulator prints
    vllm.py        vLLM's
    common.py      what both print through shared libraries: tqdm shard bars, uvicorn, NCCL,
                   torch.distributed, and the generic error lines
    reader.py      all tables as one: `parse_line` (the supervisor's reducer and the live status
                   replay), `MARKERS` (the postmortem timeline), `may_mark` (a batch prefilter)

Each pattern matches the stable part of a real line kept in `tests/fixtures/engine-lines/`
(engine, version and source there); `tests/unit/core/test_dialects.py` runs the corpus through it.
"""
