"""The shape of a dialect table: which milestone a line marks, and the boot phase it proves."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from orchestrator.models.run import RankPhase


class Milestone(StrEnum):
    """What a line says about a rank's boot, in boot order (`parse_line` tries them in this
    order, so a line that says two things is read as the earlier)."""

    shards = "shards"  # shard bar update: done/total
    server_args = "server_args"
    dist_begin = "dist_begin"  # torch distributed init begins on this rank
    dist_init = "dist_init"  # torch distributed (or NCCL) is up on this rank
    load_begin = "load_begin"
    load_end = "load_end"
    warmup = "warmup"  # KV cache, memory pool, CUDA graph capture, autotune
    ready = "ready"  # the engine says it serves
    traffic = "traffic"  # it serves: batches, HTTP 200s (the postmortem's success evidence)
    barrier_failed = "barrier_failed"  # SGLang's post-load barrier ValueError on this rank
    error = "error"  # a traceback or error line worth showing


PHASE_OF: dict[Milestone, RankPhase] = {
    Milestone.shards: RankPhase.loading,
    Milestone.server_args: RankPhase.initializing,
    Milestone.dist_begin: RankPhase.initializing,
    Milestone.dist_init: RankPhase.initializing,
    Milestone.load_begin: RankPhase.loading,
    Milestone.load_end: RankPhase.loaded,
    Milestone.warmup: RankPhase.warming,
    Milestone.ready: RankPhase.serving,
    Milestone.traffic: RankPhase.serving,
}
"""The phase a milestone proves; barrier failures and errors prove none."""


@dataclass(frozen=True)
class Marker:
    """One way a dialect says a milestone: a literal keyword every such line contains (the
    prefilter) and the regex that decides; `unless` vetoes a look-alike."""

    milestone: Milestone
    engine: str | None  # sglang / vllm; None when both print it (uvicorn, tqdm, NCCL)
    keyword: str
    regex: re.Pattern[str]
    unless: re.Pattern[str] | None = None
    # printed whether or not a model is loaded (a web UI's URL): it proves its milestone only in
    # a file that also shows a model loading, loaded or answering (the postmortem's rule 6)
    needs_a_model: bool = False

    @property
    def phase(self) -> RankPhase | None:
        return PHASE_OF.get(self.milestone)

    def says(self, text: str) -> re.Match[str] | None:
        """The match when `text` holds this milestone (keyword, then regex, then veto)."""
        if self.keyword not in text:
            return None
        m = self.regex.search(text)
        if m is None or (self.unless is not None and self.unless.search(text)):
            return None
        return m


def marker(
    milestone: Milestone,
    engine: str | None,
    keyword: str,
    regex: str | None = None,
    unless: str | None = None,
    *,
    needs_a_model: bool = False,
) -> Marker:
    """A table row; the regex defaults to the keyword itself, and must contain it literally."""
    pattern = regex if regex is not None else re.escape(keyword)
    if keyword not in re.sub(r"\\(.)", r"\1", pattern):
        raise ValueError(f"keyword {keyword!r} is not literal text of {pattern!r}")
    return Marker(
        milestone,
        engine,
        keyword,
        re.compile(pattern),
        re.compile(unless) if unless else None,
        needs_a_model,
    )
