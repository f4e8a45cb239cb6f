"""The postmortem blames the rank that caused a failure, on eight real sshd + dockerd nodes
(issue 32): a straggler on SGLang and on vLLM in each rank position, the head included, and a
rank started late. Every drill is the real `cluster boot --simulate` of a recipe's twin at the
test scale in `ctb/busybox:1` containers, then the real `cluster postmortem RUN` (JSON and the
operator's text): it must name the straggler with its cause (slow reads: the disk or page
cache), not a victim's watchdog, and the late rank with its delay. A node cut during load is
test_postmortem_netns.py's drill.

Cost: one boot is ~40-50 s here, so every position of both engines (16 boots) is a sweep of
its own, not part of the suite: `CLUSTER_BLAME_SWEEP=all` collects all 16, and
`flock /tmp/netns.lock .venv/bin/python bench/blame_positions.py` runs it and prints the
figures. By default the head, a middle rank and the last rank of each engine run (positions
are alike to the blame: only the head differs, as vLLM's API server and SGLang's rank 0 that
prints first; the unit tests swap a stored straggler into all eight places), plus the late start.

    flock /tmp/netns.lock .venv/bin/pytest -q tests/netns/test_blame_netns.py -p no:cacheprovider
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.testbed import Testbed
from tests.netns import test_boot_netns
from tests.netns.test_boot_netns import (
    RANKS,
    BootProc,
    cluster,
)
from tests.recipe_copies import recipe_copy

pytestmark = [pytest.mark.netns, pytest.mark.timeout(420)]

# The fixture shared with test_boot_netns: one state folder (and one set of twin weights per
# recipe) for the session.
state_home = test_boot_netns.state_home

RECIPES = {"sglang": "mistral-large4-8x-sglang", "vllm": "mistral-large4-8x-vllm"}
SWEEP_ENV = "CLUSTER_BLAME_SWEEP"
FIGURES_ENV = "CLUSTER_BLAME_FIGURES"  # a file: each drill's figures, one JSON line each
KEEP_ENV = "CLUSTER_BLAME_KEEP"  # a folder: each drill's run directory is copied there
DEFAULT_POSITIONS = (0, 3, RANKS - 1)  # the head, a middle rank, the last
POSITIONS = tuple(range(RANKS)) if os.environ.get(SWEEP_ENV) == "all" else DEFAULT_POSITIONS
SLOW = "2MB/s"  # the others read at the twin's 16 MB/s: ~10 s for the test scale's 159 MB
LATE_RANK = 5
# How long the late rank's `docker run` is held back: far above the 5 s the blame calls late,
# and long enough that the head cannot be ready within the boot's ready deadline (~24 s from
# the start at the test scale). Held back 15-16 s, the head came up 4 s after READY_TIMEOUT
# (READY or not by luck; the postmortem said `ready` until it learnt that a serving line after
# the supervisor's decision is too late: the stored run netns-vllm-late-start-r5). With the recipe's 15 s connect timeout a start may take 30 s
# (2 x connect) before the node counts as lost, too close to 25 s plus a busy host's
# `docker run`: the drill's copy of the recipe gives a node LATE_CONNECT_S (a 90 s start).
LATE_BY_S = 25.0
LATE_CONNECT_S = 45
POSTMORTEM_S = 120.0


# -- one set-up for the module, one boot per drill -------------------------------------------


@pytest.fixture(scope="module")
def bed(testbed: Testbed, testbed_image: str, tmp_path_factory: pytest.TempPathFactory) -> Testbed:
    """The session testbed, healed and emptied of rank containers once for the module (each
    drill removes its own run's containers after it)."""
    testbed.heal()
    test_boot_netns.remove_run_containers(testbed)
    return testbed


def start(tb: Testbed, state: Path, logs: Path, recipe: str, *extra: str) -> BootProc:
    """`cluster boot RECIPE -i <testbed> --simulate --scale test --json --no-watch ...` in its
    own session (test_boot_netns.start_boot, for any recipe)."""
    logs.mkdir(parents=True, exist_ok=True)
    return test_boot_netns.start_boot(tb, state, logs, "--json", *extra, recipe=recipe)


def remove_containers_of(tb: Testbed, run_id: str) -> None:
    """Every container of one run, on every node, side by side."""

    def one(node: int) -> None:
        ids = tb.docker(node, "ps", "-aq", "--filter", f"label=cluster.run={run_id}", check=False)
        if ids.stdout.split():
            tb.docker(node, "rm", "-f", *ids.stdout.split(), check=False, timeout=120)

    with concurrent.futures.ThreadPoolExecutor(len(tb.nodes)) as pool:
        list(pool.map(one, range(len(tb.nodes))))


@pytest.fixture
def drill(bed: Testbed, state_home: Path, tmp_path: Path) -> Iterator[Any]:
    """Boot once (`drill(recipe, *extra)`); afterwards kill the boot if it still runs and
    remove its containers."""
    started: list[BootProc] = []

    def boot(recipe: str, *extra: str) -> BootProc:
        b = start(bed, state_home, tmp_path / f"boot{len(started)}", recipe, *extra)
        started.append(b)
        return b

    try:
        yield boot
    finally:
        for b in started:
            if b.proc.poll() is None:
                b.kill()
            remove_containers_of(bed, b.id)


def postmortem(state: Path, boot: BootProc) -> tuple[dict[str, Any], str]:
    """`cluster postmortem RUN --json` and the operator's text of the same run."""
    doc = cluster(state, "postmortem", boot.id, "--json", timeout=POSTMORTEM_S)
    assert doc.returncode == 0, doc.stderr[-3000:]
    text = cluster(state, "postmortem", boot.id, timeout=POSTMORTEM_S)
    assert text.returncode == 0, text.stderr[-3000:]
    return json.loads(doc.stdout), text.stdout


def headline(text: str) -> str:
    """The postmortem's first line of substance (under its title bar): `category C  outcome O
    first failing rank K  confidence X`, less the box it is drawn in."""
    for line in text.splitlines():
        if "first failing rank" in line or line.strip("│ ").startswith("category "):
            return " ".join(line.strip("│ ╭╮").split())
    return ""


def named_first(text: str, rank: int, prefix: str) -> bool:
    """The verdict paragraph says `Rank K (<prefix>-nodeK) failed first`."""
    return f"Rank {rank} ({prefix}-node{rank}) failed first" in " ".join(text.split())


def record(
    name: str, boot: BootProc, verdict: dict[str, Any], doc: dict[str, Any], text: str
) -> None:
    """Each drill's figures, for bench/blame_positions.py (and the log of a failing test)."""
    root = doc.get("root_cause") or {}
    figures = {
        "drill": name,
        "boot_s": round((boot.ended or time.time()) - boot.started, 1),
        "with_postmortem_s": round(time.time() - boot.started, 1),
        "outcome": verdict.get("outcome"),
        "headline": headline(text),
        "rank": doc.get("first_failing_rank"),
        "category": root.get("category"),
        "confidence": root.get("confidence"),
        "title": root.get("title"),
        # whom the ranks' words alone would have blamed (the reason says so when they differ)
        "logs_alone": (
            re.findall(r"by the logs alone (rank \d+)", root.get("reason") or "") or [None]
        )[0],
    }
    print(json.dumps(figures))
    keep = os.environ.get(KEEP_ENV)
    if keep:
        shutil.copytree(boot.run, Path(keep) / boot.id, dirs_exist_ok=True)
        (Path(keep) / boot.id / "postmortem.txt").write_text(text)
    path = os.environ.get(FIGURES_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(figures) + "\n")


# -- a straggler in each position ------------------------------------------------------------


@pytest.mark.parametrize("straggler", POSITIONS, ids=lambda k: f"rank{k}")
@pytest.mark.parametrize("engine", sorted(RECIPES))
def test_a_slow_reading_rank_is_blamed_with_its_cause_not_a_victims_watchdog(
    bed: Testbed, drill: Any, state_home: Path, engine: str, straggler: int
) -> None:
    boot: BootProc = drill(RECIPES[engine], "--sim-fault", f"rank={straggler}:slow-read={SLOW}")
    verdict = boot.wait()
    doc, text = postmortem(state_home, boot)
    record(f"{engine} rank {straggler} slow reads", boot, verdict, doc, text)
    assert verdict.get("outcome") not in (None, "READY"), boot.output()

    root = doc["root_cause"]
    assert doc["first_failing_rank"] == straggler, doc["verdict"]
    assert root["rank"] == straggler and root["category"] == "load-barrier-timeout", root
    assert doc["category"] == "load-barrier-timeout", doc["verdict"]
    # The cause category of the straggler: its reads, measured (not the victims' watchdog).
    assert "slow reads" in root["title"] and "disk or page cache" in root["title"], root
    assert root["confidence"] == "high", root["reason"]
    if "when the boot's deadline ran out (" in root["title"]:
        # the supervisor's deadline ran out before the peers' watchdogs fired (their order on a
        # busy host; seen in CI on the built-in cluster): nobody failed, the others waited
        assert doc["cascade_ranks"] == [], doc
    else:
        assert sorted(doc["cascade_ranks"]) == [k for k in range(RANKS) if k != straggler], doc
    assert any(e["file"] == f"rank-{straggler}/samples.jsonl" for e in root["evidence"]), root
    # The operator's first screen says the same.
    said = headline(text)
    assert said.startswith("category load-barrier-timeout"), text[:3000]
    assert f"first failing rank {straggler} " in said + " ", text[:3000]
    assert named_first(text, straggler, bed.prefix) and "slow reads" in text, text[:3000]


# -- a rank started late ---------------------------------------------------------------------


def hold_back_docker_run(tb: Testbed, node: int, delay_s: float) -> Path:
    """The node's `docker run` waits `delay_s` (a slow image unpack, a busy node), then runs for
    real; `heal` removes the wrapper."""
    return tb.hook_docker(node, "run", f"sleep {delay_s:g}")


def test_a_rank_whose_start_is_held_back_is_blamed_with_its_delay(
    bed: Testbed, drill: Any, state_home: Path, tmp_path: Path
) -> None:
    """vLLM: the ranks wait in torch's init for the late one while the head's ready deadline
    runs (on SGLang the others would wait for it too, then load together and be READY)."""
    # a start may take twice the connect bound (boot.start_deadline)
    recipe = recipe_copy(tmp_path / "recipe", RECIPES["vllm"], connect=LATE_CONNECT_S)
    wrapper = hold_back_docker_run(bed, LATE_RANK, LATE_BY_S)
    try:
        boot: BootProc = drill(str(recipe))
        verdict = boot.wait()
    finally:
        wrapper.unlink(missing_ok=True)
    doc, text = postmortem(state_home, boot)
    record(f"vllm rank {LATE_RANK} started late", boot, verdict, doc, text)
    assert verdict.get("outcome") not in (None, "READY"), boot.output()

    started = {e["rank"]: e for e in boot.events() if e.get("kind") == "rank_started"}
    assert sorted(started) == list(range(RANKS)), "every rank started (within its deadline)"
    root = doc["root_cause"]
    assert doc["first_failing_rank"] == LATE_RANK, doc["verdict"]
    delay = re.match(r"it started (\d+) s after the others", root["title"])
    assert delay is not None, root
    assert LATE_BY_S - 3 <= int(delay.group(1)) <= LATE_BY_S + 10, root["title"]
    assert root["evidence"][0]["text"].startswith(f"rank_started: rank {LATE_RANK}"), root
    said = headline(text)
    assert f"first failing rank {LATE_RANK} " in said + " ", text[:3000]
    assert named_first(text, LATE_RANK, bed.prefix), text[:3000]
