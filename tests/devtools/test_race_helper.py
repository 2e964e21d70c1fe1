"""The race helper the concurrency tests share (tests/helpers/races.py):
it releases every call at once, keeps each result in order, and never lets
a racing call's error or hang pass silently."""

from __future__ import annotations

import threading

import pytest

from tests.helpers.races import run_together


def test_the_calls_run_at_once_and_answer_in_order():
    inside = []
    both_in = threading.Event()

    def call(n: int) -> int:
        inside.append(n)
        if len(inside) == 3:
            both_in.set()
        assert both_in.wait(5), "the calls were not released together"
        return n * 10

    assert run_together([lambda n=n: call(n) for n in range(3)]) == [0, 10, 20]  # type: ignore[misc]


def test_a_racing_calls_error_is_raised_in_the_test():
    def boom() -> None:
        raise ValueError("lost a write")

    with pytest.raises(ValueError, match="lost a write"):
        run_together([lambda: None, boom])


def test_a_call_that_hangs_fails_the_test():
    release = threading.Event()
    try:
        with pytest.raises(AssertionError, match="1 of 2 racing calls still running"):
            run_together([lambda: None, lambda: release.wait(10)], timeout=0.5)
    finally:
        release.set()  # the hung call ends with the test
