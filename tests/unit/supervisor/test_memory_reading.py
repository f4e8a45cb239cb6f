"""One model says what a node's memory reading is (models/memory.py); the node sampler, the
parsed /proc/meminfo, the runtime's sample, the reducer's event and samples.jsonl agree with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from orchestrator.models.memory import MemoryReading
from orchestrator.models.run import Sample
from orchestrator.probes.meminfo import parse_meminfo
from orchestrator.runtime.base import NodeSample
from orchestrator.runtime.specs import sample_fields

ROOT = Path(__file__).resolve().parents[3]
GIB = 2**30


def test_the_node_sampler_prints_every_field_of_the_reading_by_its_name() -> None:
    sampler = ROOT / "orchestrator" / "runtime" / "node_sampler.py"
    done = subprocess.run(
        [sys.executable, str(sampler)], capture_output=True, text=True, timeout=60, check=True
    )
    data = json.loads(done.stdout)
    reading = MemoryReading.model_validate(data)  # what the docker runtime does with it
    assert set(MemoryReading.model_fields) <= set(data)
    assert reading.mem_free is not None and reading.mem_available is not None


def test_a_reading_read_off_a_meminfo_or_a_sample_is_just_the_reading() -> None:
    text = (ROOT / "tests/fixtures/probes/meminfo/spark-gb10-edited.stdout").read_text()
    info = parse_meminfo(text)
    reading = MemoryReading.of(info)
    assert type(reading) is MemoryReading
    assert reading.model_dump() == {
        name: getattr(info, name) for name in MemoryReading.model_fields
    }
    event = Sample(ts=1.0, rank=3, rchar=5, **reading.model_dump())
    assert MemoryReading.of(event) == reading


def test_a_node_sample_is_flat_in_samples_jsonl_and_in_the_sample_event() -> None:
    reading = MemoryReading(mem_free=2 * GIB, mem_available=90 * GIB, cached=88 * GIB, dirty=0)
    s = NodeSample(memory=reading, rchar=7, read_bytes=3, loadavg=0.5)
    # docs/run-directory.md: {"ts", "mem_free", "mem_available", "cached", "dirty", "rchar",
    # "read_bytes", "loadavg"}, in this order
    assert list(s.as_json()) == [
        "mem_free", "mem_available", "cached", "dirty", "rchar", "read_bytes", "loadavg",
    ]  # fmt: skip
    event = Sample(ts=2.0, rank=0, **sample_fields(s))
    assert MemoryReading.of(event) == reading and event.rchar == 7 and event.read_bytes == 3
