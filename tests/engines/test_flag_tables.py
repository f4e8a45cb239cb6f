"""The simulator's flag tables are the real parsers', and its verdicts are theirs.

Per pinned release: the stored table (orchestrator/simulator/engine_flags/) equals the table read
from the release's parser now, and the imitation (`flag_tables.check`) gives the real parser's
own error line, or none, on every shipped rank argv of that release and on mutations of one:
an unknown flag, an invalid choice, a non-number, a missing value, a prefix of a flag."""

from __future__ import annotations

import pytest

from orchestrator.simulator.flag_tables import check, load_table, table_path
from tests.engines.cases import imitation_argvs
from tests.engines.flagtables import render_table
from tests.engines.side_env import ReleaseAnswers, pinned

RELEASES = pinned()


@pytest.mark.parametrize(("engine", "release"), RELEASES, ids=[f"{e}-{r}" for e, r in RELEASES])
def test_stored_table_is_the_release_parser(
    engine: str, release: str, releases: dict[tuple[str, str], ReleaseAnswers]
) -> None:
    stored = table_path(engine, release)
    assert stored.is_file(), f"no table for {engine} {release}: run tests/engines/flagtables.py"
    real = releases[(engine, release)].table
    assert real["version"] == release
    assert stored.read_text() == render_table(real), (
        f"{stored.name} differs from {engine} {release}'s parser: run tests/engines/flagtables.py"
    )


@pytest.mark.parametrize(("engine", "release"), RELEASES, ids=[f"{e}-{r}" for e, r in RELEASES])
def test_imitation_gives_the_real_verdict(
    engine: str, release: str, releases: dict[tuple[str, str], ReleaseAnswers]
) -> None:
    argvs = imitation_argvs(engine, release)
    if not argvs:
        pytest.fail(f"{engine} {release} is pinned but no shipped recipe declares it")
    answers = releases[(engine, release)]
    table = load_table(engine, release)
    differ = []
    for argv in argvs:
        verdict = answers.verdict(argv)
        imitated = check(table, argv)
        if imitated.error != verdict["error"]:
            differ.append(f"{argv[-4:]}: real {verdict['error']!r}, simulated {imitated.error!r}")
        if [list(a) for a in imitated.abbreviations] != verdict["abbreviations"]:
            differ.append(
                f"{argv[-4:]}: real {verdict['abbreviations']}, simulated {imitated.abbreviations}"
            )
    assert not differ, "\n".join(differ)
