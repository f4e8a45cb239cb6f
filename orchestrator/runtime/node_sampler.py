"""Sent to a node as `python3 -c <this file> PID`: one JSON sample of the node and a rank.

Stdlib only (it runs with the node's own python3). Sums I/O over every process in PID's cgroup:
the engines read weights in child processes, not in the container's PID 1 (DOMAIN.md). Where
`/proc/<pid>/io` is not readable (another user's processes), falls back to the cgroup's
`io.stat` read bytes, and says which source it used.

A rank's weight reads, whichever way it reads: `read()` moves `rchar`; an mmap load (SGLang's
and vLLM's default safetensors loader) moves no counter of /proc/PID/io, so the resident pages
of its weight-file mappings are summed from /proc/PID/smaps (`Rss` of every mapping whose file
is a weight file; a file mapped by several processes counted once, at its largest; a file
unmapped since counted at the largest size it was seen at). The sample's `weight_bytes` is the
larger of the two, what load progress uses. `read_bytes` (storage reads, by read() or by page
faults alike) tells a cold cache from a warm one: it grows with the load on a cold cache and stays
near zero on a warm one (bench/load_progress.py). `majflt` is reported but is no such sign: the
kernel's readahead turns most cold mmap faults into minor ones.
"""

from __future__ import annotations

import contextlib
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
    """The folder listing every process of PID's cgroup (its container), v2 or v1; None when
    PID is gone (a rank that exits while it is sampled: a normal end, not a failed sample)."""
    v1: dict[str, str] = {}
    try:
        with open(f"/proc/{pid}/cgroup") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
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


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".npy")


def mapped_per_file(pids: list[int]) -> tuple[dict[str, int], int]:
    """Resident bytes of each weight file the processes map now, and their major faults."""
    per_file: dict[str, int] = {}
    majflt = 0
    for p in pids:
        mine: dict[str, int] = {}
        current: str | None = None
        try:
            with open(f"/proc/{p}/smaps") as fh:
                for line in fh:
                    head = line.split(None, 5)
                    if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
                        path = head[5].strip() if len(head) == 6 else ""
                        current = path if path.endswith(WEIGHT_SUFFIXES) else None
                    elif current is not None and line.startswith("Rss:"):
                        mine[current] = mine.get(current, 0) + int(line.split()[1]) * 1024
            with open(f"/proc/{p}/stat") as fh:
                majflt += int(fh.read().rsplit(")", 1)[1].split()[9])
        except (OSError, ValueError, IndexError):
            continue
        for path, rss in mine.items():
            per_file[path] = max(per_file.get(path, 0), rss)
    return per_file, majflt


_SEEN: dict[str, dict[str, int]] = {}
"""In-process memory of each rank's largest resident size per weight file (the process runtime
calls this module every second in the controller); the CLI keeps it in a state file instead."""


def mapped_weight_bytes(pids: list[int], memory: dict[str, int] | None = None) -> tuple[int, int]:
    """(bytes of weight files the rank has faulted in, its major faults).

    The engines map a file, copy its tensors out, and unmap it: the resident size of a closed
    file is gone from smaps. So each file counts at the largest size it was ever seen at
    (`memory`, kept per rank across samples: monotone), plus what is mapped now."""
    now, majflt = mapped_per_file(pids)
    seen = memory if memory is not None else _SEEN.setdefault(",".join(map(str, pids[:1])), {})
    for path, rss in now.items():
        seen[path] = max(seen.get(path, 0), rss)
    return sum(seen.values()), majflt


def _memory_file(pid: int) -> str | None:
    """A node-local file remembering PID's mapped files between two sampler runs; keyed by the
    process's start time too, so a reused PID starts afresh."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            start = fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None
    base = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
    return os.path.join(base, f"cluster-sampler-{pid}-{start}.json")


def _forget_dead(folder: str) -> None:
    """Remove the memory files of processes that are gone (a rank's file outlives it otherwise)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not name.startswith("cluster-sampler-"):
            continue
        pid = name.split("-")[2]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(folder, name))


def remembered_mapped(pid: int, pids: list[int]) -> tuple[int, int]:
    path = _memory_file(pid)
    if path is not None:
        _forget_dead(os.path.dirname(path))
    memory: dict[str, int] = {}
    if path is not None and os.path.exists(path):
        try:
            with open(path) as fh:
                memory = {str(k): int(v) for k, v in json.load(fh).items()}
        except (OSError, ValueError, AttributeError):
            memory = {}
    total, majflt = mapped_weight_bytes(pids, memory)
    if path is not None and memory:
        try:
            with open(path + ".tmp", "w") as fh:
                json.dump(memory, fh)
            os.replace(path + ".tmp", path)
        except OSError:
            pass
    return total, majflt


def rank_pids(pid: int) -> list[int]:
    """Every process of PID's container (its cgroup), else PID and its descendants."""
    cg = cgroup_dir(pid)
    pids = descendants(pid)  # where /sys/fs/cgroup is hidden (`ip netns exec` remounts /sys)
    if cg and os.path.exists(os.path.join(cg, "cgroup.procs")):
        try:
            with open(os.path.join(cg, "cgroup.procs")) as fh:
                pids = [int(x) for x in fh.read().split()] or pids
        except OSError:  # the cgroup went with its last process
            pass
    return pids


def proc_io(pids: list[int]) -> tuple[int, int, bool]:
    """Summed rchar and read_bytes of `pids`, and whether any /proc/PID/io was readable."""
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
    return rchar, read_bytes, readable


def io_sums(pid: int) -> tuple[int | None, int | None, str]:
    cg = cgroup_dir(pid)
    rchar, read_bytes, readable = proc_io(rank_pids(pid))
    if readable:
        return rchar, read_bytes, "proc-io"
    if cg and os.path.exists(os.path.join(cg, "io.stat")):
        total = 0
        try:
            with open(os.path.join(cg, "io.stat")) as fh:
                for line in fh:
                    for field in line.split()[1:]:
                        if field.startswith("rbytes="):
                            total += int(field[7:])
        except OSError:  # the cgroup went with its last process
            return None, None, "none"
        return total, total, "cgroup-io.stat"
    return None, None, "none"


def main() -> None:
    mem = meminfo()
    pid = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 0
    rchar: int | None = None
    read_bytes: int | None = None
    source = "none"
    mapped: int | None = None
    majflt: int | None = None
    if pid > 0 and os.path.exists(f"/proc/{pid}"):
        rchar, read_bytes, source = io_sums(pid)
        mapped, majflt = remembered_mapped(pid, rank_pids(pid))
    known = [n for n in (rchar, mapped) if n is not None]
    print(
        json.dumps(
            {
                # MemoryReading's names (models/memory.py): the runtime reads them as one
                "mem_free": mem.get("MemFree"),
                "mem_available": mem.get("MemAvailable"),
                "cached": mem.get("Cached"),
                "dirty": mem.get("Dirty"),
                "rchar": rchar,
                "read_bytes": read_bytes,
                "mapped": mapped,
                "majflt": majflt,
                "weight_bytes": max(known) if known else None,
                "io_source": source,
                "loadavg": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
