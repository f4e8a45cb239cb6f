"""The typed files of a run directory: `manifest.json` (what was started) and `verdict.json`
(how it ended). `runstore.Run` reads and writes them; nobody else opens them by name.

Both carry `schema_version`. A file an earlier release wrote has none: `upgrade_manifest` and
`upgrade_verdict` are the one explicit step that turns each earlier shape into today's, tested
on a stored example of each (tests/fixtures/run-files/). The verdict's `category` is never
trusted from the file: it is `Outcome.category`, so a verdict rebuilt from an event and one read
from disk name the same category (an older copy of that table once disagreed).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.models.inventory import Connection, Inventory, Node
from orchestrator.models.recipe import RECORDED_KEY, Recipe
from orchestrator.models.run import Finding, Outcome
from orchestrator.plan.launch import LaunchPlan
from orchestrator.plan.rendezvous import RendezvousPlan

__all__ = [
    "RECORDED",
    "SCHEMA_VERSION",
    "InventorySnapshot",
    "Plans",
    "RankImage",
    "RunManifest",
    "UpgradeError",
    "Verdict",
    "upgrade_manifest",
    "upgrade_verdict",
]

SCHEMA_VERSION = 2  # 1: the files of releases before the typed run directory (no field)
# The recipe in a manifest is what the ranks ran, read back with this validation context.
RECORDED = {RECORDED_KEY: True}


class UpgradeError(ValueError):
    """An earlier shape this release cannot read; the message names the key."""


class Versions(StrictModel):
    cluster: str
    python: str = ""


class InventorySnapshot(StrictModel):
    """The resolved inventory as the run used it: a copied run rebuilds its nodes from here."""

    path: str
    sha256: str = ""
    name: str = "cluster"
    connection: Connection = Connection.ssh
    nodes: tuple[Node, ...]

    @classmethod
    def of(cls, inventory: Inventory) -> InventorySnapshot:
        return cls(
            path=str(inventory.path),
            sha256=inventory.sha256,
            name=inventory.name,
            connection=inventory.connection,
            nodes=inventory.nodes,
        )


class RankImage(StrictModel):
    """The image a rank ran, as its node's Docker named it after the push (issue 30): a rank's
    image is known after the fact, and two storage drivers are compared by config digest."""

    rank: int
    node: str
    image_id: str | None = None
    config_digest: str | None = Field(default=None, description="None: the store hides it")


class Plans(StrictModel):
    """Filled once preflight made them; a run refused before has none."""

    rendezvous: RendezvousPlan | None = None
    launch: LaunchPlan | None = None


class RunManifest(StrictModel):
    """What the run started: the recipe the ranks ran (the twin's, on the simulated cluster),
    the recipe asked for by name, the inventory and the plans."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    created: datetime
    versions: Versions
    recipe: Recipe
    real_recipe: str = Field(description="the recipe asked for (the twin's source, if any)")
    twin: dict[str, Any] | None = None
    inventory: InventorySnapshot
    plans: Plans = Plans()
    images: tuple[RankImage, ...] = ()  # after the image step; empty when it did not run


class Verdict(StrictModel):
    """How the run ended (or, for a serving outcome, how its boot ended: an incident or a stop
    may still replace it). Written once: `Run.write_verdict` refuses a second final one."""

    schema_version: int = SCHEMA_VERSION
    outcome: Outcome
    rank: int | None = None
    summary: str
    advice: str = ""
    finished: datetime
    repaired_bytes: int = 0
    fetched_on_resume_bytes: int | None = None

    @property
    def exit_code(self) -> int:
        return int(self.outcome.exit_code)

    @property
    def category(self) -> str:
        return self.outcome.category

    @classmethod
    def of(cls, finding: Finding, **extra: Any) -> Verdict:
        return cls(
            outcome=finding.outcome or Outcome.RANK_EXITED,
            rank=finding.rank,
            summary=finding.message,
            advice=finding.advice,
            finished=datetime.now(UTC),
            **extra,
        )

    def document(self) -> dict[str, Any]:
        """The JSON people and scripts read (`boot --json`): the file's fields plus the two
        the outcome implies."""
        return {
            **self.model_dump(mode="json"),
            "exit_code": self.exit_code,
            "category": self.category,
        }


# -- the upgrade step: every earlier shape, by name ----------------------------------------

# Release 0.x verdicts: `message` before it was renamed `summary`; `exit_code` and `category`
# were stored (derived again now: the outcome decides both).
_VERDICT_DERIVED = ("exit_code", "category")
_VERDICT_RENAMED = {"message": "summary"}


def upgrade_verdict(raw: dict[str, Any]) -> dict[str, Any]:
    """An earlier release's verdict.json as today's fields (today's passes through)."""
    if raw.get("schema_version") == SCHEMA_VERSION:
        return {k: v for k, v in raw.items() if k not in _VERDICT_DERIVED}
    if "schema_version" in raw:
        raise UpgradeError(f"verdict.json has schema_version {raw['schema_version']!r}")
    out = {k: v for k, v in raw.items() if k not in _VERDICT_DERIVED}
    for old, new in _VERDICT_RENAMED.items():
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    out.setdefault("summary", str(out.get("outcome", "")))
    out.setdefault("finished", datetime.fromtimestamp(0, UTC).isoformat())
    out["schema_version"] = SCHEMA_VERSION
    return out


def upgrade_manifest(raw: dict[str, Any]) -> dict[str, Any]:
    """An earlier release's manifest.json as today's fields (today's passes through)."""
    if raw.get("schema_version") == SCHEMA_VERSION:
        return raw
    if "schema_version" in raw:
        raise UpgradeError(f"manifest.json has schema_version {raw['schema_version']!r}")
    out = dict(raw)
    recipe = out.get("recipe") or {}
    # Before `real_recipe` was recorded, the recipe's own name was the only one.
    out.setdefault("real_recipe", recipe.get("name", "") if isinstance(recipe, dict) else "")
    plans = out.get("plans") or {}
    out["plans"] = {k: v for k, v in plans.items() if k in ("rendezvous", "launch")}
    out["schema_version"] = SCHEMA_VERSION
    return out
