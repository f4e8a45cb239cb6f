"""One process per pinned release for the whole engines tier (side_env.py `probe_release`).

The product's probe (orchestrator/preflight/engine_argv_probe.py: standalone, so loaded by the
path side_env passes) answers twice through its own `main`: `--batch ENGINE JSON`, as `cluster preflight` calls it, for
every argv the tier asks about (JSON on stdin here), then `--flags ENGINE`. The release is
imported once for both instead of once per question: importing vLLM costs 10-15 s of CPU.

    python release_probe.py PROBE_PATH ENGINE < argvs.json
"""

from __future__ import annotations

import importlib.util
import sys


def main(probe_path: str, engine: str) -> int:
    spec = importlib.util.spec_from_file_location("engine_argv_probe", probe_path)
    assert spec is not None and spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = probe
    spec.loader.exec_module(probe)
    argvs = sys.stdin.read()
    status: int = probe.main(["--batch", engine, argvs])
    sys.stdout.flush()
    return status or int(probe.main(["--flags", engine]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
