"""Failure signatures as data: load `signatures/*.yaml`, validate them, compile them.

A signature names one way a boot dies: the stable part of the real message (one or more
regexes, each with a literal `keyword` every match contains, so the scan can find candidate
lines with a fast substring search before any regex runs), or an exit state (OOMKilled, exit
137, death within seconds of start), what it means, what to change (the concrete recipe flag or
environment variable) and where it was seen (public sources, and corpus ids of real lines kept
in `tests/fixtures/engine-lines/` that the tests run through the matcher).

Patterns stay inside what `grep -E` understands (`to_ere` converts them and refuses the rest:
lookarounds, backreferences, inline flags), so an on-call engineer can grep a copied run with
the same patterns, and the scan benchmark compares against grep on equal terms.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import BeforeValidator, Field, ValidationError, model_validator

from orchestrator.errors import ConfigError
from orchestrator.models.base import StrictModel
from orchestrator.yamlio import YamlProblem, load_yaml

SIGNATURES_DIR = Path(__file__).resolve().parent / "signatures"
_CLoader: Any = getattr(yaml, "CSafeLoader", None)  # libyaml, when PyYAML was built with it

Category = Literal[
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
    "gpu-fault",  # the node's GPU or its bus failed (NVRM Xid, from the node's kernel log)
    "disk",  # the node's storage failed under the rank (I/O errors, hung tasks)
    "ready",
    "unknown",
]
CATEGORIES: tuple[str, ...] = get_args(Category)

TRACKER_FAMILIES: tuple[str, ...] = (
    "vllm",
    "sglang",
    "torch-nccl",
    "containerd-moby",
    "hf",
    "kernels",
    "other",
)
"""Where a rule was written from, by the tracker its text was pasted in (docs/postmortem.md:
measuring generalisation). `tracker_family` maps an `owner/repo` to one."""

_TRACKERS: tuple[tuple[str, str], ...] = (
    (r"^vllm-project/", "vllm"),
    (r"^sgl-project/", "sglang"),
    (r"^(?:pytorch/|NVIDIA/nccl|NVIDIA/nccl-tests|facebookincubator/gloo)", "torch-nccl"),
    (r"^(?:containerd/|moby/|docker/|containers/|opencontainers/|kubernetes/)", "containerd-moby"),
    (r"^huggingface/", "hf"),
    (
        r"^(?:flashinfer-ai/|Dao-AILab/|triton-lang/|deepseek-ai/DeepGEMM|deepseek-ai/DeepEP|"
        r"NVIDIA/cutlass|NVIDIA/TransformerEngine|openai/triton)",
        "kernels",
    ),
)


def tracker_family(project: str) -> str:
    """The tracker family of an `owner/repo` (or of a github.com URL): one of TRACKER_FAMILIES."""
    project = re.sub(r"^https://github\.com/", "", project)
    for pattern, fam in _TRACKERS:
        if re.match(pattern, project):
            return fam
    return "other"


Role = Literal["cause", "cascade", "barrier", "symptom", "notice"]
"""How a match bears on blame.

cause    the rank that printed it failed for this reason (an OOM, a refused flag, a bad NIC)
cascade  usually the echo of another rank's death (NCCL watchdog, remote process exited):
         it blames a peer, not the rank that printed it
barrier  SGLang's post-load barrier: printed by ranks that FINISHED loading; it blames the
         ranks that did not (the straggler)
