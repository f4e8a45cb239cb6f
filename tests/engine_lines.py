"""The corpus of real engine log lines (`tests/fixtures/engine-lines/*.yaml`), loaded and checked.

Test support, not product code: the simulator's goldens, the load-progress parser and the
postmortem signatures all test against these lines, so they all read them through here.

    from tests.engine_lines import by_id, load_corpus, with_kind

    line = by_id("sglang-load-weight-end").text
    for entry in with_kind("barrier"): ...

Every entry is a line (or a few lines) copied from a public source or a capture, with the engine,
version and source; the README beside the YAML files says how to add one.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

CORPUS_DIR = Path(__file__).resolve().parent / "fixtures" / "engine-lines"

Engine = Literal[
    "sglang",
    "vllm",
    "nccl",
    "gloo",
    "torch",
    "ray",
    "docker",
    "containerd",
    "triton",
    "flashinfer",
    "transformers",
    "mistral-common",
    "glibc",
    "uvicorn",
    "other",
]

# A public address, a place in a seed report, or a capture kept in this repository.
SOURCE_PATTERN = re.compile(r"^(https://\S+|seeds/00[0-9]\b.*|captured: tests/fixtures/\S+)$")
ID_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"


class EngineLine(BaseModel):
    """One real log line (or a short block of lines) and where it was seen."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=ID_PATTERN, description="unique across the corpus, kebab-case")
    engine: Engine = Field(description="the program that printed it")
    version: str = Field(min_length=1, description='as precise as the source allows, or "unknown"')
    source: str = Field(
        min_length=1, description="public URL, `seeds/NNN place`, or `captured: path`"
    )
    kind: tuple[str, ...] = Field(
        min_length=1, description="free tags: progress, load-end, error, …"
    )
    benign: bool = Field(description="seen in healthy boots: never the cause of a failure")
    line: str | None = Field(default=None, min_length=1)
    lines: tuple[str, ...] | None = Field(default=None, min_length=2)
    paraphrase: bool = Field(default=False, description="the source's words, not the program's")
    fragment: bool = Field(default=False, description="a verbatim part of a longer line")
    note: str | None = None
    file: str = Field(default="", description="the YAML file it came from (set by the loader)")

    @model_validator(mode="after")
    def _one_of_line_or_lines(self) -> EngineLine:
        if (self.line is None) == (self.lines is None):
            raise ValueError("give exactly one of `line` and `lines`")
        if not SOURCE_PATTERN.match(self.source):
            raise ValueError(f"source {self.source!r} is neither a URL nor a seed or capture")
        return self

    @property
    def text(self) -> str:
        """The line, or the block's lines joined with newlines."""
        return self.line if self.line is not None else "\n".join(self.lines or ())


def corpus_files() -> list[Path]:
    return sorted(CORPUS_DIR.glob("*.yaml"))


def load_corpus() -> list[EngineLine]:
    """Every entry of every corpus file, validated, in file order (read once, then cached)."""
    return list(_load())


@cache
def _load() -> tuple[EngineLine, ...]:
    entries: list[EngineLine] = []
    for path in corpus_files():
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(document, list):
            raise ValueError(f"{path.name}: expected a list of entries")
        for raw in document:
            if not isinstance(raw, dict):
                raise ValueError(f"{path.name}: an entry is not a mapping: {raw!r}")
            entries.append(EngineLine.model_validate({**raw, "file": path.name}))
    return tuple(entries)


def by_id(entry_id: str) -> EngineLine:
    """The entry called `entry_id`; KeyError names it when there is none."""
    for entry in _load():
        if entry.id == entry_id:
            return entry
    raise KeyError(f"no engine line {entry_id!r} in {CORPUS_DIR}")


def with_kind(tag: str) -> list[EngineLine]:
    """Every entry tagged `tag`."""
    return [entry for entry in _load() if tag in entry.kind]
