"""What a testbed changes on the machine itself, shared by every testbed up at once.

Bridged traffic must not go through the root namespace's iptables (a root dockerd sets FORWARD
DROP), so a testbed sets `net.bridge.bridge-nf-call-*` to 0 while it is up; and it creates the
host folders the nodes need (sshd's privilege-separation dir /run/sshd, the mount points of the
node views, /etc/netns). Two testbeds may be up side by side (the suite runs the netns tier on
two; tests nest a third): the first one up records the machine's values and makes what is
missing, the last one down puts the values back and removes what was made (when empty). A
testbed that removed /run/sshd under another one's feet made every new SSH connection to the
other's nodes fail ("kex_exchange_identification: read: Connection reset by peer").

Who holds the machine is kept in one file under a lock; a holder whose root folder is gone (torn
down, or removed by hand after a crash) no longer counts, and what it recorded is kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

HOST_FILE = Path("/run/cluster-testbed-host.json")
BRIDGE_KEYS = ("bridge-nf-call-iptables", "bridge-nf-call-ip6tables", "bridge-nf-call-arptables")
SYSCTL_DIR = Path("/proc/sys/net/bridge")


@contextlib.contextmanager
def _shared(path: Path) -> Iterator[dict[str, Any]]:
    """The holders file, read and written under an exclusive lock."""
    lock = path.with_suffix(".lock")
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            data: dict[str, Any] = {}
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


def hold(
    root: Path,
    *,
    make: Sequence[Path] = (),
    ours_if_absent: Sequence[Path] = (),
    path: Path = HOST_FILE,
    sysctl_dir: Path = SYSCTL_DIR,
) -> None:
    """Testbed `root` comes up: the folders in `make` exist afterwards (those made are recorded),
    those in `ours_if_absent` are recorded when absent (something the testbed starts makes
    them), and the first holder records the machine's bridge sysctls and sets them to 0."""
    with _shared(path) as data:
        holders = _live(data.get("holders"), leaving=root)
        saved: dict[str, str] = dict(data.get("restore") or {})
        if not holders:
            for key in BRIDGE_KEYS:
                f = sysctl_dir / key
                if f.exists():
                    old = f.read_text().strip()
                    if old != "0":
                        saved.setdefault(str(f), old)  # a vanished holder's record stays first
                        f.write_text("0\n")
        created: list[str] = list(data.get("created") or [])
        for p in make:
            if not p.exists():
                p.mkdir(parents=True, mode=0o755, exist_ok=True)
                created.append(str(p))
        created += [str(p) for p in ours_if_absent if not p.exists() and str(p) not in created]
        data.update(holders=[*holders, str(root)], restore=saved, created=created)


def release(root: Path, *, path: Path = HOST_FILE) -> list[Path]:
    """Testbed `root` goes down. The last holder puts the bridge sysctls back and gets the
    folders made while any testbed was up, in the order made, to remove when empty; the
    others get nothing to remove."""
    with _shared(path) as data:
        holders = _live(data.get("holders"), leaving=root)
        data["holders"] = holders
        if holders:
            return []
        for f, old in dict(data.get("restore") or {}).items():
            with contextlib.suppress(OSError):
                Path(f).write_text(f"{old}\n")
        return [Path(p) for p in data.get("created") or []]
