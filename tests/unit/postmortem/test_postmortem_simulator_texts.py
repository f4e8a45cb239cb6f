"""The simulator's fault texts are diagnosed with the category of the failure they imitate.

The simulator (orchestrator/simulator/) prints real failure lines on request; a boot it fails
must come out of the postmortem with the right category. Skipped while the simulator's fault
table is not importable (it is built in parallel).
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from orchestrator.postmortem.signatures import load_signatures
from tests.engine_lines import load_corpus

faults = pytest.importorskip("orchestrator.simulator.faults")
dialects = pytest.importorskip("orchestrator.simulator.dialects")

SIGS = load_signatures()
PARAPHRASES = {e.text for e in load_corpus() if e.paraphrase}

EXPECTED = {
    "trtllm-fmha": "unsupported-arch-kernel",
    "g1-scale-c": "moe-runner",
    "sparse-mla": "config-validator-refusal",
    "kv-budget": "kv-cache-budget",
    "cuda-oom": "out-of-memory",
    "triton-jit": "unsupported-arch-kernel",
}


def _context(engine: str) -> Any:
    try:
        memory = faults.Memory(total=128 * 2**30, free=2 * 2**30)
        return faults.SignatureContext(
            engine=engine, max_len=524288, memory=memory, mem_fraction=0.85
        )
    except (AttributeError, TypeError) as exc:  # the simulator's API moved
        pytest.skip(f"simulator fault API changed: {exc}")


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_simulated_failure_text_maps_to_the_category_of_the_real_failure(
    engine: str, name: str
) -> None:
    table = getattr(faults, "SIGNATURES", None)
    if not isinstance(table, dict) or name not in table:
        pytest.skip(f"the simulator has no fault signature {name!r}")
    text = table[name].text(_context(engine))
    found = {c.sig.category for c in SIGS.match_text(text)}
    if text in PARAPHRASES or text.removeprefix("ValueError: ") in PARAPHRASES:
        # the corpus rule: no signature matches a paraphrase (the simulator should print the
        # real line, e.g. sglang-flashinfer-sparse-mla-validator)
        assert found == set()
        pytest.skip(f"{name}: the simulator prints a paraphrase, not the real line")
    assert EXPECTED[name] in found, (name, text, found)


ECHOES = {
    "dist_client_timeout": ("rendezvous-network", "cause"),
    "dist_store_timeout": ("rendezvous-network", "cause"),
    "dist_recv_closed": ("rendezvous-network", "cascade"),
    "tcpstore_should_dump_warning": ("rendezvous-network", "cascade"),
    "gloo_closed_by_peer": ("rendezvous-network", "cascade"),
    "gloo_full_mesh_failed": ("rendezvous-network", "cause"),
    "gloo_no_address": ("rendezvous-network", "cause"),
    "nccl_no_interface_error": ("rendezvous-network", "cause"),
    "nccl_watchdog_timeout": ("watchdog-timeout", "cascade"),
}
ARGS = {
    "addr": "10.0.0.1",
    "port": 29500,
    "timeout_s": 600,
    "joined": 7,
    "world": 8,
    "rank": 3,
    "iface": "enP7s7",
    "seq": 5,
    "op": "ALLREDUCE",
    "numel_in": 1,
    "numel_out": 1,
    "timeout_ms": 600000,
    "ran_ms": 600049,
}


@pytest.mark.parametrize("name", sorted(ECHOES))
def test_the_simulators_rendezvous_and_collective_lines_keep_their_role(name: str) -> None:
    fn = getattr(dialects, name, None)
    if fn is None:
        pytest.skip(f"the simulator has no {name}")
    params = inspect.signature(fn).parameters
    if not set(params) <= set(ARGS):
        pytest.skip(f"{name} takes other arguments now")
    out = fn(**{k: ARGS[k] for k in params})
    text = out if isinstance(out, str) else "\n".join(out)
    found = {(c.sig.category, c.sig.role) for c in SIGS.match_text(text)}
    assert ECHOES[name] in found, (name, text, found)
