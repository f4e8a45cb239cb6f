"""structlog arrives with the first module that logs; the format chosen on the command line
still holds for it, and secrets are still redacted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LOG = (
    ROOT / "tests" / "fixtures" / "postmortem" / "runs" / "healthy-sglang" / "rank-0" / "stdout.log"
)


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)


def test_a_postmortem_of_loose_logs_never_imports_structlog() -> None:
    out = python(
        "import sys\n"
        "from orchestrator.cli.main import main\n"
        f"main(['--log-format', 'json', 'postmortem', '--logs', {str(LOG)!r}, '--json'])\n"
        "print('structlog' in sys.modules, file=sys.stderr)\n"
    )
    assert json.loads(out.stdout)["category"]
    assert out.stderr.strip().splitlines()[-1] == "False"


def test_a_logger_made_after_the_choice_logs_json_lines_with_secrets_redacted() -> None:
    out = python(
        "import sys\n"
        "from orchestrator.logging import LogFormat, configure_logging, get_logger\n"
        "configure_logging(LogFormat.json, verbose=True)\n"
        "assert 'structlog' not in sys.modules\n"
        "get_logger('t').info('pushed', token='hf_abcdefghijklmnopqrstuvwxyz0123')\n"
    )
    (line,) = out.stderr.strip().splitlines()
    record = json.loads(line)
    assert record["event"] == "pushed" and record["level"] == "info"
    assert "hf_abcdefghijklmnopqrstuvwxyz0123" not in line


def test_a_choice_made_after_structlog_arrived_applies_at_once() -> None:
    out = python(
        "from orchestrator.logging import LogFormat, configure_logging, get_logger\n"
        "log = get_logger('t')\n"
        "configure_logging(LogFormat.json, verbose=False)\n"
        "log.info('hidden')\n"
        "log.warning('shown')\n"
    )
    (line,) = out.stderr.strip().splitlines()
    assert json.loads(line)["event"] == "shown"
