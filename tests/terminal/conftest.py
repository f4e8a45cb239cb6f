"""The terminal tier: the real `cluster` CLI in a real terminal (tmux), at the sizes an operator
has (80x24 laptop split, 100x30, 160x40), while the built-in simulated cluster boots.

Each test reads the screen as a person would (`tmux capture-pane -p`): every rank's number, full
phase word, % and ETA must be there, and no cell may hold a cut number. Screens are also kept as
text snapshots (tests/fixtures/terminal/) with the numbers that vary from run to run normalized;
`UPDATE_TERMINAL_SNAPSHOTS=1` rewrites them.

Heavy: the built-in cluster listens on 127.0.0.10-17, so run this tier only under the shared
lock (HELPERS.md). A boot here is the recipe's twin at scale 1/240 (318 MB per rank) with every
rank's reads slowed to 3 MB/s, so ranks stay `loading`, with a rate and an ETA, for about two
minutes; the status module's detached boot reads at 1 MB/s with a far ready deadline
(`patient_recipe`), so it is still loading however long a busy 2-core machine makes the module. The twin's
weights go into the session's `twin_weights` folder (tests/conftest.py): written once for both
modules, not once a boot.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.recipe_copies import recipe_copy

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "terminal"
RECIPE = "mistral-large4-8x-sglang"
# 1/240 and 3 MB/s, not the sim tier's 1/480: at 1/480 the barrier window is half as wide, up to
# seven ranks are warned about, and their notes push the 100x30 footer off the screen (CI, once).
SCALE = "1/240"
FAULT = "rank=*:slow-read=3MB/s"
CLI = [sys.executable, "-m", "orchestrator.cli"]
PHASES = "pending|starting|initializing|loading|loaded|warming|serving|exited|unreachable"

# One rank's row, read off the screen: rank, node (sim-node* shortened to its number), the
# whole phase word, the bar, the percentage and the ETA; then the rest of the cells.
ROW = re.compile(
    rf"^ *(?P<rank>\d+)  (?P<node>\d+) +(?P<phase>(?:{PHASES})(?: \(\S+\))?) +"
    r"(?P<bar>[█░]{8}) +(?P<pct>\d+)% +(?P<eta>\d+m\d\ds|\d+s|-)(?P<rest>(?: +\S+(?: \S+)?)*)$"
)
# Every other cell, whole: a rate, a size, a duration (slack may be negative), or "-".
WHOLE = re.compile(r"^(?:\d+(?:\.\d)? MB/s|\d+\.\d{1,2} GiB|-?\d+m\d\ds|-?\d+s|-)$")


@pytest.fixture(scope="module", autouse=True)
def _ranks_end_with_their_module(no_ranks_left_behind: None) -> None:
    """tests/leaks.py: a rank left running here would fail a later module's boot."""


@pytest.fixture(scope="session", autouse=True)
def _needs_tmux() -> None:
    if shutil.which("tmux") is None:
        pytest.fail("the terminal tier needs tmux (apt-get install tmux): it cannot run here")


def cli_env(state: Path) -> dict[str, str]:
    """The built-in cluster (no inventory), this checkout's code, runs under `state`."""
    drop = ("COLUMNS", "LINES", "NO_COLOR", "TERM", "CLUSTER_INVENTORY")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PYTHONPATH=str(ROOT), XDG_STATE_HOME=str(state))
    return env


