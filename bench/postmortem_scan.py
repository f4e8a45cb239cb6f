"""Benchmark: the postmortem's streaming scan against `grep -E` with the same patterns, one run.

    .venv/bin/python bench/postmortem_scan.py [--ranks 8] [--mb 100] [--repeat 3]

Writes RANKS rank logs of MB megabytes each in a temporary folder, in the run directory's shape
(`docker logs --timestamps` lines), drawn from the real-line corpus
(tests/fixtures/engine-lines/): 60% progress lines (tqdm shard and CUDA-graph bars), 39% other
lines healthy engines print (server args, INFO, warnings; not docker's own CLI chatter), 1%
failure lines. Then, `repeat`
times and interleaved so both see the same machine load, it times:

  scan     what `cluster postmortem` runs on those files (timeline.scan_files: keyword
           prefilter, every signature regex, milestones, line numbers, timestamps), with its
           default parallelism, and again in one process;
  grep -E  `grep -E -n -H -f PATTERNS FILES` where PATTERNS are the same signature patterns and
           milestone regexes converted to POSIX ERE (signatures.to_ere), its output read from a
           pipe (on /dev/null GNU grep stops at the first match); in the C locale (grep's
           fastest) and in the caller's locale, and with the signature patterns alone.

and prints MB/s (medians) and the ratio scan / fastest grep. Target: 0.5x grep or better.

    .venv/bin/python bench/postmortem_scan.py --whole [--mb 100] [--repeat 3]

The user's view instead (issue 29): ONE rank log of MB megabytes of healthy SGLang lines from
the same corpus (progress bars and the other lines SGLang prints) ending in one failure, and,
interleaved, the whole `cluster postmortem --logs FILE --json` (a new process: start-up, scan,
diagnosis, JSON) against `grep -E -c` with a dozen alternatives (the failure words an on-call
engineer would try) over the same file, in LC_ALL=C and in the caller's locale; then the
start-up alone (a one-line log). Targets: <= 10x grep, start-up <= 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.postmortem.signatures import load_signatures, to_ere  # noqa: E402
from orchestrator.postmortem.timeline import MARKERS, ScanJob, scan_files  # noqa: E402
from tests.engine_lines import load_corpus  # noqa: E402

PROGRESS_TAGS = {"shards", "cuda-graph", "cr-joined", "progress"}


def corpus_pools() -> tuple[list[str], list[str], list[str]]:
    progress: list[str] = []
    benign: list[str] = []
    failures: list[str] = []
    for entry in load_corpus():
        if entry.paraphrase:
            continue
        texts = list(entry.lines) if entry.lines else [entry.line or ""]
        if entry.benign and PROGRESS_TAGS & set(entry.kind):
            progress.extend(texts)
        elif entry.benign and entry.engine not in ("docker", "containerd"):
            benign.extend(texts)  # docker CLI chatter (image loads) is not in rank logs
        else:
            failures.extend(texts)
    return progress, benign, failures


def write_log(path: Path, size: int, rng: random.Random) -> None:
    progress, benign, failures = corpus_pools()
    pools = (progress, benign, failures)
    weights = (60, 39, 1)
    t = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
    step = timedelta(microseconds=1500)
    written = 0
    with path.open("w", encoding="utf-8", newline="") as fh:
        while written < size:
            chosen = rng.choices(pools, weights, k=4096)
            out = []
            for pool in chosen:
                t += step
                stamp = t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond:06d}000Z"
                out.append(f"{stamp} {rng.choice(pool)}\n")
            block = "".join(out)
            fh.write(block)
            written += len(block.encode())


def grep_patterns(path: Path, *, milestones: bool = True) -> Path:
    """The scan's patterns in ERE: every signature pattern, and the milestone regexes."""
    sigs = load_signatures()
    patterns = sigs.ere_patterns()
    if milestones:
        patterns += [to_ere(m.regex.pattern) for m in MARKERS]
    path.write_text("\n".join(patterns) + "\n", encoding="utf-8")
    return path


