"""A run's lifecycle, each step a use case over the run directory (runstore) and the nodes.

boot (the only place a boot's steps are sequenced), watch (the serving watch after READY), status,
stop, bench (one bench of a serving run), logs (`runs`, `logs`), context (a run rebuilt from its
manifest)."""