@dataclass
class Term:
    """One tmux session on a private server: a real terminal of `width` x `height`."""

    sock: Path
    name: str
    width: int
    height: int

    def tmux(self, *args: str) -> str:
        out = subprocess.run(
            ["tmux", "-S", str(self.sock), *args], capture_output=True, text=True, timeout=30
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    def screen(self, *, escapes: bool = False) -> str:
        """What a person sees; with `escapes`, the colours too (as SGR sequences)."""
        return self.tmux("capture-pane", "-p", *(["-e"] if escapes else []), "-t", self.name)

    def history(self) -> str:
        """The screen and what scrolled off its top."""
        return self.tmux("capture-pane", "-p", "-S", "-", "-t", self.name)

    def wait_for(self, ok: Callable[[str], bool], what: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if ok(screen):
                return screen
            time.sleep(0.3)
        raise AssertionError(f"no {what} within {timeout} s; the screen:\n{screen}")

    def resize(self, width: int, height: int) -> None:
        self.tmux("resize-window", "-t", self.name, "-x", str(width), "-y", str(height))
        self.width, self.height = width, height


@pytest.fixture(scope="module")
def private_dir(twin_weights: Path) -> Iterator[Path]:
    """Our own directory, not pytest's tmp_path: on a machine shared by several pytest sessions
    the oldest basetemp is deleted under a boot that is still running. Its state shares the
    session's twin weights."""
    path = Path(tempfile.mkdtemp(prefix="cluster-terminal-"))
    (path / "state" / "cluster").mkdir(parents=True)
    (path / "state" / "cluster" / "sim-weights").symlink_to(twin_weights)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def terminal(private_dir: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Term]]:
    """`terminal(width, height, argv, env)`: argv runs in a fresh terminal of that size; when it
    ends the pane stays, with `[exit N]` under its output."""
    sock = Path(tempfile.mkdtemp(dir=private_dir)) / "tmux.sock"
    started: list[Term] = []

    def start(width: int, height: int, argv: list[str], env: dict[str, str]) -> Term:
        term = Term(sock, f"t{len(started)}", width, height)
        # argv goes through "$@": nothing is interpolated into the shell's text.
        script = '"$@"; echo "[exit $?]"; exec sleep 3600'
        # The pane's TERM is tmux's own; the size comes from the terminal, not $COLUMNS.
        cmd = ["env", "-u", "COLUMNS", "-u", "LINES", *(f"{k}={v}" for k, v in env.items())]
        cmd += ["sh", "-c", script, "sh"]
        subprocess.run(
            [
                "tmux",
                "-S",
                str(sock),
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                term.name,
                "-x",
                str(width),
                "-y",
                str(height),
                "--",
                *cmd,
                *argv,
            ],
            check=True,
            timeout=30,
        )
        started.append(term)
        return term

    yield start
    if started:
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, timeout=30)


@dataclass
class Boot:
    run_id: str
    env: dict[str, str]


def status_run(boot: Boot) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "status", "--json", "--run", boot.run_id],
        env=boot.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def status_json(boot: Boot) -> dict | None:
    out = status_run(boot)
    return json.loads(out.stdout) if out.returncode == 0 else None


def run_story(boot: Boot, tail: int = 3000) -> str:
    """What a failed wait should show: status's own answer and the ends of the run's controller
    log and events, so a CI failure says where the boot stood without a rerun."""
    out = status_run(boot)
    said = (out.stderr.strip() or out.stdout.strip())[-tail:]
    parts = [f"status --json exited {out.returncode}: {said}"]
    run_dir = Path(boot.env["XDG_STATE_HOME"]) / "cluster" / "runs" / boot.run_id
    for name in ("controller.log", "events.jsonl"):
        path = run_dir / name
        text = path.read_text(errors="replace") if path.exists() else "(none)"
        parts.append(f"--- {name} (last {tail} chars):\n{text[-tail:]}")
    return "\n".join(parts)


def all_loading(view: dict | None) -> bool:
    """Every rank loading, its progress and read rate known, well before the end."""
    return bool(
        view
        and len(view["ranks"]) == 8
        and all(
            r["phase"] == "loading" and r["rate_bps"] and 3 <= (r["progress_pct"] or 0) <= 60
            for r in view["ranks"]
        )
    )


