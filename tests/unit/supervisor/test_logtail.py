"""The readable tail of a rank's log: C++ backtraces folded, the error line kept."""

from __future__ import annotations

from orchestrator.logtail import append_line, fold_frames, is_frame, readable_tail

FRAMES = [
    f"frame #{k}: c10::Error::Error(c10::SourceLocation) + 0x{k:x} (0x7f55 in libc10.so)"
    for k in range(26)
]
ERROR = 'NCCLCHECK {"event": "error", "stage": "store", "message": "timed out"}'


def test_frames_are_told_from_ordinary_lines() -> None:
    assert is_frame(FRAMES[0])
    assert is_frame("#3  0x00007f1234 in start_thread () from /lib/libc.so.6")
    assert not is_frame("Loading safetensors checkpoint shards: 40% Completed | 4/10")
    assert not is_frame("[rank3] frame rate 0x10")


def test_a_run_of_frames_becomes_one_line_that_counts_them() -> None:
    lines = ["Traceback:", *FRAMES, "RuntimeError: connect timed out", *FRAMES[:1]]
    assert fold_frames(lines) == [
        "Traceback:",
        "[... 26 C++ stack frames ...]",
        "RuntimeError: connect timed out",
        "[... 1 C++ stack frame ...]",
    ]


def test_the_error_line_stays_in_the_tail_when_frames_and_noise_follow_it() -> None:
    noise = [f"[W socket.cpp:{k}] client socket failed to connect" for k in range(30)]
    tail = readable_tail([ERROR, *FRAMES, *noise], 15, keep=lambda s: '"event": "error"' in s)
    assert len(tail) == 15
    assert tail[0] == ERROR and tail[1] == "[...]" and tail[-1] == noise[-1]


def test_the_tail_is_plain_when_the_error_line_is_already_in_it() -> None:
    tail = readable_tail(["a", ERROR, *FRAMES, "b"], 15, keep=lambda s: "error" in s)
    assert tail == ("a", ERROR, "[... 26 C++ stack frames ...]", "b")


def test_a_live_tail_folds_frames_as_they_arrive_and_stays_bounded() -> None:
    tail: tuple[str, ...] = ()
    for line in ["x", *FRAMES, "y", *[str(k) for k in range(30)]]:
        tail = append_line(tail, line, 20)
    assert len(tail) == 20 and tail[-1] == "29"
    tail = ()
    for line in ["x", *FRAMES, "y"]:
        tail = append_line(tail, line, 20)
    assert tail == ("x", "[... 26 C++ stack frames ...]", "y")


def test_extending_a_tail_by_a_batch_is_appending_line_by_line() -> None:
    import random

    from orchestrator.logtail import extend_tail

    rng = random.Random(7)
    # With frames, and without (the slice that most batches take, issue 31); tails of 1 to 20.
    for pool in (["a", "b", FRAMES[0], FRAMES[1], "c", ""], ["a", "b", "c", ""]):
        for n in (1, 2, 20):
            for _ in range(300):
                start = tuple(rng.choice(pool) for _ in range(rng.randrange(0, 25)))
                tail: tuple[str, ...] = ()
                for line in start:
                    tail = append_line(tail, line, n)
                if rng.random() < 0.2:
                    tail = append_line(tail, FRAMES[2], n)  # a folded run ends the tail
                batch = [rng.choice(pool) for _ in range(rng.randrange(0, 60))]
                expected = tail
                for line in batch:
                    expected = append_line(expected, line, n)
                assert extend_tail(tail, batch, n) == expected, (tail, batch, n)
