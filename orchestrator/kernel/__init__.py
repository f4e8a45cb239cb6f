"""The node's own words: each node's kernel log, kept beside the ranks' and read for evidence.

    model.py     the typed files of `nodes/<node>/` (kernel.json: where the window starts,
                 what was read, the node-vs-controller clock offset)
    command.py   the ONE node command that reads a kernel log (journal, dmesg, or a test's
                 fixture file through CLUSTER_KERNEL_LOG), and the pure parser of its answer
    position.py  at boot start: note each node's kernel log position (async, bounded)
    collect.py   at a verdict, stop or resume: fetch the lines since that position into
                 `nodes/<node>/kernel.log`, byte-exact (async, bounded)
    read.py      pure: a kernel log's lines, their times, and the families (OOM kill, Xid,
                 AER, NIC link, hung task, disk I/O, segfault) with what each names
    hits.py      kernel lines -> postmortem hits on the rank they concern (by cgroup, PID or
                 node), with times moved onto the controller's clock
    health.py    preflight: logind RemoveIPC, fabric link speed, the last hour's kernel log

Only `position` and `collect` touch nodes; `read` and `hits` are pure (hits reads the run
directory's files it is handed).
"""