def time_grep(patterns: Path, files: list[Path], locale: str | None) -> float:
    env = dict(os.environ)
    if locale is not None:
        env["LC_ALL"] = locale
    # Output goes to a pipe we drain: with stdout on /dev/null GNU grep stops at the first match.
    started = time.perf_counter()
    proc = subprocess.Popen(
        ["grep", "-E", "-n", "-H", "-f", str(patterns), *map(str, files)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    lines = 0
    while chunk := proc.stdout.read(1 << 20):
        lines += chunk.count(b"\n")
    err = proc.stderr.read() if proc.stderr else b""
    code = proc.wait()
    elapsed = time.perf_counter() - started
    if code not in (0, 1):
        raise SystemExit(f"grep failed: {err.decode(errors='replace')[-400:]}")
    return elapsed


def time_scan(files: list[Path], workers: int | None) -> tuple[float, int]:
    sigs = load_signatures()
    jobs = [ScanJob(f, f.name) for f in files]
    started = time.perf_counter()
    scans = scan_files(jobs, sigs, workers=workers)
    elapsed = time.perf_counter() - started
    return elapsed, sum(sum(s.counts.values()) for s in scans)


# what one greps for by hand: a dozen alternatives
GREP_WORDS = (
    "Traceback|Error|error:|out of memory|OOM|Killed|Watchdog|timed out|NCCL WARN|"
    "failed|Exception|RuntimeError"
)
LAST_FAILURE = (
    "[2026-11-29 11:02:03 TP0] Watchdog timeout (self.watchdog_timeout=300)",
    "[2026-11-29 11:02:04] Received sigquit from a child process. It usually means the child "
    "failed.",
)


def write_sglang_log(path: Path, size: int, rng: random.Random) -> None:
    """Healthy SGLang lines (progress 60%, other 40%) and one failure at the end."""
    progress, benign, _ = corpus_pools()
    sglang = [e for e in load_corpus() if e.engine == "sglang" and e.benign and not e.paraphrase]
    mine = [t for e in sglang for t in (list(e.lines) if e.lines else [e.line or ""])]
    pools = (progress, mine or benign)
    t = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
    step = timedelta(microseconds=1500)
    written = 0
    with path.open("w", encoding="utf-8", newline="") as fh:
        while written < size:
            out = []
            for pool in rng.choices(pools, (60, 40), k=4096):
                t += step
                stamp = t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond:06d}000Z"
                out.append(f"{stamp} {rng.choice(pool)}\n")
            block = "".join(out)
            fh.write(block)
            written += len(block.encode())
        for line in LAST_FAILURE:
            fh.write(f"{t.strftime('%Y-%m-%dT%H:%M:%S.')}{t.microsecond:06d}000Z {line}\n")


def time_cmd(argv: list[str], locale: str | None = None) -> tuple[float, float, bytes]:
    """Wall seconds, CPU seconds (user + system of the child) and stdout of one command."""
    env = dict(os.environ)
    if locale is not None:
        env["LC_ALL"] = locale
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{argv[0]} failed: {done.stderr.decode(errors='replace')[-400:]}")
    return elapsed, cpu, done.stdout


def whole(args: argparse.Namespace) -> None:
    cluster = str(Path(sys.executable).with_name("cluster"))
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="postmortem-whole-") as tmp:
        log = Path(tmp) / "rank-0.log"
        write_sglang_log(log, args.mb * 1_000_000, random.Random(7))
        one = Path(tmp) / "one" / "rank-0.log"
        one.parent.mkdir()
        one.write_text(f"{LAST_FAILURE[0]}\n", encoding="utf-8")
        with log.open("rb") as fh:  # warm the page cache for both
            while fh.read(16 << 20):
                pass
        size = log.stat().st_size
        print(
            f"one SGLang rank log, {size / 1e6:.0f} MB, one failure at the end; {os.cpu_count()} CPUs"
        )
        names = ("postmortem", "grep C", "grep locale")
        wall: dict[str, list[float]] = {k: [] for k in names}
        cpu: dict[str, list[float]] = {k: [] for k in names}
        category = ""
        grep = ["grep", "-E", "-c", GREP_WORDS, str(log)]
        for _ in range(args.repeat):
            runs = {
                "postmortem": time_cmd([cluster, "postmortem", "--logs", str(log), "--json"]),
                "grep C": time_cmd(grep, "C"),
                "grep locale": time_cmd(grep),
            }
            for k, (took, used, _) in runs.items():
                wall[k].append(took)
                cpu[k].append(used)
            category = json.loads(runs["postmortem"][2])["category"]
        startup = [
            time_cmd([cluster, "postmortem", "--logs", str(one), "--json"]) for _ in range(5)
        ]
        w = {k: statistics.median(v) for k, v in wall.items()}
        c = {k: statistics.median(v) for k, v in cpu.items()}
        for k, label in zip(
            names,
            (
                "cluster postmortem --logs FILE --json",
                "grep -E -c (12 alternatives, LC_ALL=C)",
                "grep -E -c (12 alternatives, locale)",
            ),
            strict=True,
        ):
            print(f"  {label:<40} wall {w[k]:6.2f} s   cpu {c[k]:6.2f} s")
        print(f"  the postmortem's answer: {category}")
        fastest = min(w["grep C"], w["grep locale"])
        fastest_cpu = min(c["grep C"], c["grep locale"])
        print(
            f"ratio postmortem / fastest grep: wall {w['postmortem'] / fastest:.1f}x, "
            f"cpu {c['postmortem'] / fastest_cpu:.1f}x; target <= 10x (medians of {args.repeat})"
        )
        print(
            f"start-up (one-line log): wall {statistics.median(s[0] for s in startup):.2f} s, "
            f"cpu {statistics.median(s[1] for s in startup):.2f} s (median of 5; target <= 0.5 s)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=int, default=100, help="megabytes per rank log")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--whole", action="store_true", help="the CLI on one log vs grep -E -c")
    args = ap.parse_args()
    if args.whole:
        whole(args)
        return

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="postmortem-bench-") as tmp:
        root = Path(tmp)
        rng = random.Random(42)
        files = []
        t0 = time.perf_counter()
        for k in range(args.ranks):
            (root / f"rank-{k}").mkdir()
            path = root / f"rank-{k}" / "stdout.log"
            write_log(path, args.mb * 1_000_000, rng)
            files.append(path)
        total = sum(f.stat().st_size for f in files)
        patterns = grep_patterns(root / "patterns.ere")
        sig_only = grep_patterns(root / "signatures.ere", milestones=False)
        n_patterns = len(patterns.read_text().splitlines())
        print(
            f"{args.ranks} rank logs, {total / 1e6:.0f} MB in all (written in "
            f"{time.perf_counter() - t0:.0f} s); {n_patterns} patterns; {os.cpu_count()} CPUs"
        )
        for f in files:  # warm the page cache for everyone
            with f.open("rb") as fh:
                while fh.read(16 << 20):
                    pass
        results: dict[str, list[float]] = {
            "scan": [],
            "scan (1 process)": [],
            "grep -E (LC_ALL=C)": [],
            "grep -E signatures only (LC_ALL=C)": [],
            "grep -E (your locale)": [],
        }
        matches = 0
        for _ in range(args.repeat):
            elapsed, matches = time_scan(files, None)
            results["scan"].append(elapsed)
            results["grep -E (LC_ALL=C)"].append(time_grep(patterns, files, "C"))
            results["scan (1 process)"].append(time_scan(files, 1)[0])
            results["grep -E signatures only (LC_ALL=C)"].append(time_grep(sig_only, files, "C"))
            results["grep -E (your locale)"].append(time_grep(patterns, files, None))
        mbps = {name: total / 1e6 / statistics.median(times) for name, times in results.items()}
        for name, value in mbps.items():
            print(f"  {name:<36} {value:8.1f} MB/s   (median of {args.repeat})")
        print(f"  matches found by the scan: {matches}")
        # The target compares like with like: grep -E with the same patterns, in its fastest
        # locale (C); the signatures-only grep runs fewer patterns and is shown for scale.
        same = mbps["grep -E (LC_ALL=C)"]
        ratio = mbps["scan"] / same
        ratio_one = mbps["scan (1 process)"] / same
        verdict = "meets" if ratio_one >= 0.5 else "MISSES"
        print(
            f"ratio scan / grep -E with the same {n_patterns} patterns (LC_ALL=C): "
            f"{ratio:.2f}x; one process: {ratio_one:.2f}x ({verdict} the 0.5x target)"
        )


if __name__ == "__main__":
    main()
