"""`python -m orchestrator.testbed ...`: see cli.py."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `... status | head`
        sys.exit(0)
