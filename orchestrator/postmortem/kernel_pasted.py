"""`cluster postmortem --logs`: kernel logs pasted beside the rank logs.

A node's `journalctl -k` or `dmesg` comes either named (`--kernel-log RANK=FILE`: RANK is the
rank whose node it is, as a number or a name that says it: 3, rank-3, tp3) or among the rank
logs, told by its form (most lines carry the kernel's prefix, `read.looks_like_kernel_log`);
its rank is then the one its file name states. Everything in a pasted kernel log concerns its
rank: the on-call engineer said whose node it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.kernel.read import looks_like_kernel_log
from orchestrator.postmortem.collect import collect_logs, rank_from_name
from orchestrator.postmortem.diagnose import diagnose
from orchestrator.postmortem.kernel_hits import MAX_READ_BYTES, with_pasted_kernel_logs
from orchestrator.postmortem.model import Diagnosis
from orchestrator.postmortem.signatures import SignatureSet, load_signatures

WHERE = "cluster postmortem --kernel-log"


def parse_kernel_args(values: Sequence[str]) -> dict[int, Path]:
    """`RANK=FILE` pairs -> {rank: file}; a bad one is one clear line."""
    out: dict[int, Path] = {}
    for value in values:
        node, eq, file = value.partition("=")
        rank = int(node) if node.isdigit() else rank_from_name(Path(node)) if node else None
        if not eq or not file or rank is None:
            raise ConfigError(
                f"--kernel-log {value!r}: expected RANK=FILE",
                where=WHERE,
                hint="name the rank whose node the log is from: --kernel-log 5=spark-05-dmesg.txt "
                "(or rank-5=..., tp5=...)",
            )
        path = Path(file)
        if not path.is_file():
            raise ConfigError(
                f"no such kernel log: {file}",
                where=WHERE,
                hint="give the file `journalctl -k` or `dmesg` wrote on that node",
            )
        if rank in out:
            raise ConfigError(f"two kernel logs for rank {rank}", where=WHERE, hint="one per rank")
        out[rank] = path
    return out


def _head(path: Path) -> str:
    with path.open("rb") as fh:
        return fh.read(min(MAX_READ_BYTES, 256 * 1024)).decode("utf-8", errors="replace")


def split_by_form(paths: Sequence[Path]) -> tuple[list[Path], dict[int, Path]]:
    """Rank logs, and the kernel logs among them (told by their form, ranked by their name)."""
    logs: list[Path] = []
    kernel: dict[int, Path] = {}
    for p in paths:
        if p.is_file() and looks_like_kernel_log(_head(p)):
            rank = rank_from_name(p)
            if rank is None:
                raise ConfigError(
                    f"{p} is a kernel log (journalctl -k / dmesg), but its name says no rank",
                    where="cluster postmortem --logs",
                    hint=f"give it as --kernel-log RANK={p}",
                )
            kernel[rank] = p
        else:
            logs.append(p)
    return logs, kernel


def postmortem_logs_with_kernel(
    paths: Sequence[Path],
    kernel_args: Sequence[str] = (),
    sigs: SignatureSet | None = None,
    *,
    workers: int | None = None,
) -> Diagnosis:
    """Loose rank logs and the kernel logs of their nodes, diagnosed together."""
    sigs = sigs or load_signatures()
    named = parse_kernel_args(kernel_args)
    logs, by_form = split_by_form(paths)
    kernel = {**by_form, **named}
    if not logs:
        raise ConfigError(
            "only kernel logs were given: the rank logs are needed beside them",
            where="cluster postmortem --logs",
            hint="cluster postmortem --logs rank-0.log rank-1.log --kernel-log 1=dmesg.txt",
        )
    collected = collect_logs(logs, sigs, workers=workers)
    ranks, notes = with_pasted_kernel_logs(collected.ranks, kernel, sigs)
    run = collected.run.model_copy(
        update={
            "notes": collected.run.notes
            + tuple(f"rank {k}: kernel log {p}" for k, p in sorted(kernel.items()))
            + tuple(notes)
        }
    )
    return diagnose(run, ranks, sigs)
