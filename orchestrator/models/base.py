"""The one base of the project's data models."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Frozen, and a key it does not declare is refused: a typo in a recipe, an inventory, a
    run file or a node's answer is an error that names the key, never silently dropped."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
