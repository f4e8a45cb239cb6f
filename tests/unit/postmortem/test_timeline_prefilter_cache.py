"""The scan's keyword automaton is cached per SignatureSet. It was keyed by id() alone: once a set
was dropped, a new set could be born at the same address and be served the old set's automaton
(the third-set bench flipped a case between two answers from run to run)."""

from __future__ import annotations

from orchestrator.postmortem import timeline
from orchestrator.postmortem.signatures import SignatureSet, load_signatures


def test_a_new_signature_set_never_gets_an_earlier_sets_automaton():
    shipped = list(load_signatures().compiled)
    half = len(shipped) // 2
    for _ in range(20):  # CPython reuses a freed address at once: one round would do
        first = SignatureSet(shipped[:half])
        served_first, _ = timeline._automaton(first, ())
        del first
        second = SignatureSet(shipped[half:])
        assert timeline._automaton(second, ())[0] is not served_first
        del second
