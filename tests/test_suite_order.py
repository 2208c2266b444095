"""The suite's longest files start first (tests/support/order.py): the order is only where files
start, each file's tests keep theirs, and every file named there still exists."""

from __future__ import annotations

from pathlib import Path

from support.order import LONG_FILES, longest_first

ROOT = Path(__file__).resolve().parents[1]


def test_every_long_file_named_is_a_test_file_of_the_suite() -> None:
    missing = [name for name in LONG_FILES if not (ROOT / name).is_file()]
    assert missing == [], f"moved or renamed: update tests/support/order.py LONG_FILES ({missing})"
    assert len(set(LONG_FILES)) == len(LONG_FILES)


def test_the_long_files_go_first_in_their_order_and_each_file_keeps_its_own() -> None:
    ids = ["tests/a.py::t1", "tests/long2.py::x[1]", "tests/b.py::t", "tests/long1.py::y", "tests/long2.py::x[0]", "tests/a.py::t2"]
    order = [ids[i] for i in longest_first(ids, ["tests/long1.py", "tests/long2.py"])]
    assert order == ["tests/long1.py::y", "tests/long2.py::x[1]", "tests/long2.py::x[0]", "tests/a.py::t1", "tests/b.py::t", "tests/a.py::t2"]
