"""The CLI imports only the command it runs: `cluster status` must not pay for the boot."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestrator.cli.main import COMMANDS, build_app, command_named, load_command, main


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["status"], "status"),
        (["--log-format", "json", "-v", "status", "--json"], "status"),
        (["--log-format=json", "postmortem", "x"], "postmortem"),
        (["inventory", "check"], "inventory"),
        (["--help"], None),
        ([], None),
        (["statsu"], None),  # a typo: every command is listed, so the error can suggest one
    ],
)
def test_the_command_is_found_after_the_root_options(argv: list[str], named: str | None) -> None:
    assert command_named(argv) == named


def test_status_imports_neither_the_boot_nor_the_probes() -> None:
    code = (
        "import sys\n"
        "from orchestrator.cli.main import build_app\n"
        "build_app(['status'])\n"
        "heavy = [m for m in ('orchestrator.run.boot', 'orchestrator.check', 'orchestrator.postmortem',"
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


def test_the_root_help_lists_every_command_without_importing_any() -> None:
    code = (
        "import sys\n"
        "from orchestrator.cli.main import main\n"
        "main(['--help'])\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('orchestrator.cli.')"
        " and m not in ('orchestrator.cli.main', 'orchestrator.cli.output'))\n"
        "print(loaded, file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.strip() == "[]"
    assert all(name in out.stdout for name in COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_listed_summary_is_the_commands_own_help(name: str) -> None:
    real = load_command(name)
    own = " ".join((real.help or "").split("\n\n")[0].split())
    assert COMMANDS[name][3] == own


def test_a_listed_command_that_runs_loads_the_real_one_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = build_app([])  # nothing loaded: every command only listed
    group.main(args=["recipes", "list"], prog_name="cluster", standalone_mode=False)
    assert "mistral-large4-8x-sglang" in capsys.readouterr().out
