"""The fault grammar: one action per fault, its options, and the rank it applies to."""

from __future__ import annotations

import pytest

from orchestrator.simulator.faults import (
    DEFAULT_SIGNATURE,
    PHASES,
    SIGNATURES,
    FaultError,
    faults_for,
    parse_faults,
    parse_rate,
    parse_size,
    signature_for,
)


def test_the_documented_example_parses_into_two_faults_for_two_ranks() -> None:
    slow, crash = parse_faults("rank=3:slow-read=2MB/s;rank=5:exit-at=kv:signature=kv-budget")
    assert (slow.action, slow.ranks, slow.rate) == ("slow-read", frozenset({3}), 2e6)
    assert (crash.action, crash.phase, crash.signature, crash.code) == (
        "exit-at",
        "kv",
        "kv-budget",
        1,
    )
    assert crash.applies_to(5) and not crash.applies_to(3)


def test_every_action_parses() -> None:
    hang, hog, drop, drop_at, exit_ = parse_faults(
        "hang-at=load; hog=512MiB:at=graph; drop-peer; drop-peer:at=ready; "
        "exit-at=warmup:code=3:signal=kill"
    )
    assert (hang.phase, hog.size, hog.phase, drop.phase, drop_at.phase) == (
        "load",
        512 * 2**20,
        "graph",
        "load",
        "ready",
    )
    assert (exit_.code, exit_.signal) == (3, "KILL")
    assert hang.ranks is None  # no rank=: every rank (env) unless a default is given


def test_flag_faults_default_to_their_own_rank_env_faults_to_all() -> None:
    env = {"CLUSTER_SIM_FAULT": "hang-at=kv;rank=1,2:hog=1MB"}
    mine = faults_for(2, ["exit-at=graph"], env)
    assert [f.action for f in mine] == ["exit-at", "hang-at", "hog"]
    assert [f.action for f in faults_for(0, [], env)] == ["hang-at"]
    assert [f.action for f in faults_for(5, [], {"CLUSTER_SIM_FAULT": "rank=*:hang-at=kv"})] == [
        "hang-at"
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("rank=3", "exactly one action"),
        ("hang-at=kv:exit-at=kv", "exactly one action"),
        ("hang-at=nowhere", "unknown phase"),
        ("exit-at=kv:signature=segv", "unknown signature"),
        ("slow-read=fast", "not a rate"),
        ("slow-read=0", "positive"),
        ("hog=lots", "not a size"),
        ("hang-at=kv:signature=kv-budget", "does not apply"),
        ("exit-at=kv:code=0", "1..255"),
        ("exit-at=kv:signal=HUP", "signal must be"),
        ("drop-peer=now", "takes no value"),
        ("rank=x:hang-at=kv", "not a rank list"),
        ("bogus=1", "unknown key"),
        ("hang-at=kv:hang-at=kv", "twice"),
        ("hang-at", "needs a value"),
    ],
)
def test_a_bad_spec_names_its_problem(spec: str, message: str) -> None:
    with pytest.raises(FaultError, match=message):
        parse_faults(spec)


def test_units_are_decimal_for_kb_mb_gb_and_binary_for_kib_mib_gib() -> None:
    assert parse_size("2GiB") == 2 * 2**30 and parse_size("500MB") == 500_000_000
    assert parse_size("1.5G") == 1_500_000_000 and parse_size("4096") == 4096
    assert parse_rate("2MB/s") == 2e6 and parse_rate("16MiB/s") == 16 * 2**20
    assert parse_rate("unlimited") == 0 and parse_rate("16M") == 16e6


def test_exit_without_a_signature_uses_the_failure_seed_002_saw_at_that_phase() -> None:
    assert set(DEFAULT_SIGNATURE) == set(PHASES)
    assert set(DEFAULT_SIGNATURE.values()) <= set(SIGNATURES)
    (fault,) = parse_faults("exit-at=autotune")
    assert signature_for(fault).name == "trtllm-fmha"
