"""The ONE node command that reads a kernel log, and the pure parser of its answer.

One `sh -c SCRIPT` (fixed text; every value a positional argument, never interpolated) that:
- `position`: says where the node's kernel log stands now: the journal's cursor (`journalctl
  -k -n 1 --show-cursor`), else the last `dmesg` line's time (seconds since boot), plus the
  kernel's boot id and the node's uptime and wall clock (their difference dates dmesg lines);
- `collect`: prints the lines since a position: `journalctl -k --after-cursor=C -o
  short-iso-precise`, else the ring buffer (`dmesg`, filtered here by time), at most MAX bytes
  (the newest), base64-encoded so the bytes arrive exactly as the node had them;
- `recent`: the last hour the same way (`journalctl -k --since "1 hour ago"`, else the ring
  buffer filtered here by the node's uptime), for preflight.

Tests and the netns testbed point the command at a file instead (all testbed "nodes" share
one kernel, so a per-node kernel log can only be a fixture): `CLUSTER_KERNEL_LOG=/dir/{node}.log`
in the controller's environment makes every node read `/dir/<its name>.log` on the node (the
position is then the file's size). This is the only place that variable is read.

Neither source readable for want of a privilege: `source=denied`, the tools' own words, and
how to grant it (HINT_DENIED).
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass, field

from orchestrator.kernel.model import Position, Source

ENV_FILE = "CLUSTER_KERNEL_LOG"
HINT_DENIED = (
    "let the user read the kernel log: add it to the systemd-journal group (`sudo usermod -aG "
    "systemd-journal USER`, then log in again), or, on a node without a journal, allow dmesg "
    "(`sudo sysctl -w kernel.dmesg_restrict=0`)"
)
SEPARATOR = "---"

# POSIX sh, run by the node's shell. $1 mode, $2 file ('' = the kernel), $3 journal cursor,
# $4 dmesg time (unused on the node: filtered on the controller), $5 file offset, $6 max bytes.
SCRIPT = r"""
mode=$1; file=$2; cursor=$3; offset=$5; max=$6
printf 'boot_id=%s\n' "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
printf 'uptime=%s\n' "$(cut -d' ' -f1 /proc/uptime 2>/dev/null)"
printf 'now=%s\n' "$(date +%s.%N)"
if [ -n "$file" ]; then
  if [ ! -r "$file" ]; then printf 'source=none\nerror=cannot read %s\n' "$file"; exit 0; fi
  printf 'source=file\nsize=%s\n' "$(wc -c < "$file" | tr -d ' ')"
  if [ "$mode" != position ]; then
    echo ---
    tail -c +"$((offset + 1))" "$file" | tail -c "$max" | base64
  fi
  exit 0
fi
jerr=
if command -v journalctl >/dev/null 2>&1; then
  if [ "$mode" = position ]; then
    out=$(journalctl -k -n 1 --show-cursor -q --no-pager 2>&1)
    c=$(printf '%s\n' "$out" | sed -n 's/^-- cursor: //p' | tail -n 1)
    if [ -n "$c" ]; then printf 'source=journal\ncursor=%s\n' "$c"; exit 0; fi
    jerr=$(printf '%s\n' "$out" | tail -n 2 | tr '\n' ' ')
  elif [ "$mode" = recent ]; then
    printf 'source=journal\n---\n'
    journalctl -k --since "1 hour ago" -o short-iso-precise -q --no-pager 2>/dev/null \
      | tail -c "$max" | base64
    exit 0
  elif [ -n "$cursor" ]; then
    printf 'source=journal\n---\n'
    journalctl -k --after-cursor="$cursor" -o short-iso-precise -q --no-pager 2>/dev/null \
      | tail -c "$max" | base64
    exit 0
  fi
fi
out=$(dmesg 2>&1)
if [ $? -ne 0 ]; then
  printf 'source=denied\nerror=%s\njournal=%s\n' "$(printf '%s\n' "$out" | head -n 1)" "$jerr"
  exit 0
fi
if [ "$mode" = position ]; then
  last=$(printf '%s\n' "$out" | tail -n 1 | sed -n 's/^\[ *\([0-9][0-9]*\.[0-9]*\)\].*/\1/p')
  printf 'source=dmesg\nmono=%s\njournal=%s\n' "$last" "$jerr"
  exit 0
fi
printf 'source=dmesg\n---\n'
printf '%s\n' "$out" | tail -c "$max" | base64
"""


def source_file(node: str) -> str:
    """The fixture file a test points this node's kernel log at ('' = the node's kernel)."""
    template = os.environ.get(ENV_FILE, "")
    return template.replace("{node}", node) if template else ""


def argv(node: str, mode: str, position: Position | None = None, max_bytes: int = 0) -> list[str]:
    """The command for `node`: `sh -c SCRIPT sh MODE FILE CURSOR MONO OFFSET MAX`."""
    p = position
    return [
        "sh",
        "-c",
        SCRIPT,
        "sh",
        mode,
        source_file(node),
        (p.cursor or "") if p and p.source == "journal" else "",
        str(p.mono_s) if p and p.mono_s is not None else "",
        str(p.offset_bytes or 0) if p and p.source == "file" else "0",
        str(max_bytes),
    ]


@dataclass
class Answer:
    """What the command printed: its `key=value` head, and the log bytes after `---`."""

    fields: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    problem: str | None = None  # the body did not decode


def parse_answer(stdout: str) -> Answer:
    head, sep, rest = stdout.partition("\n" + SEPARATOR + "\n")
    if not sep and stdout.startswith(SEPARATOR + "\n"):
        head, rest, sep = "", stdout[len(SEPARATOR) + 1 :], "yes"
    answer = Answer()
    for line in head.splitlines():
        key, eq, value = line.partition("=")
        if eq and key.isidentifier():
            answer.fields[key] = value
    if sep:
        try:
            answer.body = base64.b64decode("".join(rest.split()), validate=True)
        except (binascii.Error, ValueError) as exc:
            answer.problem = f"the kernel log did not decode: {exc}"
    return answer


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def position_of(answer: Answer, noted_at: float) -> Position:
    """The position a `position` answer states (a denied or silent node says why)."""
    f = answer.fields
    raw = f.get("source", "none")
    source: Source = raw if raw in ("journal", "dmesg", "file", "denied", "none") else "none"  # type: ignore[assignment]
    now, uptime = _float(f.get("now")), _float(f.get("uptime"))
    boot_wall = now - uptime if now is not None and uptime is not None else None
    error = f.get("error") or None
    hint: str | None = None
    if source == "denied":
        journal = (f.get("journal") or "").strip()
        error = "; ".join(x for x in (error, f"journalctl: {journal}" if journal else "") if x)
        hint = HINT_DENIED
    elif source == "none" and not error:
        error = "neither journalctl nor dmesg answered"
    mono = _float(f.get("mono"))
    if source == "dmesg" and mono is None:
        mono = 0.0  # an empty ring buffer: every line to come is after the position
    size = f.get("size", "")
    # a test's fixture file stands for that node's own kernel: no boot id shared with the others
    boot_id = None if source == "file" else f.get("boot_id") or None
    return Position(
        source=source,
        cursor=f.get("cursor") or None,
        mono_s=mono if source == "dmesg" else None,
        offset_bytes=int(size) if source == "file" and size.isdigit() else None,
        boot_id=boot_id,
        boot_wall=boot_wall,
        noted_at=noted_at,
        error=error,
        hint=hint,
    )
