"""Benchmark: `inventory check` and `preflight` of 8 testbed nodes whose login shell is slow,
a baseline revision against the code now, in one run.

    sudo .venv/bin/python bench/slow_shell.py [--baseline REV] [--delay 0.2] [--repeat 3] [--json]

Issue 14: every command sshd runs starts the user's shell, and a `~/.bashrc` with conda or pyenv
init costs ~0.2 s each time. The testbed's session setting `shell_delay_s` makes root's
`~/.bashrc` sleep that long (and count its start-ups). For each tree (BASELINE, extracted with
`git archive` into a temporary folder, and this checkout) and each shell (no delay, `--delay`),
a fresh Python process imports that tree and times `check_inventory` and `run_preflight`
(mistral-large4-8x-sglang on the testbed: it is refused, no GPU, but every fact is gathered)
in-process; the medians of `--repeat` runs are printed with the shell start-ups per node.
Preflight with the image missing asks the nodes whether they can SSH to each other (the image
chain): it runs twice, with the testbed's peer key mesh (every node holds a key the others
accept) and without it (the nodes' own keys moved aside: every node-to-node SSH is refused).
Needs root (it brings the netns testbed up and down; run it under `flock /tmp/netns.lock`).

Issue 31: the default baseline is main before preflight asked only each node's chain neighbour
(7 pairs, in the same command as its connect to the head's port) instead of all 56 pairs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.testbed import Testbed  # noqa: E402

BASELINE = "196b32d"  # main before the chain-neighbour peers check (issue 31)
RECIPE = "mistral-large4-8x-sglang"

# Runs inside the tree under test: times one call, prints seconds. "preflight": the recipe's
# simulated twin in the testbed's image (present on every node, as after a push: what a boot's
# preflight sees); "preflight-pull": the real recipe, whose image no node holds, so preflight
# also asks every node whether it can SSH to its peers (the image chain would run).
TIMER = """
import asyncio, sys, time
from orchestrator.inventory import load_inventory
from orchestrator.transport import ConnectOptions
inv = load_inventory(sys.argv[2])
if sys.argv[1] == "check":
    from orchestrator.check import check_inventory
    call = lambda: check_inventory(inv, ConnectOptions())
else:
    from orchestrator.preflight.runner import run_preflight
    from orchestrator.recipes import resolve_recipe
    recipe = resolve_recipe(sys.argv[3])
    if sys.argv[1] == "preflight":
        from orchestrator.simulator.twin import make_twin
        recipe = make_twin(
            recipe, "test", python=sys.executable, image="ctb/busybox:1", weights_dir=sys.argv[4]
        )
    call = lambda: run_preflight(recipe, inv, ConnectOptions())
t = time.monotonic()
asyncio.run(call())
print(time.monotonic() - t)
"""
WHAT = {
    "check": "inventory check",
    "preflight": "preflight",
    "preflight-pull": "preflight, image missing, key mesh",
    "preflight-pull-nomesh": "preflight, image missing, no mesh",
}
NO_MESH = "-nomesh"  # the same command with the nodes' own SSH keys moved aside


def extract(rev: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def timed(tree: Path, what: str, inventory: Path, weights: Path) -> float:
    what = what.removesuffix(NO_MESH)
    proc = subprocess.run(
        [sys.executable, "-c", TIMER, what, str(inventory), RECIPE, str(weights)],
        capture_output=True,
        text=True,
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        timeout=300,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{what} in {tree} failed: {proc.stderr.strip()[-600:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def measure(tb: Testbed, tree: Path, what: str, repeat: int, weights: Path) -> dict[str, Any]:
    times, starts = [], []
    with peer_keys(tb, mesh=not what.endswith(NO_MESH)):
        for _ in range(repeat):
            tb.reset_shell_starts()
            times.append(timed(tree, what, tb.inventory, weights))
            starts.append(max(tb.shell_starts(nd) for nd in tb.nodes))
    return {"median_s": round(statistics.median(times), 3), "shell_starts_per_node": max(starts)}


@contextlib.contextmanager
def peer_keys(tb: Testbed, *, mesh: bool) -> Iterator[None]:
    """Without the mesh, every node's own private key is moved aside for the block: its SSH to
    a peer is refused (BatchMode: `Permission denied (publickey)`), as on nodes never prepared."""
    keys = [nd.root_ssh / "id_ed25519" for nd in tb.nodes]
    if not mesh:
        for key in keys:
            key.rename(key.with_suffix(".aside"))
    try:
        yield
    finally:
        for key in keys:
            if key.with_suffix(".aside").exists():
                key.with_suffix(".aside").rename(key)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default=BASELINE, help="the revision to compare against")
    ap.add_argument("--delay", type=float, default=0.2, help="seconds the login shell takes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tb = Testbed()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="slow-shell-") as tmp:
        (Path(tmp) / "tree").mkdir()
        trees = {"before": extract(args.baseline, Path(tmp) / "tree"), "after": REPO}
        weights = Path(tmp) / "weights"  # every node sees the controller's disk
        weights.mkdir()
        (weights / "model-00001-of-00001.safetensors").write_bytes(b"\x01" * 4096)
        (weights / "config.json").write_text("{}\n")
        tb.up(8)
        try:
            tb.load_test_image()
            for delay in (0.0, args.delay):
                # A zero delay counts no start-ups; a tiny one keeps the counter honest.
                tb.set_session(shell_delay_s=delay or 0.001)
                for what in WHAT:
                    for label, tree in trees.items():
                        row = {"what": what, "shell_delay_s": delay, "code": label}
                        rows.append(row | measure(tb, tree, what, args.repeat, weights))
        finally:
            tb.down()
    if args.json:
        print(json.dumps({"baseline": args.baseline, "rows": rows}, indent=1))
        return 0
    print(
        f"8 testbed nodes; before = {args.baseline}, after = this checkout; medians of {args.repeat}"
    )
    print(
        f"{'command':<36}{'shell':>7}{'before s':>10}{'after s':>9}{'ratio':>7}{'starts/node':>14}"
    )
    for what, name in WHAT.items():
        for delay in (0.0, args.delay):
            b, a = (
                next(
                    r
                    for r in rows
                    if (r["what"], r["shell_delay_s"], r["code"]) == (what, delay, c)
                )
                for c in ("before", "after")
            )
            ratio = b["median_s"] / a["median_s"] if a["median_s"] else float("inf")
            starts = f"{b['shell_starts_per_node']} -> {a['shell_starts_per_node']}"
            print(
                f"{name:<36}{delay:>6g}s{b['median_s']:>10.2f}{a['median_s']:>9.2f}{ratio:>6.1f}x{starts:>14}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
