"""`cluster status` while serving (supervisor/table.py `serving_lines`): the serving block above
the table (uptime, canary last and p50/p99, tokens/s, running/waiting, the last incident) and
every rank's last line under it, whole at every width, fitting a 24-line terminal at 80x24."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from orchestrator.supervisor.table import BootTable, lay_out
from orchestrator.supervisor.view import BootView, ServingHealth
from tests.unit.supervisor.test_table import T0, row, view

HEALTHY = ServingHealth(
    ready_at=T0 - 3725,
    uptime_s=3725.0,
    canary_last_s=0.042,
    canary_p50_s=0.038,
    canary_p99_s=1.25,
    health_ok=True,
    running=3,
    waiting=1,
    generated_tokens=120_000,
    tokens_per_s=41.66,
)


def serving_view(health: ServingHealth, **kw: object) -> BootView:
    rows = [
        row(
            k,
            "serving",
            100.0,
            eta_s=None,
            serving="in the group",
            last_line=f"[2026-12-01 07:20:0{k} TP{k}] Decode batch. #running-req: 3",
            mem_available=int((90.5 - k) * 2**30),
        )
        for k in range(8)
    ]
    rows[0] = row(0, "serving", 100.0, eta_s=None, serving="answers in 12 ms")
    return view(*rows, phase="ready", serving=health, **kw)


def text_of(v: BootView, width: int) -> list[str]:
    return [t.plain for t in lay_out(v, width).lines]


def test_the_serving_block_says_uptime_canary_latencies_tokens_and_requests():
    lines = text_of(serving_view(HEALTHY), 120)
    block = lines[2]
    assert block.startswith("serving 62m05s · "), block
    assert "canary 42 ms (p50 38 ms, p99 1.2 s)" in block, block
    assert "41.7 tok/s" in block and "3 running, 1 waiting" in block, block
    assert lines[3] == "no incident since READY"


def test_every_rank_has_its_last_line_and_memory_while_serving():
    lines = text_of(serving_view(HEALTHY), 120)
    notes = [line for line in lines if line.startswith("rank ") and ": " in line]
    assert [int(n.split()[1].rstrip(":")) for n in notes] == list(range(8)), notes
    assert "Decode batch" in notes[3]
    assert "MemAvail" in "\n".join(lines) and "87.5 GiB" in "\n".join(lines)


def test_an_incident_a_failing_canary_and_a_waiting_restart_are_shown():
    health = HEALTHY.model_copy(
        update={
            "attempt": 1,
            "canary_last_s": None,
            "canary_failing_s": 95.0,
            "canary_error": "timed out",
            "incidents": 2,
            "last_incident": "RANK_DIED rank 3 (sim-node3) died while serving (exit code 3)",
            "restart_wait": "backoff until 60 s after the death",
        }
    )
    lines = text_of(serving_view(health), 160)
    assert "(attempt 1)" in lines[2] and "canary failing 1m35s: timed out" in lines[2]
    assert lines[3] == "restart waits: backoff until 60 s after the death"
    assert lines[4].startswith("last incident (of 2): RANK_DIED rank 3"), lines[4]


def test_no_serving_block_before_ready():
    lines = text_of(view(row(0), row(1)), 120)
    assert not any(line.startswith(("serving ", "no incident")) for line in lines)


@pytest.mark.parametrize("width", [60, 80, 100, 160])
def test_the_serving_table_fits_the_width_and_an_80x24_terminal(width):
    v = serving_view(
        HEALTHY.model_copy(update={"last_incident": "WEDGED " + "x" * 300, "incidents": 1})
    )
    layout = lay_out(v, width)
    assert all(t.cell_len <= width for t in layout.lines)
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=False, color_system=None).print(BootTable(v))
    printed = out.getvalue().splitlines()
    assert all(len(line) <= width for line in printed)
    if width == 80:
        assert len(printed) <= 24, printed
