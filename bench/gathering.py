"""The tools that gather an unseen set of real logs for `cluster postmortem` (issue 29).

Helpers who gather a set never read the rules; these commands are all they run, and they never
say which rule or set uses a source, only whether one does:

    python3 bench/gathering.py check URL [URL ...]        # FREE or TAKEN for each source
    python3 bench/gathering.py tracker OWNER/REPO [...]   # NEW (no set or rule drew on it) or USED
    .venv/bin/python bench/gathering.py write --set NAME SPEC.json   # one case, re-checked
    .venv/bin/python bench/gathering.py verify --set NAME            # the lead's format check

A source is TAKEN when an earlier set's case, the corpus, a rule's cited line (the signatures and
tests/fixtures/engine-lines/) or docs/postmortem.md names it, or another case of the same set
does: GitHub threads compared by repository and number, a repository file by repository and path
whatever its ref (a docs page quoted at two commits is one source), other pages by address.
Renamed repositories are keyed together (`RENAMES`); a rename missing there lets a used
repository pass as NEW, so add one when a helper finds it.

`write` and `verify` import the bench's case schema and the product's tracker families (run them
with the project's venv); `check` and `tracker` need only the standard library.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
KEYS = ("source", "date", "date_basis", "project", "engine", "family", "label", "why", "excerpt")

# Old name -> the name GitHub redirects to (lower case): both are keyed by the second.
RENAMES = {
    "ggerganov/llama.cpp": "ggml-org/llama.cpp",
    "ggerganov/whisper.cpp": "ggml-org/whisper.cpp",
    "ggerganov/ggml": "ggml-org/ggml",
    "volcengine/verl": "verl-project/verl",
    "hiyouga/llama-factory": "hiyouga/llamafactory",
    "thudm/chatglm3": "zai-org/chatglm3",
    "thudm/glm-4": "zai-org/glm-4",
    "thudm/cogvlm": "zai-org/cogvlm",
    "thudm/chatglm-6b": "zai-org/chatglm-6b",
    "thudm/chatglm2-6b": "zai-org/chatglm2-6b",
    "jmorganca/ollama": "ollama/ollama",
    # found by the fiftieth and fifty-first sets' helpers (a used repository passing as NEW)
    "pygmalionai/aphrodite-engine": "dphnai/sonar",
    "substratusai/kubeai": "kubeai-project/kubeai",
    "oobabooga/text-generation-webui": "oobabooga/textgen",
    "microsoft/deepspeed-mii": "deepspeedai/deepspeed-mii",
    "microsoft/deepspeed": "deepspeedai/deepspeed",
    "go-skynet/localai": "mudler/localai",
    "runpod/worker-vllm": "runpod-workers/worker-vllm",
    "meta-llama/llama-stack-apps": "ogx-ai/llama-stack-apps",
    "kubeflow/training-operator": "kubeflow/trainer",
    "modelscope/swift": "modelscope/ms-swift",
    "qwenlm/qwen2-vl": "qwenlm/qwen3-vl",
    "thudm/visualglm-6b": "zai-org/visualglm-6b",
}
URL = re.compile(r"https?://[^\s\"'<>`)\]]+")
BLOB = re.compile(
    r"^https?://(?:www\.)?github\.com/([^/]+/[^/#?]+)/(?:blob|raw|tree)/[^/]+/([^#?]+)"
)
RAW = re.compile(r"^https?://raw\.githubusercontent\.com/([^/]+/[^/]+)/[^/]+/([^#?]+)")
THREAD = re.compile(
    r"^https?://(?:www\.)?github\.com/([^/]+/[^/#?]+)/(?:issues|pull|discussions)/(\d+)"
)


def repo_key(repo: str) -> str:
    repo = repo.lower().strip("/").removesuffix(".git")
    return RENAMES.get(repo, repo)


def source_key(url: str) -> str:
    """One key per source, whatever the spelling of its address."""
    url = url.strip().rstrip(".,;:")
    if m := BLOB.match(url) or RAW.match(url):
        return f"file:{repo_key(m.group(1))}:{m.group(2)}"
    if m := THREAD.match(url):
        return f"gh:{repo_key(m.group(1))}#{m.group(2)}"
    page = re.sub(r"[#?].*$", "", url.lower())
    return "web:" + re.sub(r"^https?://(www\.)?", "", page).rstrip("/")


def _case_files(exclude_set: str | None = None) -> list[Path]:
    return [
        p
        for p in sorted(FIXTURES.glob("postmortem-*/cases/*.yaml"))
        if exclude_set is None or p.parent.parent.name != f"postmortem-{exclude_set}"
    ]


def _case_sources(files: list[Path]) -> set[str]:
    keys = set()
    for path in files:  # only the `source:` line: an excerpt's own URLs are not its source
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("source:"):
                keys.add(source_key(line.split(":", 1)[1].strip().strip("\"'")))
    return keys


def _rule_sources() -> set[str]:
    files = [
        *sorted((REPO / "orchestrator" / "postmortem" / "signatures").glob("*.yaml")),
        *sorted((FIXTURES / "engine-lines").glob("*.yaml")),
        REPO / "docs" / "postmortem.md",
    ]
    return {
        source_key(u)
        for f in files
        if f.exists()
        for u in URL.findall(f.read_text(encoding="utf-8", errors="replace"))
    }


def taken_keys() -> set[str]:
    return _case_sources(_case_files()) | _rule_sources()


def used_repositories(keys: set[str]) -> set[str]:
    return {k[3:].split("#")[0] for k in keys if k.startswith("gh:")} | {
        k.split(":")[1] for k in keys if k.startswith("file:")
    }


def _set_dir(name: str) -> Path:
    if not re.fullmatch(r"[a-z]+", name):
        raise SystemExit(f"error: --set {name!r}: a set's name is lower-case letters (fiftyfirst)")
    return FIXTURES / f"postmortem-{name}" / "cases"


def write_case(set_name: str, spec_path: Path) -> int:
    import yaml

    sys.path.insert(0, str(REPO))
    from bench.postmortem_third import ThirdCase
    from orchestrator.postmortem.signatures import tracker_family

    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    letter, slug = spec.pop("letter", ""), spec.pop("slug", "")
    if not re.fullmatch(r"[a-z]", letter) or not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", slug):
        print("REFUSED: letter a-z and a slug of a-z0-9 words joined by -")
        return 2
    if source_key(spec.get("source", "")) in taken_keys():
        print("REFUSED: source TAKEN (an earlier set, a rule or this set uses that source)")
        return 2
    spec["family"] = tracker_family(spec.get("project", ""))
    missing, extra = [k for k in KEYS if k not in spec], [k for k in spec if k not in KEYS]
    if missing or extra:
        print(f"REFUSED: missing keys {missing}, unknown keys {extra}")
        return 2
    doc = {k: spec[k] for k in KEYS}

    class Dumper(yaml.SafeDumper):  # a multi-line excerpt as a literal block, byte for byte
        pass

    def literal(dumper: yaml.SafeDumper, s: str) -> yaml.Node:
        return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)

    Dumper.add_representer(str, literal)
    out = _set_dir(set_name)
    out.mkdir(parents=True, exist_ok=True)
    n = 1 + max((int(p.name[2:6]) for p in out.glob(f"{letter}-*.yaml")), default=0)
    path = out / f"{letter}-{n:04d}-{slug}.yaml"
    text = yaml.dump(doc, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=10**6)
    back = yaml.safe_load(text)
    if {**back, "date": str(back["date"])} != {**doc, "date": str(doc["date"])}:
        print("REFUSED: the YAML did not load back to the same text (tell the lead)")
        return 2
    try:
        ThirdCase.model_validate({"name": path.name, **back})
    except Exception as exc:  # the bench's own schema, its first lines
        print(f"REFUSED: {str(exc).splitlines()[0:3]}")
        return 2
    path.write_text(text, encoding="utf-8")
    print(f"WROTE {path}")
    return 0


def verify(set_name: str) -> int:
    """The lead's check before the score: keys in order, the schema, `family`, no source an
    earlier set or a rule names, none twice. Reads keys, never an excerpt's verdict."""
    import yaml

    sys.path.insert(0, str(REPO))
    from bench.postmortem_third import ThirdCase
    from orchestrator.postmortem.signatures import tracker_family

    others, rules = _case_sources(_case_files(exclude_set=set_name)), _rule_sources()
    problems: list[str] = []
    seen: Counter[str] = Counter()
    rows = []
    for path in sorted(_set_dir(set_name).glob("*.yaml")):
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        if tuple(raw) != KEYS:
            problems.append(f"{path.name}: keys {list(raw)}")
        try:
            case = ThirdCase.model_validate({"name": path.name, **raw})
        except Exception as exc:
            problems.append(f"{path.name}: schema {str(exc).splitlines()[0]}")
            continue
        if case.family != tracker_family(case.project):
            problems.append(f"{path.name}: family {case.family} != {tracker_family(case.project)}")
        key = source_key(case.source)
        problems += [f"{path.name}: source used by an earlier set"] * (key in others)
        problems += [f"{path.name}: source cited by a rule"] * (key in rules)
        seen[key] += 1
        rows.append(case)
    problems += [f"source twice: {k}" for k, n in seen.items() if n > 1]
    print(f"{len(rows)} cases, {len(problems)} problems")
    for p in problems:
        print("  " + p)
    for what, values in (
        ("labels", [c.label for c in rows]),
        ("families", [c.family for c in rows]),
        ("engines", [c.engine for c in rows]),
        ("years", [str(c.date)[:4] for c in rows]),
        ("per helper", [c.name[0] for c in rows]),
    ):
        print(f"{what}:", dict(Counter(values).most_common()))
    print("repositories:", len({c.project.lower() for c in rows}))
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check").add_argument("urls", nargs="+")
    sub.add_parser("tracker").add_argument("repos", nargs="+")
    w = sub.add_parser("write")
    w.add_argument("--set", required=True, dest="set_name")
    w.add_argument("spec", type=Path)
    v = sub.add_parser("verify")
    v.add_argument("--set", required=True, dest="set_name")
    args = ap.parse_args(argv)
    if args.cmd == "check":
        keys = taken_keys()
        for url in args.urls:
            print(("TAKEN " if source_key(url) in keys else "FREE  ") + url)
        return 0
    if args.cmd == "tracker":
        used = used_repositories(taken_keys())
        for repo in args.repos:
            print(("USED  " if repo_key(repo) in used else "NEW   ") + repo)
        return 0
    if args.cmd == "write":
        return write_case(args.set_name, args.spec)
    return verify(args.set_name)


if __name__ == "__main__":
    sys.exit(main())