symptom  something failed but the line says not what (a traceback's first line, "see root
         cause above"): it dates the failure and defers to a cause on the same rank
notice   a slow-progress notice (vLLM's "No available shared memory broadcast block found in
         60 seconds", printed at INFO while workers compile or load): shown in the timeline and
         the signature list, never failure evidence by itself (issue 29: the third set's
         slow-but-healthy boots read as timeouts)
"""

_ID = r"^[a-z0-9]+(-[a-z0-9]+)*$"
_FLAG = re.compile(r"^--[a-z0-9][a-z0-9-]*$")
_ENV = re.compile(r"^[A-Z][A-Za-z0-9_]*$")
_UNESCAPE = re.compile(r"\\(.)")


def _as_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _one_or_many(value: Any) -> Any:
    if isinstance(value, str):
        return (value,)
    return _as_tuple(value)


Strings = Annotated[tuple[str, ...], BeforeValidator(_as_tuple)]


class Pattern(StrictModel):
    """One regex over one line (or `lines` consecutive lines joined by a newline)."""

    regex: str = Field(min_length=4)
    keyword: Annotated[tuple[str, ...], BeforeValidator(_one_or_many)] = Field(
        min_length=1,
        description="literal text every match contains (one of, if several): the prefilter",
    )
    lines: int = Field(default=1, ge=1, le=4, description="window: this line and the next N-1")

    @model_validator(mode="after")
    def _check(self) -> Pattern:
        try:
            re.compile(self.regex)
        except re.error as exc:
            raise ValueError(f"regex {self.regex!r} does not compile: {exc}") from exc
        to_ere(self.regex)  # refuses what grep -E cannot run
        literal = _UNESCAPE.sub(r"\1", self.regex)
        for kw in self.keyword:
            if len(kw) < 4:
                raise ValueError(
                    f"keyword {kw!r} is too short to prefilter (4 characters at least)"
                )
            if kw not in literal:
                raise ValueError(f"keyword {kw!r} is not literal text of regex {self.regex!r}")
        return self


class ExitRule(StrictModel):
    """Evidence from a rank's exit state rather than its words. Every field given must hold."""

    oom_killed: bool | None = None
    codes: Annotated[tuple[int, ...], BeforeValidator(_as_tuple)] = ()
    within_s: float | None = Field(default=None, gt=0, description="died this soon after start")
    silent: bool = Field(default=False, description="printed no engine line before it died")
    first: bool = Field(default=False, description="died before any other rank showed a failure")

    @model_validator(mode="after")
    def _check(self) -> ExitRule:
        if not any(
            (self.oom_killed is not None, self.codes, self.within_s, self.silent, self.first)
        ):
            raise ValueError("an exit rule needs at least one condition")
        return self


class Change(StrictModel):
    """One concrete thing to change in a recipe: a flag (and value) or an environment variable."""

    flag: str | None = None
    env: str | None = None
    value: str | None = None
    engine: Literal["sglang", "vllm"] | None = Field(
        default=None, description="only for recipes of this engine"
    )
    note: str = ""

    @model_validator(mode="after")
    def _check(self) -> Change:
        if (self.flag is None) == (self.env is None):
            raise ValueError("a change names exactly one of `flag` and `env`")
        if self.flag is not None and not _FLAG.match(self.flag):
            raise ValueError(f"{self.flag!r} is not a --long-flag")
        if self.env is not None and not _ENV.match(self.env):
            raise ValueError(f"{self.env!r} is not an environment variable name")
        return self

    @property
    def name(self) -> str:
        return self.flag or self.env or ""

    def render(self) -> str:
        if self.flag is not None:
            return f"{self.flag} {self.value}" if self.value else self.flag
        return f"{self.env}={self.value}" if self.value is not None else f"{self.env}"


class Signature(StrictModel):
    id: str = Field(pattern=_ID)
    title: str = Field(min_length=3)
    category: Category
    role: Role = "cause"
    waits: bool = Field(
        default=False,
        description="a timeout waiting on peers: when another rank failed before, a consequence",
    )
    weak: bool = Field(
        default=False,
        description="generic evidence (a bare `Killed`): the cause only when no other "
        "signature of the rank, or of an earlier rank, says more",
    )
    follows: Annotated[tuple[Category, ...], BeforeValidator(_as_tuple)] = Field(
        default=(),
        description="failures that bring this one about on the same rank (a task hung in D "
        "state after the GPU driver's Xid waits on the driver): an earlier line of one of "
        "these categories decides instead",
    )
    engine_category: dict[str, Category] = Field(
        default_factory=dict,
        description="the category when the rank runs this engine (SGLang's scheduler start "
        "wraps a gloo monitoredBarrier: there it is the post-load barrier)",
    )
    engines: Strings = Field(min_length=1)
    versions: str = Field(min_length=1, description="where known; 'any' or 'unknown' otherwise")
    patterns: Annotated[tuple[Pattern, ...], BeforeValidator(_as_tuple)] = Field(min_length=1)
    unless: Strings = Field(default=(), description="regexes that veto a match on the same line")
    exit: Annotated[tuple[ExitRule, ...], BeforeValidator(_as_tuple)] = Field(
        default=(), description="exit states that are evidence too (any of)"
    )
    meaning: str = Field(min_length=10)
    remedy: str = Field(min_length=10)
    changes: Annotated[tuple[Change, ...], BeforeValidator(_as_tuple)] = ()
    sources: Strings = Field(min_length=1)
    fixtures: Strings = Field(min_length=1, description="corpus ids of real lines it must match")
    provenance: Strings = Field(
        default=(),
        description="the tracker families (TRACKER_FAMILIES) it was written from: those of the "
        "train cases of tests/fixtures/postmortem-corpus it names rightly, else those of its "
        "sources' URLs; written by `bench/postmortem_corpus.py --calibrate`",
    )

    @model_validator(mode="after")
    def _check(self) -> Signature:
        if self.category in ("ready",):
            raise ValueError("`ready` is an outcome, not a failure signature")
        for regex in self.unless:
            try:
                re.compile(regex)
            except re.error as exc:
                raise ValueError(f"unless regex {regex!r} does not compile: {exc}") from exc
        for fam in self.provenance:
            if fam not in TRACKER_FAMILIES:
                raise ValueError(f"provenance {fam!r} is not one of {', '.join(TRACKER_FAMILIES)}")
        for source in self.sources:
            if not (source.startswith("https://") or source.startswith("seeds/")):
                raise ValueError(f"source {source!r} is neither a URL nor a seed reference")
        return self


@dataclass(frozen=True)
class Compiled:
    """A signature with its regexes compiled (index `i` in `regexes` is `patterns[i]`).

    Compiled on first use: the scan reaches a signature's regexes only when one of its keywords
    is on a line, so most of the 300-odd signatures are never compiled for a given log (their
    compiling was a quarter of `cluster postmortem`'s start-up). The model validated each
    pattern when the file was read (`Signature`), so a bad one never gets this far."""

    sig: Signature
    file: str

    @property
    def id(self) -> str:
        return self.sig.id

    @cached_property
    def regexes(self) -> tuple[re.Pattern[str], ...]:
        return tuple(re.compile(p.regex) for p in self.sig.patterns)

    @cached_property
    def unless(self) -> tuple[re.Pattern[str], ...]:
        return tuple(re.compile(u) for u in self.sig.unless)

    def vetoed(self, text: str) -> bool:
        return any(u.search(text) for u in self.unless)

    def search(self, text: str) -> re.Match[str] | None:
        """The first pattern that matches `text` (a line, or a window joined by newlines)."""
        if self.vetoed(text):
            return None
        for regex in self.regexes:
            if m := regex.search(text):
                return m
        return None


@dataclass(frozen=True)
class KeywordEntry:
    """What a keyword hit asks the scan to try: (signature index, pattern index) pairs."""

    keyword: bytes
    targets: tuple[tuple[int, int], ...]


class SignatureSet:
    """All signatures, compiled, with the keyword table the scan prefilters on."""

    def __init__(self, compiled: Sequence[Compiled]) -> None:
        self.compiled: tuple[Compiled, ...] = tuple(compiled)
        self.by_id: dict[str, Compiled] = {c.id: c for c in self.compiled}
        table: dict[bytes, list[tuple[int, int]]] = {}
        for si, c in enumerate(self.compiled):
            for pi, pattern in enumerate(c.sig.patterns):
                for kw in pattern.keyword:
                    table.setdefault(kw.encode("utf-8"), []).append((si, pi))
        # Longer keywords first: the substring search skips further with longer needles.
        self.keywords: tuple[KeywordEntry, ...] = tuple(
            KeywordEntry(k, tuple(v)) for k, v in sorted(table.items(), key=lambda kv: -len(kv[0]))
        )

    def __len__(self) -> int:
        return len(self.compiled)

    def __iter__(self) -> Iterator[Compiled]:
        return iter(self.compiled)

    def __getitem__(self, sig_id: str) -> Compiled:
        return self.by_id[sig_id]

    def match_text(self, text: str) -> list[Compiled]:
        """Every signature whose patterns match `text` (one line, or lines joined by \\n).

        The slow path the scan's prefilter must agree with: keyword first, then the regex.
        """
        found: list[Compiled] = []
        for c in self.compiled:
            for pattern, regex in zip(c.sig.patterns, c.regexes, strict=True):
                if not any(kw in text for kw in pattern.keyword):
                    continue
                if not c.vetoed(text) and regex.search(text):
                    found.append(c)
                    break
        return found

    def ere_patterns(self) -> list[str]:
        """Every pattern as a POSIX extended regex (what `grep -E -f` takes)."""
        return [to_ere(p.regex) for c in self.compiled for p in c.sig.patterns]


# -- loading ---------------------------------------------------------------------------------


def _problems(exc: ValidationError, where: str) -> list[str]:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(part) for part in err["loc"])
        lines.append(f"{where}{':' + loc if loc else ''}: {err['msg']}")
    return lines


def _read(path: Path, *, fast: bool) -> Any:
    """A signature file's document. The shipped files are parsed by libyaml's C parser (20x
    the pure-Python one: it was most of `cluster postmortem`'s start-up); the tests hold every
    shipped file to the strict loader (duplicate keys, size), and any file the C parser
    refuses is read again by the strict one for its one-line error."""
    if fast and _CLoader is not None:
        try:
            return yaml.load(path.read_bytes(), Loader=_CLoader)  # noqa: S506 (a safe loader)
        except (OSError, yaml.YAMLError):
            pass
    return load_yaml(path)


def load_signature_files(paths: Iterable[Path], *, fast: bool = False) -> SignatureSet:
    """Load, validate and compile signature files; every problem of every file in one error."""
    compiled: list[Compiled] = []
    problems: list[str] = []
    seen: dict[str, str] = {}
    for path in sorted(paths):
        try:
            document = _read(path, fast=fast)
        except YamlProblem as exc:
            problems.append(f"{path}: {exc}")
            continue
        if not isinstance(document, list):
            problems.append(f"{path}: expected a list of signatures")
            continue
        for i, raw in enumerate(document):
            where = f"{path.name}[{i}]"
            if isinstance(raw, dict) and isinstance(raw.get("id"), str):
                where = f"{path.name}:{raw['id']}"
            try:
                sig = Signature.model_validate(raw)
            except ValidationError as exc:
                problems.extend(_problems(exc, where))
                continue
            if sig.id in seen:
                problems.append(f"{where}: duplicate id (first in {seen[sig.id]})")
                continue
            seen[sig.id] = path.name
            compiled.append(Compiled(sig=sig, file=path.name))
    if problems:
        raise ConfigError(
            problems[0],
            where="postmortem signatures",
            hint="fix the signature file (docs/postmortem.md: adding a signature)",
            more=tuple(problems[1:]),
        )
    if not compiled:
        raise ConfigError("no signatures found", where=str(SIGNATURES_DIR))
    return SignatureSet(compiled)


@cache
def load_signatures(directory: Path | None = None) -> SignatureSet:
    """The shipped signatures (or those of `directory`), read once per process."""
    folder = directory or SIGNATURES_DIR
    if directory is None:
        return _shipped(sorted(folder.glob("*.yaml")))
    return load_signature_files(folder.glob("*.yaml"), fast=False)


def _cache_file(paths: Sequence[Path]) -> Path | None:
    """Where the validated shipped signatures are kept between runs, named by what they were
    made from (each file's name, size and mtime; this module's; Python's and pydantic's
    versions), so an edited file or an upgrade is never served stale."""
    import hashlib
    import sys

    import pydantic

    try:
        stats = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in paths]
        me = Path(__file__).stat()
    except OSError:
        return None
    key = repr((stats, me.st_size, me.st_mtime_ns, sys.version, pydantic.VERSION))
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cluster" / f"postmortem-signatures-{digest}.pickle"


