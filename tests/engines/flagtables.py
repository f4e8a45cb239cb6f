"""Write the simulator's flag tables from the pinned releases' real parsers.

    PYTHONPATH=$PWD .venv/bin/python tests/engines/flagtables.py

One file per pin under orchestrator/simulator/engine_flags/, one parser action per line (readable
diffs when a release changes its flags). test_flag_tables.py fails when a stored table and its
release's parser differ; this script is how to bring them back in line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.simulator.flag_tables import table_path  # noqa: E402
from tests.engines.side_env import flag_table, pinned  # noqa: E402


def render_table(table: dict[str, Any]) -> str:
    head = {k: table[k] for k in ("engine", "version", "prog", "allow_abbrev", "positionals")}
    lines = [json.dumps(a, sort_keys=True) for a in table["options"]]
    body = json.dumps(head, sort_keys=True)[:-1]
    return body + ', "options": [\n' + ",\n".join(lines) + "\n]}\n"


def main() -> int:
    for engine, release in pinned():
        path = table_path(engine, release)
        path.write_text(render_table(flag_table(engine, release)))
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
