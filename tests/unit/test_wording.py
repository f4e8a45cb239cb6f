"""Words the reports share: rank ranges, launch waves, plurals."""

from __future__ import annotations

from orchestrator.wording import plural, ranks_text, waves_text


def test_launch_waves_read_as_words_not_a_python_list():
    assert waves_text([tuple(range(8))]) == "one wave: ranks 0-7"
    assert waves_text([(0,), tuple(range(1, 8))]) == "2 waves: rank 0, then ranks 1-7"
    assert ranks_text([5]) == "rank 5"


def test_plurals_of_words_ending_in_s_take_es():
    assert plural(8, "process") == "8 processes"
    assert plural(1, "process") == "1 process"
    assert plural(2, "container") == "2 containers"
