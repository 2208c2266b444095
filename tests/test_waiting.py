"""support.waiting.wait_for, the one way the tests wait: it returns the condition's value the
moment it holds and fails, naming what it waited for, only after its upper bound."""

from __future__ import annotations

import itertools

import pytest
from support.waiting import wait_for


def test_it_returns_the_first_truthy_value_without_waiting_out_the_bound() -> None:
    calls = itertools.count(1)
    assert wait_for(lambda: (n := next(calls)) >= 3 and f"call {n}", "the third call", timeout_s=60, poll_s=0.001) == "call 3"


def test_it_fails_naming_what_it_waited_for_its_last_value_and_the_detail() -> None:
    with pytest.raises(AssertionError) as failed:
        wait_for(lambda: [], "a non-empty list", timeout_s=0.05, poll_s=0.01, detail=lambda: "counts {'swapped': 0}")
    assert str(failed.value) == "timed out after 0.05 s waiting for a non-empty list (last value []); counts {'swapped': 0}"


def test_an_error_in_the_condition_ends_the_wait_at_once() -> None:
    def died() -> bool:
        raise RuntimeError("the daemon exited")

    with pytest.raises(RuntimeError, match="the daemon exited"):
        wait_for(died, "frames", timeout_s=60)


def test_a_timeout_passed_where_what_goes_is_refused() -> None:
    with pytest.raises(TypeError, match="`what` must be a str"):
        wait_for(lambda: True, 10)  # type: ignore[arg-type]
