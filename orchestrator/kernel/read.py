"""Pure: a kernel log's lines, their times, and the families of lines that explain a failure.

A kernel log reaches us in many forms and each keeps its own prefix; the message after it is
the kernel's. The forms read here (each seen in the public logs the fixtures cite):

    2026-12-03T07:10:11.123456+00:00 node kernel: MSG   journalctl -o short-iso(-precise)
    2024-04-29T14:55:41,678628+02:00 MSG                dmesg --time-format iso
    May 15 23:09:27 node kernel: [  514.682838] MSG     syslog / journalctl's default
    [Sun Mar 30 08:24:00 2025] MSG                      dmesg -T
    [  514.682838] MSG                                  dmesg (seconds since the kernel booted)

The families, and what each names so a line can be given to the rank it concerns (all netns
"nodes" of the testbed share one kernel, and so may two containers on one Spark: a line is
attributed by the process, cgroup or device it names, never by where it was read):

    oom-kill   the OOM killer's victim: PID, command, and (memcg/constraint lines) the cgroup,
               whose `docker-<id>.scope` names the container
    xid        `NVRM: Xid (PCI:...): N`: the GPU and the Xid number (meaning: XID_MEANINGS)
    aer        PCIe Advanced Error Reporting: the device and the severity
    link       a NIC's link going down or up (mlx5_core and the generic `Link is Down` form)
    hung-task  `INFO: task CMD:PID blocked for more than N seconds`: a process stuck in D state
    io-error   block, NVMe, ext4 and XFS I/O errors: the device
    segfault   `CMD[PID]: segfault at ...`
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, get_args

Family = Literal["oom-kill", "xid", "aer", "link", "hung-task", "io-error", "segfault"]
FAMILIES: tuple[Family, ...] = get_args(Family)

SIGNATURE_OF: dict[Family, str] = {
    "oom-kill": "host-oom-kill",
    "xid": "nvrm-xid",
    "aer": "pcie-aer",
    "link": "nic-link-down",
    "hung-task": "kernel-hung-task",
    "io-error": "disk-io-error",
    "segfault": "process-segfault",
}
"""The postmortem signature (postmortem/signatures/*.yaml) each family's cause lines become:
its title, category, meaning and remedy are written there, once."""

PROCESS_FAMILIES: frozenset[Family] = frozenset({"oom-kill", "hung-task", "segfault"})
"""Families about a process: given to a rank by its container or PID. The others are about the
node's hardware (its GPU, PCIe, NIC, disk) and go to the ranks on that node."""

# NVIDIA's published Xid table (https://docs.nvidia.com/deploy/xid-errors/index.html), the
# numbers a multi-node inference boot meets; any other number is shown as "see the table".
XID_MEANINGS: dict[int, str] = {
    13: "Graphics Engine Exception (often an application fault: illegal address, bad kernel)",
    31: "GPU memory page fault (an illegal memory access by the application or the driver)",
    32: "Invalid or corrupted push buffer stream",
    43: "GPU stopped processing (the channel was reset after an application error)",
    45: "Preemptive cleanup, due to previous errors (processes were killed)",
    48: "Double Bit ECC Error (uncorrectable memory error)",
    61: "Internal micro-controller breakpoint/warning (GPU firmware)",
    62: "Internal micro-controller halt (GPU firmware)",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink Error",
    79: "GPU has fallen off the bus (the GPU stopped answering on PCIe/C2C)",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    119: "GSP RPC Timeout (the GPU's System Processor did not answer)",
    120: "GSP Error",
}
XID_TABLE_URL = "https://docs.nvidia.com/deploy/xid-errors/index.html"
HARDWARE_XIDS: frozenset[int] = frozenset(
    {48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140, 154}
)
"""The Xids the table gives to the GPU itself (ECC, NVLink, off the bus, GSP, firmware halt, a
reset asked for): the cause `nvrm-xid`. Any other (13, 31, 43, 45...) is raised by the work an
application ran, or cleans up after an earlier error: `nvrm-xid-application`, a symptom.
signatures/node-kernel.yaml's `nvrm-xid` regex lists the same numbers (a test holds them equal)."""


def signature_of(ev: KernelEvent) -> str:
    """The postmortem signature a line becomes: an application's Xid is a symptom, an
    uncorrected (fatal) PCIe error a cause (a corrected one stays context)."""
    if ev.family == "xid" and ev.xid is not None and ev.xid not in HARDWARE_XIDS:
        return "nvrm-xid-application"
    if ev.family == "aer" and ev.cause:
        return "pcie-aer-fatal"
    return SIGNATURE_OF[ev.family]


def xid_meaning(xid: int) -> str:
    return XID_MEANINGS.get(xid, f"Xid {xid}: see NVIDIA's Xid table ({XID_TABLE_URL})")


# -- lines and their times ---------------------------------------------------------------------

_ISO = re.compile(
    r"^(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s+(?P<rest>.*)$"
)
_SYSLOG = re.compile(
    r"^(?P<mon>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) (?P<hms>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?"
    r"\s+(?P<rest>.*)$"
)
_CTIME = re.compile(
    r"^\[(?:[A-Z][a-z]{2} )?(?P<ctime>[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \d{4})\]"
    r"\s?(?P<rest>.*)$"
)
_MONO = re.compile(r"^\[\s*(?P<mono>\d+\.\d+)\]\s?(?P<rest>.*)$")
_HOST_KERNEL = re.compile(r"^\S+ (?:[A-Z]+ )?kernel: ?(?P<rest>.*)$")  # SONiC logs a level too
_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}


@dataclass(frozen=True)
class KernelLine:
    """One line of a kernel log: its number, the text as written, the kernel's message, and
    its time on the node's clock (wall seconds, or seconds since the kernel booted)."""

    n: int
    text: str
    message: str
    wall: float | None = None  # epoch seconds on the node's clock
    mono: float | None = None  # seconds since the node's kernel booted (dmesg)
    kernel: bool = False  # the prefix said it is the kernel's (`kernel:`, a dmesg time)

    def node_time(self, boot_wall: float | None) -> float | None:
        """Wall time on the node's clock: stated, or the boot's wall time plus the dmesg time."""
        if self.wall is not None:
            return self.wall
        if self.mono is not None and boot_wall is not None:
            return boot_wall + self.mono
        return None


def _iso_epoch(text: str) -> float | None:
    s = text.replace(",", ".")
    if re.search(r"[+-]\d{4}$", s):
        s = s[:-2] + ":" + s[-2:]
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def _strip_host(rest: str) -> tuple[str, bool]:
    m = _HOST_KERNEL.match(rest)
    if m:
        return m.group("rest"), True
    return rest, False


def parse_line(n: int, text: str, *, year: int | None = None) -> KernelLine:
    """One line's prefix read off: its time and the kernel's message."""
    line = text.rstrip("\r\n")
    wall: float | None = None
    mono: float | None = None
    kernel = False
    rest = line
    if m := _ISO.match(line):
        wall = _iso_epoch(m.group("iso"))
        rest, kernel = _strip_host(m.group("rest"))
        # `dmesg --time-format iso` writes a comma before the fraction (and no host); an
        # engine's own ISO stamp (docker's) has a dot: not a kernel line by its form
        kernel = kernel or "," in m.group("iso")
    elif m := _SYSLOG.match(line):
        month = _MONTHS.get(m.group("mon"))
        if month is not None:
            y = year or datetime.now(UTC).year
            try:
                stamp = f"{y}-{month:02d}-{int(m.group('day')):02d} {m.group('hms')}"
                dt = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S")
                wall = dt.replace(tzinfo=UTC).timestamp() + float("0." + (m.group("frac") or "0"))
            except ValueError:
                wall = None
        rest, kernel = _strip_host(m.group("rest"))
    elif m := _CTIME.match(line):
        try:
            dt = datetime.strptime(" ".join(m.group("ctime").split()), "%b %d %H:%M:%S %Y")
            wall = dt.replace(tzinfo=UTC).timestamp()
        except ValueError:
            wall = None
        rest, kernel = m.group("rest"), True
    if m := _MONO.match(rest):
        mono = float(m.group("mono"))
        rest, kernel = m.group("rest"), True
        rest, _ = _strip_host(rest)  # journalctl -o short-monotonic: `[ 1.2] host kernel: ...`
    return KernelLine(n=n, text=line, message=rest, wall=wall, mono=mono, kernel=kernel)


def parse_lines(text: str, *, year: int | None = None) -> list[KernelLine]:
    return [parse_line(i, raw, year=year) for i, raw in enumerate(text.splitlines(), 1)]


def looks_like_kernel_log(text: str) -> bool:
    """A pasted `journalctl -k` or `dmesg`, told by its form: most lines carry the kernel's
    prefix (`host kernel:` or a dmesg time), and an engine's log has none."""
    lines = [ln for ln in text.splitlines()[:400] if ln.strip()]
    if not lines:
        return False
    kernel = sum(1 for i, ln in enumerate(lines, 1) if parse_line(i, ln).kernel)
    return kernel >= 0.6 * len(lines)


# -- the families -----------------------------------------------------------------------------

_OOM_KILLED = re.compile(
    r"(?P<memcg>Memory cgroup )?[Oo]ut of memory: Kill(?:ed)? process (?P<pid>\d+) "
    r"\((?P<comm>[^)]*)\)"
)
_OOM_CONSTRAINT = re.compile(
    r"oom-kill:constraint=(?P<constraint>[A-Z_]+),.*?(?:oom_memcg=(?P<oom_memcg>[^,]*),)?"
    r"task_memcg=(?P<memcg>[^,]*),task=(?P<comm>[^,]*),pid=(?P<pid>\d+)"
)
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<xid>\d+)"
    r"(?:, pid=(?P<pid>'?[^,']*'?))?(?:, name=(?P<comm>[^,]*))?"
)
_FELL_OFF = re.compile(
    r"NVRM: (?:The NVIDIA )?GPU (?:at )?(?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+).*fallen off the bus"
)
# the resource manager's status for the same loss, where no Xid line made it into the log
# ("NVRM: nvAssertOkFailedNoLog: Assertion failed: GPU lost from the bus [NV_ERR_GPU_IS_LOST]")
_GPU_LOST = re.compile(r"NVRM: .*(?:GPU lost from the bus|NV_ERR_GPU_IS_LOST)")
_AER = re.compile(
    r"^(?P<driver>[\w-]+) (?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)[: ].*?"
    r"(?:AER: |PCIe Bus Error: severity=(?P<severity>[A-Za-z-]+(?: \([A-Za-z-]+\))?))"
)
_LINK = re.compile(
    r"^(?P<driver>mlx5_core|[\w-]+) (?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d) "
    r"(?P<iface>[\w.-]+): (?:.*?NIC )?(?:Link is |Link )(?P<state>[Dd]own|[Uu]p)\b"
)
_HUNG = re.compile(
    r"INFO: task (?P<comm>.+):(?P<pid>\d+) blocked for more than (?P<secs>\d+) seconds"
)
_IO = re.compile(
    r"I/O error, dev (?P<dev1>\w+), sector"
    r"|Buffer I/O error on dev(?:ice)? (?P<dev2>[\w-]+)"
    r"|critical medium error, dev (?P<dev3>\w+)"
    r"|EXT4-fs error \(device (?P<dev4>[\w-]+)\)"
    r"|XFS \((?P<dev5>[\w-]+)\): .*(?:I/O [Ee]rror|Corruption|Filesystem has been shut down)"
    r"|nvme (?P<dev6>nvme\d+): (?:I/O \d+ QID \d+ timeout|controller is down|Device not ready)"
)
_SEGV = re.compile(r"(?P<comm>\S+)\[(?P<pid>\d+)\]: segfault at ")
# a container's id in a cgroup path: docker-<id>.scope (systemd), /docker/<id> (cgroupfs),
# cri-containerd-<id>, libpod-<id>, or under any --cgroup-parent: 64 hex digits on their own
_CONTAINER = re.compile(r"(?<![0-9a-f])(?P<id>[0-9a-f]{64})(?![0-9a-f])")


@dataclass(frozen=True)
class KernelEvent:
    """A line of one family, with what it names."""

    family: Family
    line: KernelLine
    cause: bool  # a failure on its own (a Link up, a corrected AER: only context)
    pid: int | None = None
    comm: str | None = None
    cgroup: str | None = None
    container: str | None = None  # the 64-hex container id a cgroup path names
    device: str | None = None  # PCI address, block device or interface
    xid: int | None = None
    detail: str = ""

    @property
    def summary(self) -> str:
        if self.family == "xid" and self.xid is not None:
            return f"Xid {self.xid} on {self.device}: {xid_meaning(self.xid)}"
        return self.detail or self.line.message


def _container_of(cgroup: str | None) -> str | None:
    if not cgroup:
        return None
    m = _CONTAINER.search(cgroup)
    return m.group("id") if m else None


def _process(m: re.Match[str]) -> dict[str, Any]:
    """The PID and command a line names (the process killed, hung or crashed)."""
    return {"pid": int(m.group("pid")), "comm": m.group("comm")}


def _who(m: re.Match[str]) -> str:
    return f"{m.group('comm')} (PID {m.group('pid')})"


def classify(line: KernelLine) -> KernelEvent | None:
    """The family a line belongs to, or None."""
    msg = line.message
    if m := _OOM_CONSTRAINT.search(msg):
        memcg = m.group("memcg")
        return KernelEvent(
            "oom-kill",
            line,
            True,
            cgroup=memcg,
            container=_container_of(memcg),
            detail=f"the OOM killer chose {_who(m)} in {memcg}",
            **_process(m),
        )
    if m := _OOM_KILLED.search(msg):
        where = "its memory cgroup's limit" if m.group("memcg") else "the node's memory"
        return KernelEvent(
            "oom-kill",
            line,
            True,
            detail=f"the OOM killer killed {_who(m)}: {where} ran out",
            **_process(m),
        )
    if m := _XID.search(msg):
        pid = (m.group("pid") or "").strip("'")
        return KernelEvent(
            "xid",
            line,
            True,
            pid=int(pid) if pid.isdigit() and pid != "0" else None,
            comm=(m.group("comm") or "").strip("'") or None,
            device=m.group("pci"),
            xid=int(m.group("xid")),
        )
    if m := _FELL_OFF.search(msg):
        return KernelEvent("xid", line, True, device=m.group("pci"), xid=79)
    if _GPU_LOST.search(msg):
        return KernelEvent("xid", line, True, xid=79)
    if m := _LINK.search(msg):
        down = m.group("state").lower() == "down"
        return KernelEvent(
            "link",
            line,
            down,
            device=m.group("iface"),
            detail=f"{m.group('iface')} ({m.group('driver')} {m.group('pci')}): link "
            + ("down" if down else "up"),
        )
    if m := _AER.search(msg):
        severity = m.group("severity") or ""
        fatal = "Uncorrect" in severity or ("Fatal" in msg and "Non-Fatal" not in msg)
        return KernelEvent(
            "aer",
            line,
            fatal,
            device=m.group("pci"),
            detail=f"PCIe AER on {m.group('pci')} ({m.group('driver')})"
            + (f": {severity}" if severity else ""),
        )
    if m := _HUNG.search(msg):
        blocked = f"{_who(m)} blocked in D state for over {m.group('secs')} s"
        return KernelEvent("hung-task", line, True, detail=blocked, **_process(m))
    if m := _IO.search(msg):
        dev = next(g for g in m.groups() if g)
        return KernelEvent("io-error", line, True, device=dev, detail=f"I/O error on {dev}")
    if m := _SEGV.search(msg):
        crashed = f"{_who(m)} crashed with a segmentation fault"
        return KernelEvent("segfault", line, True, detail=crashed, **_process(m))
    return None


def events(lines: Iterable[KernelLine]) -> Iterator[KernelEvent]:
    for line in lines:
        if (ev := classify(line)) is not None:
            yield ev


# Literal text every family line holds: a window of megabytes is scanned for these first, and
# only the lines holding one are parsed (3.7 s -> well under a second per 4 MiB of dmesg).
_KEYWORDS = re.compile(
    "|".join(
        re.escape(k)
        for k in (
            "of memory: Kill",
            "oom-kill:",
            "NVRM:",
            "AER",
            "PCIe Bus Error",
            "Link ",
            "blocked for more than",
            "I/O error",
            "I/O Error",
            "EXT4-fs error",
            "XFS (",
            "nvme nvme",
            "segfault at",
            "medium error",
        )
    )
)


def family_events(text: str, *, year: int | None = None) -> Iterator[KernelEvent]:
    """The family lines of a whole log, parsing only the lines that hold a keyword."""
    for n, raw in enumerate(text.splitlines(), 1):
        if _KEYWORDS.search(raw) and (ev := classify(parse_line(n, raw, year=year))) is not None:
            yield ev


def link_flaps(evs: Sequence[KernelEvent]) -> dict[str, int]:
    """Per interface, how many times its link went down (each down a flap when it came back)."""
    downs: dict[str, int] = {}
    for ev in evs:
        if ev.family == "link" and ev.cause and ev.device:
            downs[ev.device] = downs.get(ev.device, 0) + 1
    return downs
