"""Many independent probes in one command: one shell start-up per node, not one per probe.

A node whose login shell is slow (a `~/.bashrc` with conda or pyenv init: 0.2 s and more) pays
that start-up for every command sshd runs. The probes of one node are independent, so they go
out as one `sh -c SCRIPT`: each probe's argv runs in the background (they take as long as the
slowest, not their sum: `docker stats` samples for a second, `ssh` to peers for several), under
`timeout` (a hung `df` on a dead NFS mount costs that probe, not the batch), with its stdout and
stderr kept in files; then every probe's exit status and both streams are printed between
boundary lines that carry a random token no probe output contains.

Pure: `batch_argv` builds the command, `split_batch` reads its output back into one
`CommandResult` per probe, which the probe's own parser reads (`Probe.read`), exactly as if the
probe had been run alone. Each argv is quoted with `shlex.join`, as the SSH transport quotes
every command.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.transport.base import CommandResult

TIMED_OUT = 124
"""`timeout`'s exit status when the probe ran past its deadline."""
_NO_BATCH = 97


@dataclass(frozen=True)
class Batch:
    """One command for many probes: `argv` to run, `names` in order, `token` of its output."""

    argv: tuple[str, ...]
    names: tuple[str, ...]
    commands: Mapping[str, tuple[str, ...]]
    token: str
    timeout_s: float


def batch_argv(
    commands: Mapping[str, Sequence[str]], timeout_s: float, token: str | None = None
) -> Batch:
    """One `sh -c` that runs every command at once, each bounded by `timeout_s`.

    Each probe's files start with its boundary line (written by the shell's own printf), so
    one `cat` prints every section in order at the end: few processes besides the probes."""
    token = token or f"@@cluster-batch-{secrets.token_hex(8)}"
    names = tuple(commands)
    lines = [
        "d=$(mktemp -d) || exit 97",
        "trap 'rm -rf \"$d\"' EXIT",
        # `timeout` where the node has it (coreutils, busybox); without it, unbounded.
        't=""; command -v timeout >/dev/null 2>&1 && t="timeout -k 2 $1"',
    ]
    for i, name in enumerate(names):
        f = f"$d/{i:03d}"
        lines.append(
            f'printf \'\\n%s {i} o\\n\' "$2" >"{f}.o"; printf \'\\n%s {i} e\\n\' "$2" >"{f}.e"'
        )
        lines.append(f'$t {shlex.join(commands[name])} >>"{f}.o" 2>>"{f}.e" </dev/null & p{i}=$!')
    for i, _ in enumerate(names):
        lines.append(f'wait $p{i}; printf \'\\n%s {i} %s rc\\n\' "$2" $? >>"$d/999.s"')
    lines.append('cat "$d"/*; printf \'\\n%s end\\n\' "$2"')
    argv = ("sh", "-c", "\n".join(lines), "cluster-batch", f"{timeout_s:g}", token)
    return Batch(
        argv=argv,
        names=names,
        commands={n: tuple(commands[n]) for n in names},
        token=token,
        timeout_s=timeout_s,
    )


def split_batch(
    batch: Batch, node: str, stdout: str, duration_s: float
) -> dict[str, CommandResult]:
    """Every probe's own result from the batch's stdout. A probe whose section or exit status
    never came (the batch was cut short) is missing from the answer: the caller says so."""
    sections = re.split(rf"\n{re.escape(batch.token)} ", stdout)[1:]  # [0]: a shell's chatter
    streams: dict[tuple[int, str], str] = {}
    status: dict[int, int] = {}
    for section in sections:
        header, _, body = section.partition("\n")
        parts = header.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1] in ("o", "e"):
            streams[int(parts[0]), parts[1]] = body
        elif len(parts) == 3 and parts[0].isdigit() and parts[2] == "rc":
            with contextlib.suppress(ValueError):
                status[int(parts[0])] = int(parts[1])
    results = {}
    for i, name in enumerate(batch.names):
        if i not in status or (i, "o") not in streams or (i, "e") not in streams:
            continue
        results[name] = CommandResult(
            node=node,
            argv=batch.commands[name],
            exit_status=status[i],
            stdout=streams[i, "o"],
            stderr=streams[i, "e"],
            duration_s=duration_s,
        )
    return results


def batch_failed(status: int | None) -> bool:
    """The batch itself could not run (no temporary folder on the node)."""
    return status == _NO_BATCH


# -- for fakes: what the script does, without a shell ---------------------------------------

# A quoted command may span lines (a probe's script): non-greedy up to its redirections.
_LINE = re.compile(r'^\$t (.*?) >>"\$d/\d+\.o" 2>>"\$d/\d+\.e" </dev/null & p\d+=\$!$', re.M | re.S)


def unbatch(argv: Sequence[str]) -> tuple[str, list[tuple[str, ...]]] | None:
    """(token, the commands in order) when `argv` is a batch, else None."""
    if len(argv) != 6 or tuple(argv[:2]) != ("sh", "-c") or argv[3] != "cluster-batch":
        return None
    return argv[5], [tuple(shlex.split(m.group(1))) for m in _LINE.finditer(argv[2])]


def batch_output(token: str, answers: Sequence[tuple[int, str, str]]) -> str:
    """The stdout the batch script prints for these (exit status, stdout, stderr) answers."""
    parts = [
        f"\n{token} {i} o\n{out}\n{token} {i} e\n{err}" for i, (_, out, err) in enumerate(answers)
    ]
    parts += [f"\n{token} {i} {status} rc" for i, (status, _, _) in enumerate(answers)]
    return "".join(parts) + f"\n{token} end\n"
