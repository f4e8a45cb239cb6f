"""Every operational deadline of `cluster`, in one place, each with why it has its value.

Two families, not one:
- a recipe's `timeouts` (orchestrator/models/recipe.py `Timeouts`): what the ENGINE is allowed
  (weights, barrier, ready, rendezvous, wedge...), set per model by the recipe's author;
- `DEADLINES` here: how long `cluster` waits for its own tools (SSH, Docker, HTTP probes) to
  answer. No call site writes a literal deadline; it names one of these.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Deadlines:
    # -- reaching a node ---------------------------------------------------------------------
    # SSH handshake and first command per node. A LAN handshake takes < 1 s; 10 s leaves a
    # loaded node room and still names a dead one within three attempts (30 s).
    connect_s: float = 10.0
    # An operator's command (`status`, `stop`, `prune`): an unreachable node becomes a row that
    # says so after 5 s, instead of holding the whole table for the boot's connect deadline.
    operator_connect_s: float = 5.0
    # One batch of fact probes on a node (`inventory check`, preflight): a few dozen reads of
    # /proc and /sys plus `docker info`, ~1 s; 20 s covers a node whose dockerd is slow to
    # answer. (check.py had 15 s and facts.py 20 s for the same batch: both are 20 s now.)
    probe_s: float = 20.0
    # One TCP connect probe run on a node (the head's port while vLLM workers wait for it).
    port_probe_s: float = 10.0
    # A command that does next to nothing (`kill PID`): if it takes longer, the node is in
    # trouble and waiting more does not help.
    short_command_s: float = 10.0

    # -- Docker on a node --------------------------------------------------------------------
    # `docker run -d` returns once the container started; a cold image's first start unpacks
    # its layers lazily (containerd), which takes up to a minute for a 20 GB image.
    docker_run_s: float = 120.0
    # A whole rank log (`cluster stop` keeps it): hundreds of MB over SSH after days serving.
    docker_full_logs_s: float = 300.0
    # `docker logs --tail`, `docker inspect`, `docker rm -f` of one container: one daemon call.
    docker_call_s: float = 30.0
    # The same calls from an operator's command (`status` derived live): a docker daemon that
    # has not answered in 10 s while its sshd did makes that row `slow` (its row as the logs
    # left it) instead of holding the whole table for 30 s.
    operator_docker_s: float = 10.0
    # `docker stop`: the daemon's own 10 s grace, SIGKILL, then a slow daemon's bookkeeping.
    docker_stop_s: float = 60.0

    # -- HTTP to the head ----------------------------------------------------------------------
    # One readiness GET from the controller: the engine answers /health in milliseconds when it
    # serves; anything slower is "not yet", asked again at the next sample.
    ready_probe_s: float = 2.0

    # -- the controller's own tasks -------------------------------------------------------------
    # After a verdict, followers and samplers get this long to notice the stop before they are
    # cancelled (a follower of a serving rank never ends on its own).
    task_drain_s: float = 2.0

    # -- nccl-check ----------------------------------------------------------------------------
    # Starting a check container (`docker run` of the engine image: as docker_run_s).
    nccl_start_s: float = 120.0
    # Its log once it ended: one `docker logs` of a short container.
    nccl_logs_s: float = 60.0


DEADLINES = Deadlines()
