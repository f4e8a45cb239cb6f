"""Whether a group that died while serving may be restarted now: one pure function.

No restart storm is possible by construction (spark-vllm-docker#257: a restart loop leaked unified
memory until the nodes fell over):

- no `restart:` in the recipe, no restart;
- never more than `max` restarts in any `window` (a death with `max` restarts already in the
  window is final, not postponed);
- each restart waits `backoff * 2**n` after the death (n: restarts already in the window);
- never while a node's MemAvailable is under `min_mem_available` (or unknown): wait for it, up to
  `mem_wait`, then the death is final.

tests/unit/supervisor/test_serving_watch.py drives it with a group that dies the moment
it is back and checks every window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from orchestrator.models.recipe import Restart

GiB = 2**30


@dataclass(frozen=True)
class RestartDecision:
    action: Literal["restart", "wait", "final"]
    reason: str
    not_before: float = 0.0  # for `wait`: when to ask again at the earliest


def decide_restart(
    policy: Restart | None,
    restarts: Sequence[float],
    died_at: float,
    now: float,
    available: Mapping[str, int | None],
) -> RestartDecision:
    """What to do about a death at `died_at`, asked at `now`. `restarts`: when each earlier
    restart of this run happened; `available`: each node's last MemAvailable."""
    if policy is None:
        return RestartDecision("final", "the recipe asks for no restart (no `restart:`)")
    recent = [t for t in restarts if now - t < policy.window]
    if len(recent) >= policy.max:
        return RestartDecision(
            "final",
            f"{len(recent)} restart(s) in the last {policy.window:.0f} s already "
            f"(restart.max {policy.max}): this death is final",
        )
    due = died_at + policy.backoff * 2 ** len(recent)
    if now < due:
        return RestartDecision("wait", f"backoff until {due - died_at:.0f} s after the death", due)
    low = {n: a for n, a in available.items() if a is None or a < policy.min_mem_available}
    if low:
        waited = now - due
        shown = ", ".join(
            f"{n} {'unknown' if a is None else f'{a / GiB:.1f} GiB'}"
            for n, a in sorted(low.items())
        )
        if waited >= policy.mem_wait:
            return RestartDecision(
                "final",
                f"MemAvailable stayed under {policy.min_mem_available / GiB:.1f} GiB for "
                f"{waited:.0f} s ({shown}): not restarting into a starved node",
            )
        return RestartDecision(
            "wait",
            f"waiting for memory: MemAvailable under {policy.min_mem_available / GiB:.1f} GiB "
            f"on {shown}",
            now + 2.0,
        )
    return RestartDecision("restart", f"restart {len(recent) + 1} of {policy.max} in the window")