def wait_all_loading(boot: Boot, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    view = None
    while time.monotonic() < deadline:
        view = status_json(boot)
        if all_loading(view):
            assert view is not None
            return view
        time.sleep(1)
    raise AssertionError(
        f"the ranks were not all loading within {timeout} s: {view}\n{run_story(boot)}"
    )


# The status module looks at one detached boot from many terminals for as long as its tests take:
# half a minute on an idle host, minutes at load average 25, where a 3 MB/s load ended and the
# ready deadline, (weights + barrier + ready) / 240 = 75 s, failed the boot under the module's
# feet (f1e31ea: rows `loading 96% - -` read from the logs once its supervisor had ended). So its
# ranks read at 1 MB/s (about five minutes), and its recipe, a copy of the built-in one, waits
# 20 hours for READY and for the barrier: a busy host slows the module, not the boot's story.
# (The barrier too: over a five-minute load, ranks' rates a tenth apart are predicted to miss a
# 30 s barrier window, and four warnings' notes pushed the 100x30 footer off the screen, 93c9036.)
DETACHED_FAULT = "rank=*:slow-read=1MB/s"


def patient_recipe(folder: Path) -> Path:
    """The built-in recipe, its name kept (the snapshots show it), with a far ready deadline
    and barrier window (the barrier's env value with it: the loader refuses a mismatch)."""
    far = 72000
    wait = {"SGLANG_UNBALANCED_LOAD_TIMEOUT_S": str(far)}
    return recipe_copy(folder, RECIPE, env=wait, ready=far, barrier=far)


def start_detached(env: dict[str, str], folder: Path) -> Boot:
    recipe = patient_recipe(folder)
    out = subprocess.run(
        [*CLI, "boot", str(recipe), "--detach", "--scale", SCALE, "--sim-fault", DETACHED_FAULT],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    m = re.search(r"^run (\S+): supervised in the background", out.stdout, re.M)
    assert m, out.stdout
    return Boot(m.group(1), env)


def only_run(state: Path, timeout: float = 120) -> str:
    """The id of the one run under `state`, once the boot has created it."""
    runs = state / "cluster" / "runs"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [p.name for p in runs.iterdir()] if runs.is_dir() else []
        if found:
            (run_id,) = found
            return run_id
        time.sleep(0.2)
    raise AssertionError(f"no run under {runs} within {timeout} s")


def stop(boot: Boot) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "stop", "--yes", "--run", boot.run_id],
        env=boot.env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def rows(screen: str) -> list[re.Match[str]]:
    return [m for line in screen.splitlines() if (m := ROW.match(line))]


def table_shown(screen: str) -> bool:
    return len(rows(screen)) == 8


def assert_readable(screen: str, width: int) -> list[re.Match[str]]:
    """What the issue asks of every screen: each rank's number, whole phase word, % and ETA on
    its own line; no cell cut; nothing wider than the terminal."""
    found = rows(screen)
    assert [int(m["rank"]) for m in found] == list(range(8)), screen
    for m in found:
        assert m["phase"] == "loading", m.group(0)
        assert 0 <= int(m["pct"]) <= 100
        assert m["eta"] != "-", m.group(0)  # a loading rank with a rate has an ETA
        cells = [c for c in re.split(r" {2,}", m["rest"].strip()) if c]
        assert all(WHOLE.match(c) for c in cells), (cells, m.group(0))
        assert "…" not in m.group(0)
    assert all(len(line) <= width for line in screen.splitlines())
    return found


_NORMALIZE = (
    (re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{6}"), "RUN"),
    # How many ranks the barrier watcher has warned about depends on their read rates so far.
    (re.compile(r" · \d+ warnings?"), ""),
    # With a warning the summary is too wide for 80 columns and drops the overall % first.
    (re.compile(r" · \d+%(?= · )"), ""),
    (re.compile(r"^(rank \d+: .*\n)+(also ranks? .*\n)?", re.M), "rank K: <its last line>\n"),
    (re.compile(r"\b\d\d:\d\d:\d\d\b"), "HH:MM:SS"),
    (re.compile(r"slowest rank \d+"), "slowest rank K"),
    (re.compile(r"[█░]{8}"), "▒▒▒▒▒▒▒▒"),
    (re.compile(r"\d+(?:\.\d+)? (MB/s|GiB)"), r"N \1"),
    (re.compile(r"-?\b\d+m\d\ds\b|-?\b\d+s\b"), "DUR"),
    (re.compile(r"\b\d+%"), "N%"),
    (re.compile(r"─+"), "───"),
    (re.compile(r"(?<=\S) {2,}"), "  "),
)


def normalized(screen: str) -> str:
    """The screen with what varies between runs (ids, clocks, numbers, which ranks were warned
    about and so get their last line shown) replaced by placeholders; the layout stays."""
    text = screen
    for pattern, repl in _NORMALIZE:
        text = pattern.sub(repl, text)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()) + "\n"


def check_snapshot(name: str, screen: str) -> None:
    path = FIXTURES / f"{name}.txt"
    text = normalized(screen)
    if os.environ.get("UPDATE_TERMINAL_SNAPSHOTS") == "1":
        path.write_text(text)
        return
    assert path.exists(), f"{path} missing: run with UPDATE_TERMINAL_SNAPSHOTS=1 and review it"
    assert text == path.read_text(), f"{name}: the screen changed:\n{text}"
