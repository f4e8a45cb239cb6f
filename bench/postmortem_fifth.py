"""The postmortem on the fifth set of unseen real logs (issue 29): `postmortem_third.py --set fifth`.

    PYTHONPATH=<checkout> .venv/bin/python bench/postmortem_fifth.py [--cases-dir DIR]

The scorer, its rules and its output are those of `bench/postmortem_third.py` (one scorer for
every frozen set); only the default folder differs: tests/fixtures/postmortem-fifth/cases.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from postmortem_third import main

if __name__ == "__main__":
    raise SystemExit(main(default_set="fifth"))
