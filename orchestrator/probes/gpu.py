"""`nvidia-smi --query-gpu=...`: which GPUs a node has, with driver and compute capability.

On a DGX Spark the GB10 shares one LPDDR5x pool with the CPU, and nvidia-smi reports every
`memory.*` field as `[N/A]` (NVIDIA's DGX Spark known issues; a real capture is kept in
`tests/fixtures/probes/nvidia_smi/`). Those fields parse as `None`, never as 0: a missing total
is "unified memory, ask /proc/meminfo" (see `probes/meminfo.py`), not "no memory".

No GPU is an answer too: when the binary is absent (the shell exits 127, "command not found")
the probe returns `GpuInfo(present=False)` with the reason, rather than failing.

The parser reads the fixed column order of `QUERY`. When the output carries a header line (a
capture made with `--format=csv` and another column list), columns are matched by name instead,
units stripped (`memory.total [MiB]`), and unknown columns ignored.
"""

from __future__ import annotations

import csv

from pydantic import Field

from orchestrator.errors import tail
from orchestrator.models.base import StrictModel
from orchestrator.probes.base import Probe, excerpt, fail

NAME = "nvidia_smi"
QUERY = ("name", "memory.total", "memory.used", "driver_version", "compute_cap")

# What nvidia-smi prints for a field the device cannot report.
_NOT_AVAILABLE = frozenset({"[N/A]", "N/A", "[Not Supported]", "Not Supported", ""})


class Gpu(StrictModel):
    """One GPU as nvidia-smi reports it. Memory in MiB; None where the device reports `[N/A]`."""

    name: str = Field(min_length=1, description="e.g. NVIDIA GB10")
    memory_total_mib: int | None = Field(default=None, ge=0, description="None on unified memory")
    memory_used_mib: int | None = Field(default=None, ge=0)
    driver_version: str | None = None
    compute_cap: str | None = Field(default=None, description='"12.1" on a GB10')

    @property
    def unified_memory(self) -> bool:
        """nvidia-smi cannot size this GPU's memory: it shares the host's (GB10)."""
        return self.memory_total_mib is None


class GpuInfo(StrictModel):
    """The GPUs of one node. `present=False` with a reason when the node has none we can see."""

    present: bool
    gpus: tuple[Gpu, ...] = ()
    reason: str | None = Field(default=None, description="why present is False")


def _value(raw: str) -> str | None:
    value = raw.strip()
    return None if value in _NOT_AVAILABLE else value


def _mib(raw: str, column: str) -> int | None:
    value = _value(raw)
    if value is None:
        return None
    number = value.removesuffix("MiB").strip()
    if not number.isdigit():
        raise fail(NAME, f"{column} is not a count of MiB: {raw.strip()!r}")
    return int(number)


def parse_nvidia_smi(stdout: str) -> GpuInfo:
    """CSV rows of `nvidia-smi --query-gpu=<QUERY> --format=csv,noheader,nounits` -> `GpuInfo`."""
    rows = [row for row in csv.reader(stdout.splitlines(), skipinitialspace=True) if row]
    if not rows:
        raise fail(NAME, "no rows: nvidia-smi printed nothing")
    columns = list(QUERY)
    if rows[0] and rows[0][0].strip().lower() in ("name", "index"):  # a header line
        columns = [cell.split("[")[0].strip().lower() for cell in rows[0]]
        rows = rows[1:]
        if "name" not in columns:
            raise fail(NAME, f"the header has no name column: {excerpt(stdout)!r}")
    gpus = []
    for number, row in enumerate(rows, start=1):
        if len(row) != len(columns):
            raise fail(NAME, f"row {number} has {len(row)} fields, not {len(columns)}: {row!r}")
        cell = dict(zip(columns, row, strict=True))
        name = _value(cell["name"])
        if name is None:
            raise fail(NAME, f"row {number} has no GPU name: {row!r}")
        gpus.append(
            Gpu(
                name=name,
                memory_total_mib=_mib(cell.get("memory.total", ""), "memory.total"),
                memory_used_mib=_mib(cell.get("memory.used", ""), "memory.used"),
                driver_version=_value(cell.get("driver_version", "")),
                compute_cap=_value(cell.get("compute_cap", "")),
            )
        )
    return GpuInfo(present=True, gpus=tuple(gpus))


def _absent(exit_status: int | None, stdout: str, stderr: str) -> GpuInfo | None:
    """`nvidia-smi: command not found` (exit 127): the node has no NVIDIA tooling, so no GPU."""
    complaint = tail(stderr, 1).strip()
    if exit_status == 127 or complaint.endswith("not found"):
        return GpuInfo(present=False, reason=complaint or "nvidia-smi is not installed")
    return None


NVIDIA_SMI: Probe[GpuInfo] = Probe(
    name=NAME,
    argv=("nvidia-smi", f"--query-gpu={','.join(QUERY)}", "--format=csv,noheader,nounits"),
    parse=parse_nvidia_smi,
    on_failure=_absent,
)
