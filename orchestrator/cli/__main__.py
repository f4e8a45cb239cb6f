"""`python -m orchestrator.cli` runs the `cluster` command (tests use it with the venv's python)."""

from orchestrator.cli.main import main

main()
