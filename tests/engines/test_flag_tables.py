"""The simulator's flag tables are the real parsers', and its verdicts are theirs.

Per pinned release: the stored table (orchestrator/simulator/engine_flags/) equals the table read
from the release's parser now, and the imitation (`flag_tables.check`) gives the real parser's
own error line, or none, on every shipped rank argv of that release and on mutations of one:
an unknown flag, an invalid choice, a non-number, a missing value, a prefix of a flag."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.simulator.flag_tables import check, load_table, table_path
from tests.engines.cases import rank_argvs, without
from tests.engines.flagtables import render_table
from tests.engines.side_env import flag_table, pinned, probe_batch

RELEASES = pinned()


@pytest.mark.parametrize(("engine", "release"), RELEASES, ids=[f"{e}-{r}" for e, r in RELEASES])
def test_stored_table_is_the_release_parser(engine: str, release: str) -> None:
    stored = table_path(engine, release)
    assert stored.is_file(), f"no table for {engine} {release}: run tests/engines/flagtables.py"
    real = flag_table(engine, release)
    assert real["version"] == release
    assert stored.read_text() == render_table(real), (
        f"{stored.name} differs from {engine} {release}'s parser: run tests/engines/flagtables.py"
    )


def _mutations(engine: str, release: str, base: list[str]) -> list[list[str]]:
    table = json.loads(table_path(engine, release).read_text())
    options = table["options"]
    used = {a.partition("=")[0] for a in base if a.startswith("-")}

    def first(pred: Any) -> str:
        for o in options:
            if pred(o) and not used & set(o["options"]):
                return str(o["options"][-1])
        raise AssertionError("no such option")

    choice = first(lambda o: o["choices"] and o["takes"] == 1 and o["type"] is None)
    number = first(lambda o: o["type"] == "int" and o["takes"] == 1)
    valued = first(lambda o: o["takes"] == 1 and o["options"][-1].startswith("--"))
    long_flag = max((o["options"][-1] for o in options), key=len)
    return [
        [*base, "--no-such-flag", "1"],
        [*base, choice, "not-a-choice"],
        [*base, f"{choice}=not-a-choice"],
        [*base, number, "eight"],
        [*base, valued],
        [*base, long_flag[:-3]] + ([] if _is_boolean(options, long_flag) else ["1"]),
        [*base, "stray-positional", "another"],
    ]


def _is_boolean(options: list[dict[str, Any]], flag: str) -> bool:
    return any(flag in o["options"] and o["takes"] == 0 for o in options)


@pytest.mark.parametrize(("engine", "release"), RELEASES, ids=[f"{e}-{r}" for e, r in RELEASES])
def test_imitation_gives_the_real_verdict(engine: str, release: str) -> None:
    bases = []
    for case in rank_argvs():
        if case.release == (engine, release):
            version = case.recipe.engine_version
            assert version is not None
            bases.append(without(case.argv, version.beyond_release))
    if not bases:
        pytest.fail(f"{engine} {release} is pinned but no shipped recipe declares it")
    argvs = [*bases, *_mutations(engine, release, bases[0])]
    real = probe_batch(engine, release, argvs)
    table = load_table(engine, release)
    differ = []
    for argv, verdict in zip(argvs, real, strict=True):
        imitated = check(table, argv)
        if imitated.error != verdict["error"]:
            differ.append(f"{argv[-4:]}: real {verdict['error']!r}, simulated {imitated.error!r}")
        if [list(a) for a in imitated.abbreviations] != verdict["abbreviations"]:
            differ.append(
                f"{argv[-4:]}: real {verdict['abbreviations']}, simulated {imitated.abbreviations}"
            )
    assert not differ, "\n".join(differ)
