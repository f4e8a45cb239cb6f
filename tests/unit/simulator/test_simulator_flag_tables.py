"""The twin's imitation of the engines' parsers (flag_tables.py), on the stored tables.

The tables and the verdicts are held equal to the real parsers by tests/engines/; these tests
pin how the simulator and the recipes use them, without the side environments."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import RecipeError
from orchestrator.models.recipe import render
from orchestrator.recipes import load_recipe, resolve_recipe
from orchestrator.simulator.__main__ import main
from orchestrator.simulator.flag_tables import ENV_BEYOND, ENV_RELEASE, check, load_table
from orchestrator.simulator.twin import make_twin
from tests.unit.core.test_recipes import minimal, write

FLAGSHIP = "mistral-large4-8x-sglang"


def _rank_flags(name: str, rank: int) -> list[str]:
    recipe = resolve_recipe(name)
    cmd = render(recipe, rank, recipe.nodes, "10.0.0.1", recipe.ports.rendezvous)
    return cmd.argv_tail[len(recipe.entrypoint) :]


def test_the_flagship_is_refused_by_the_public_release_for_its_tokenizer_mode_only() -> None:
    table = load_table("sglang", "0.5.23")
    flags = _rank_flags(FLAGSHIP, 1)
    refused = check(table, flags)
    assert refused.error == (
        "sglang serve: error: argument --tokenizer-mode: invalid choice: 'mistral' "
        "(choose from 'auto', 'slow')"
    )
    assert check(table, flags, beyond=["--tokenizer-mode"]).error is None


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        (["--no-such-flag", "1"], "sglang serve: error: unrecognized arguments: --no-such-flag 1"),
        (
            ["--tp-size", "eight"],
            "sglang serve: error: argument --tp-size/--tensor-parallel-size: "
            "invalid int value: 'eight'",
        ),
        (
            ["--context-length"],
            "sglang serve: error: argument --context-length: expected one argument",
        ),
    ],
)
def test_argparse_refusals_are_imitated_in_argparse_words(extra: list[str], error: str) -> None:
    table = load_table("sglang", "0.5.23")
    assert check(table, ["--model-path", "/m", *extra]).error == error


def test_a_prefix_is_accepted_where_the_engine_accepts_it_and_reported() -> None:
    sglang = check(load_table("sglang", "0.5.23"), ["--model-path", "/m", "--tp", "8"])
    assert sglang.error is None and sglang.abbreviations == [("--tp", "--tp-size")]
    vllm = check(load_table("vllm", "0.33.0"), ["/m", "--tp", "8"])
    assert vllm.error == "vllm: error: unrecognized arguments: --tp 8"


def test_the_twin_plays_its_recipes_release() -> None:
    twin = make_twin(resolve_recipe(FLAGSHIP), "test")
    assert twin.env[ENV_RELEASE] == "0.5.23"
    assert twin.env[ENV_BEYOND] == "--tokenizer-mode"


def test_a_simulated_rank_refuses_what_its_release_refuses(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_RELEASE, "0.5.23")
    monkeypatch.delenv(ENV_BEYOND, raising=False)
    status = main(["sglang", "serve", *_rank_flags(FLAGSHIP, 0)])
    assert status == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("usage: sglang serve")
    assert err[-1].endswith("invalid choice: 'mistral' (choose from 'auto', 'slow')")


def test_engine_version_is_checked(tmp_path: Path) -> None:
    bad = minimal(engine_version={"release": "0.33", "source": "x"})
    with pytest.raises(RecipeError, match=r"engine_version\.release"):
        load_recipe(write(tmp_path, bad))
    bad = minimal(engine_version={"release": "0.33.0", "source": "x", "beyond_release": ["dtype"]})
    with pytest.raises(RecipeError, match="name one long flag"):
        load_recipe(write(tmp_path, bad))
