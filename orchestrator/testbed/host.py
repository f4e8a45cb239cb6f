"""The machine-wide settings a testbed changes, shared by every testbed up at once.

Bridged traffic must not go through the root namespace's iptables (a root dockerd sets FORWARD
DROP), so a testbed sets `net.bridge.bridge-nf-call-*` to 0 while it is up. Two testbeds may be
up side by side (the suite runs the netns tier on two, tests nest a third): the first one up
records the machine's values and sets them, the last one down puts them back. Who holds them is
kept in one file under a lock; a holder whose root folder is gone (torn down, or removed by
hand) no longer counts.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path

HOST_FILE = Path("/run/cluster-testbed-host.json")
BRIDGE_KEYS = ("bridge-nf-call-iptables", "bridge-nf-call-ip6tables", "bridge-nf-call-arptables")
SYSCTL_DIR = Path("/proc/sys/net/bridge")


@contextlib.contextmanager
def _shared(path: Path) -> Iterator[dict[str, object]]:
    """The holders file, read and written under an exclusive lock."""
    lock = path.with_suffix(".lock")
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            data: dict[str, object] = {}
            with contextlib.suppress(OSError, ValueError):
                data = json.loads(path.read_text())
            yield data
            if data.get("holders"):
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(data, indent=1))
                tmp.replace(path)
            else:
                path.unlink(missing_ok=True)
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


def _live(holders: object, leaving: Path | None = None) -> list[str]:
    roots = [str(h) for h in holders] if isinstance(holders, list) else []
    return [h for h in roots if h != str(leaving) and Path(h).is_dir()]


def hold(root: Path, *, path: Path = HOST_FILE, sysctl_dir: Path = SYSCTL_DIR) -> None:
    """Testbed `root` comes up: the first holder records the machine's values and sets 0."""
    with _shared(path) as data:
        holders = _live(data.get("holders"), leaving=root)
        if not holders:
            # What a holder that vanished without its down recorded is still the machine's.
            earlier = data.get("restore")
            saved: dict[str, str] = dict(earlier) if isinstance(earlier, dict) else {}
            for key in BRIDGE_KEYS:
                f = sysctl_dir / key
                if f.exists():
                    old = f.read_text().strip()
                    if old != "0":
                        saved.setdefault(str(f), old)
                        f.write_text("0\n")
            data["restore"] = saved
        data["holders"] = [*holders, str(root)]


def release(root: Path, *, path: Path = HOST_FILE) -> None:
    """Testbed `root` goes down: the last holder puts the machine's values back."""
    with _shared(path) as data:
        holders = _live(data.get("holders"), leaving=root)
        data["holders"] = holders
        if holders:
            return
        restore = data.get("restore")
        for f, old in restore.items() if isinstance(restore, dict) else ():
            with contextlib.suppress(OSError):
                Path(f).write_text(f"{old}\n")
        data.pop("restore", None)
