"""Sent to a node as `python3 -c <this file> PID`: one JSON sample of the node and a rank.

Stdlib only (it runs with the node's own python3). Sums I/O over every process in PID's cgroup:
the engines read weights in child processes, not in the container's PID 1 (DOMAIN.md). Where
`/proc/<pid>/io` is not readable (another user's processes), falls back to the cgroup's
`io.stat` read bytes, and says which source it used.
"""

from __future__ import annotations

import json
import os
import sys


def meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    with open("/proc/meminfo") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                out[key] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    return out


def cgroup_dir(pid: int) -> str | None:
    """The folder listing every process of PID's cgroup (its container), v2 or v1."""
    v1: dict[str, str] = {}
    with open(f"/proc/{pid}/cgroup") as fh:
        for line in fh:
            hier, controllers, path = line.strip().split(":", 2)
            if hier == "0" and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
                return "/sys/fs/cgroup" + path  # cgroup v2: one unified tree
            for c in controllers.split(","):
                v1[c] = path
    for controller in ("pids", "memory", "cpu", "blkio"):  # cgroup v1: any controller's folder
        if controller in v1:
            folder = f"/sys/fs/cgroup/{controller}{v1[controller]}"
            if os.path.exists(os.path.join(folder, "cgroup.procs")):
                return folder
    return None


def descendants(root: int) -> list[int]:
    """PID and every process below it, from the parent links in /proc/<pid>/stat."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def io_sums(pid: int) -> tuple[int | None, int | None, str]:
    cg = cgroup_dir(pid)
    pids = descendants(pid)  # where /sys/fs/cgroup is hidden (`ip netns exec` remounts /sys)
    if cg and os.path.exists(os.path.join(cg, "cgroup.procs")):
        with open(os.path.join(cg, "cgroup.procs")) as fh:
            pids = [int(x) for x in fh.read().split()] or pids
    rchar = read_bytes = 0
    readable = False
    for p in pids:
        try:
            with open(f"/proc/{p}/io") as fh:
                fields = dict(line.split(": ") for line in fh.read().splitlines())
            rchar += int(fields["rchar"])
            read_bytes += int(fields["read_bytes"])
            readable = True
        except (OSError, KeyError, ValueError):
            continue
    if readable:
        return rchar, read_bytes, "proc-io"
    if cg and os.path.exists(os.path.join(cg, "io.stat")):
        total = 0
        with open(os.path.join(cg, "io.stat")) as fh:
            for line in fh:
                for field in line.split()[1:]:
                    if field.startswith("rbytes="):
                        total += int(field[7:])
        return total, total, "cgroup-io.stat"
    return None, None, "none"


def main() -> None:
    mem = meminfo()
    pid = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 0
    rchar: int | None = None
    read_bytes: int | None = None
    source = "none"
    if pid > 0 and os.path.exists(f"/proc/{pid}"):
        rchar, read_bytes, source = io_sums(pid)
    print(
        json.dumps(
            {
                "mem_free": mem.get("MemFree"),
                "mem_available": mem.get("MemAvailable"),
                "cached": mem.get("Cached"),
                "dirty": mem.get("Dirty"),
                "rchar": rchar,
                "read_bytes": read_bytes,
                "io_source": source,
                "loadavg": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
