"""The engines tier: recipes' argv judged by the engines' real parsers (tests/engines/side_env.py).

Heavy only in disk and import time (each release's parser is imported once per session and each
argv parsed in a fork of it); it starts no server, container or network."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engines.cases import RankArgv, rank_argvs, without
from tests.engines.side_env import probe_batch


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/engines/" in str(item.fspath):
            item.add_marker(pytest.mark.engines)


@pytest.fixture(scope="session")
def verdicts() -> dict[tuple[str, bool], dict[str, Any]]:
    """(case id, stripped) -> the release's verdict. Stripped: less the recipe's beyond_release
    flags. One probe process per release, for every rank of every recipe at once."""
    by_release: dict[tuple[str, str], list[tuple[tuple[str, bool], list[str]]]] = {}
    for case in rank_argvs():
        jobs = by_release.setdefault(case.release, [])
        jobs.append(((case.id, False), case.argv))
        beyond = case.recipe.engine_version.beyond_release if case.recipe.engine_version else []
        if beyond:
            jobs.append(((case.id, True), without(case.argv, beyond)))
    out: dict[tuple[str, bool], dict[str, Any]] = {}
    for (engine, release), jobs in by_release.items():
        answers = probe_batch(engine, release, [argv for _, argv in jobs])
        out.update({key: answer for (key, _), answer in zip(jobs, answers, strict=True)})
    return out


__all__ = ["RankArgv"]