def _shipped(paths: Sequence[Path]) -> SignatureSet:
    """The shipped signatures: validated once, then read back from the cache (YAML parsing
    and validation were a third of `cluster postmortem`'s start-up). The cache is only an
    optimisation: any problem with it and the files are read as always."""
    import pickle

    cache_file = _cache_file(paths)
    if cache_file is not None and cache_file.is_file():
        try:
            with cache_file.open("rb") as fh:
                pairs = pickle.load(fh)  # noqa: S301 (our own file, named by its inputs)
            return SignatureSet([Compiled(sig=sig, file=file) for sig, file in pairs])
        except Exception:  # unreadable or another format: read the files and write it anew
            with contextlib.suppress(OSError):
                cache_file.unlink(missing_ok=True)
    sigs = load_signature_files(paths, fast=True)
    if cache_file is not None:
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(pickle.dumps([(c.sig, c.file) for c in sigs]))
            tmp.replace(cache_file)
        except OSError:
            pass
    return sigs


# -- grep -E ------------------------------------------------------------------------------------

_CLASS_ESCAPES = {"d": "0-9", "s": "[:space:]", "w": "[:alnum:]_"}
_ESCAPES = {
    "d": "[0-9]",
    "D": "[^0-9]",
    "s": "[[:space:]]",
    "S": "[^[:space:]]",
    "w": "[[:alnum:]_]",
    "W": "[^[:alnum:]_]",
}
_KEEP_ESCAPED = set(".[]()*+?{}|^$\\/")


