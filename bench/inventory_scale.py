"""Benchmark: a 10,000-host inventory and 1,000 refused hosts, each way measured in one run.

    .venv/bin/python bench/inventory_scale.py [--hosts 10000] [--refused 1000] [--json]

Issue 17 found `cluster inventory show` taking 20 s on 10,000 hosts and `inventory check` 50 s
on 1,000 hosts that refuse. This prints, in one process, what each part costs now against the
way it was done before (each "before" is the old code path run here, not a remembered number):

* parsing: PyYAML's pure-Python SafeLoader vs libyaml's CSafeLoader (what yamlio uses now);
* the table: rich's Table for every row vs aligned plain columns past 200 rows;
* checking refused hosts: the old retry of refused connections (3 attempts with back-off) vs
  one attempt, both at the default fan-out of 16; then fan-out 16 vs 128.

The refused hosts are 127.0.x.y:1 (nothing listens on port 1): real sockets, real asyncssh.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from orchestrator import yamlio  # noqa: E402
from orchestrator.check import check_inventory  # noqa: E402
from orchestrator.cli.main import main  # noqa: E402
from orchestrator.cli.output import RICH_TABLE_MAX_ROWS  # noqa: E402
from orchestrator.inventory import load_inventory  # noqa: E402
from orchestrator.transport import ssh  # noqa: E402
from orchestrator.transport.base import ConnectOptions  # noqa: E402


def write_inventory(path: Path, hosts: int, *, refused: bool) -> Path:
    lines = ["all:", "  vars:", "    fabric_iface: eth1", "    ansible_user: nvidia"]
    lines += ["    cluster_known_hosts: known_hosts", "  children:", "    sparks:", "      hosts:"]
    for i in range(hosts):
        if refused:
            addr = f"127.0.{i // 250}.{i % 250 + 1}, ansible_port: 1"
        else:
            addr = f"10.{i // 65536}.{(i // 256) % 256}.{i % 256}"
        lines.append(f"        n{i}: {{rank: {i}, ansible_host: {addr}}}")
    path.write_text("\n".join(lines) + "\n")
    (path.parent / "known_hosts").write_text("")
    return path


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def parse_with(loader: type[yaml.SafeLoader], text: str) -> None:
    yamlio.parse_yaml(text, yamlio.strict_loader(loader))


def show(path: Path, *, rich_always: bool) -> None:
    from orchestrator.cli import output

    limit = output.RICH_TABLE_MAX_ROWS
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import orchestrator.cli.inventory as inv_cli

        inv_cli.RICH_TABLE_MAX_ROWS = 10**9 if rich_always else limit
        try:
            assert main(["inventory", "show", "-i", str(path)]) == 0
        finally:
            inv_cli.RICH_TABLE_MAX_ROWS = limit


def check(path: Path, *, retry_refused: bool, fanout: int) -> None:
    inv = load_inventory(path)
    original = ssh._is_transient

    def old_rule(exc: BaseException) -> bool:  # before issue 17: refused was retried
        return isinstance(exc, ssh.NodeUnreachable) and exc.reason in {"refused", "dropped"}

    ssh._is_transient = old_rule if retry_refused else original
    try:
        report = asyncio.run(check_inventory(inv, ConnectOptions(fanout=fanout)))
    finally:
        ssh._is_transient = original
    assert not report.healthy


def main_bench() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--refused", type=int, default=1_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big = write_inventory(Path(tmp) / "big.yaml", args.hosts, refused=False)
        text = big.read_text()
        (Path(tmp) / "r").mkdir()
        refused = write_inventory(Path(tmp) / "r" / "refused.yaml", args.refused, refused=True)
        r: dict[str, float] = {
            "parse_safeloader_s": timed(lambda: parse_with(yaml.SafeLoader, text)),
            "parse_csafeloader_s": timed(lambda: parse_with(yaml.CSafeLoader, text)),
            "show_rich_table_s": timed(lambda: show(big, rich_always=True)),
            "show_plain_columns_s": timed(lambda: show(big, rich_always=False)),
            "check_refused_retried_s": timed(lambda: check(refused, retry_refused=True, fanout=16)),
            "check_refused_once_s": timed(lambda: check(refused, retry_refused=False, fanout=16)),
            "check_refused_once_fanout128_s": timed(
                lambda: check(refused, retry_refused=False, fanout=128)
            ),
        }
    ratios = {
        "parse": r["parse_safeloader_s"] / r["parse_csafeloader_s"],
        "show": r["show_rich_table_s"] / r["show_plain_columns_s"],
        "check_no_retry": r["check_refused_retried_s"] / r["check_refused_once_s"],
        "check_fanout": r["check_refused_once_s"] / r["check_refused_once_fanout128_s"],
    }
    if args.json:
        print(json.dumps({"hosts": args.hosts, "refused": args.refused, **r, "ratios": ratios}))
        return
    print(f"{args.hosts:,} hosts (plain columns past {RICH_TABLE_MAX_ROWS} rows):")
    print(
        f"  parse   SafeLoader {r['parse_safeloader_s']:.2f} s  vs  CSafeLoader "
        f"{r['parse_csafeloader_s']:.2f} s  ({ratios['parse']:.1f}x)"
    )
    print(
        f"  show    rich table {r['show_rich_table_s']:.2f} s  vs  plain columns "
        f"{r['show_plain_columns_s']:.2f} s  ({ratios['show']:.1f}x)"
    )
    print(f"{args.refused:,} refused hosts, inventory check:")
    print(
        f"  refused retried {r['check_refused_retried_s']:.2f} s  vs  once "
        f"{r['check_refused_once_s']:.2f} s  ({ratios['check_no_retry']:.1f}x), fan-out 16"
    )
    print(
        f"  fan-out 16 {r['check_refused_once_s']:.2f} s  vs  128 "
        f"{r['check_refused_once_fanout128_s']:.2f} s  ({ratios['check_fanout']:.1f}x)"
    )


if __name__ == "__main__":
    main_bench()
