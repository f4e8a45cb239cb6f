"""The CLI imports only the command it runs: `cluster status` must not pay for the boot."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestrator.cli.main import COMMANDS, command_named, main


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["status"], "status"),
        (["--log-format", "json", "-v", "status", "--json"], "status"),
        (["--log-format=json", "postmortem", "x"], "postmortem"),
        (["inventory", "check"], "inventory"),
        (["--help"], None),
        ([], None),
        (["statsu"], None),  # a typo: every command is registered, so the error lists them
    ],
)
def test_the_command_is_found_after_the_root_options(argv: list[str], named: str | None) -> None:
    assert command_named(argv) == named


def test_status_imports_neither_the_boot_nor_the_probes() -> None:
    code = (
        "import sys\n"
        "from orchestrator.cli.main import build_app\n"
        "build_app(['status'])\n"
        "heavy = [m for m in ('orchestrator.boot', 'orchestrator.check', 'orchestrator.postmortem',"
        " 'orchestrator.images') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_command_still_answers_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    for name in COMMANDS:
        assert main([name, "--help"]) == 0, name
    assert main(["--help"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in COMMANDS)


def test_a_mistyped_command_is_a_usage_error_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["statsu"]) == 2
    assert "statsu" in capsys.readouterr().err