def to_ere(regex: str) -> str:
    """`regex` in POSIX ERE for `grep -E`; ValueError for what ERE cannot say.

    Handles the subset signatures use: \\d \\s \\S \\w, (?:...), lazy quantifiers (made greedy:
    same lines match), escaped punctuation. Refuses lookarounds, backreferences, named groups,
    inline flags and \\b-style anchors that GNU grep spells differently.
    """
    out: list[str] = []
    i, n = 0, len(regex)
    while i < n:
        ch = regex[i]
        if ch == "\\":
            if i + 1 >= n:
                raise ValueError("trailing backslash")
            nxt = regex[i + 1]
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
            elif nxt.isdigit() or nxt in "bBAZzG":
                raise ValueError(f"\\{nxt} has no ERE equivalent here")
            elif nxt in "nrt":
                raise ValueError(f"\\{nxt}: match line content, not control characters")
            elif nxt in _KEEP_ESCAPED:
                out.append("\\" + nxt)
            else:
                out.append(nxt)  # an escaped ordinary character is that character
            i += 2
            continue
        if ch == "[":
            j = i + 1
            body: list[str] = []
            if j < n and regex[j] == "^":
                body.append("^")
                j += 1
            if j < n and regex[j] == "]":
                body.append("]")
                j += 1
            while j < n and regex[j] != "]":
                if regex[j] == "\\" and j + 1 < n:
                    esc = regex[j + 1]
                    if esc in _CLASS_ESCAPES:
                        body.append(_CLASS_ESCAPES[esc])
                    elif esc == "]":
                        raise ValueError("escaped ] inside a class: put ] first instead")
                    elif esc == "-":
                        body.append("-")  # ERE: a literal '-' goes last; keep it simple
                    else:
                        body.append(esc)
                    j += 2
                    continue
                body.append(regex[j])
                j += 1
            if j >= n:
                raise ValueError("unterminated character class")
            out.append("[" + "".join(body) + "]")
            i = j + 1
            continue
        if ch == "(":
            if regex.startswith("(?:", i):
                out.append("(")
                i += 3
                continue
            if regex.startswith("(?", i):
                raise ValueError("lookarounds, named groups and inline flags have no ERE form")
            out.append("(")
            i += 1
            continue
        if ch in "*+?}" and i + 1 < n and regex[i + 1] == "?":
            out.append(ch)  # lazy -> greedy: whether a line matches does not change
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)
