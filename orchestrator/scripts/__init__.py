"""Scripts shipped as package data and run on nodes or in containers (`python3 -c`).

They import nothing from `orchestrator`: a node or an engine image has only the standard
library and what the image brings (torch, for `nccl_allreduce.py`). Read them with
`script_text(name)`.
"""

from __future__ import annotations

from importlib.resources import files


def script_text(name: str) -> str:
    """The source of `orchestrator/scripts/<name>`, to pass as `python3 -c TEXT`."""
    return files(__name__).joinpath(name).read_text(encoding="utf-8")
