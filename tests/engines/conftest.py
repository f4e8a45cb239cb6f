"""The engines tier: recipes' argv judged by the engines' real parsers (tests/engines/side_env.py).

Heavy only in disk and import time: each release's parser is imported once per session, in one
process that answers every question the tier has for that release (each argv parsed in a fork
of it, then the flag table); two releases are asked at a time. It starts no server, container or
network."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.engines.cases import imitation_argvs, rank_argvs, without
from tests.engines.side_env import ReleaseAnswers, pinned, probe_release

Release = tuple[str, str]  # (engine, release), e.g. ('sglang', '0.5.23')


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/engines/" in str(item.fspath):
            item.add_marker(pytest.mark.engines)


def _questions() -> dict[Release, list[list[str]]]:
    """Every argv the tier asks each release about: each shipped rank's, the same less the
    recipe's beyond_release flags, and the imitation's mutations. A recipe that names a release
    with no pins is asked too, so that side_env fails it loudly."""
    asked: dict[Release, dict[str, list[str]]] = {r: {} for r in pinned()}
    for case in rank_argvs():
        argvs = [case.argv]
        beyond = case.recipe.engine_version.beyond_release if case.recipe.engine_version else []
        if beyond:
            argvs.append(without(case.argv, beyond))
        for argv in argvs:
            asked.setdefault(case.release, {})[json.dumps(argv)] = argv
    for release in pinned():
        for argv in imitation_argvs(*release):
            asked[release][json.dumps(argv)] = argv
    return {r: list(argvs.values()) for r, argvs in asked.items()}


@pytest.fixture(scope="session")
def releases() -> dict[Release, ReleaseAnswers]:
    """Each release's answers. Two at a time: an import is one core's work, and CI has two."""

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {r: pool.submit(probe_release, *r, argvs) for r, argvs in _questions().items()}
        return {r: f.result() for r, f in futures.items()}
