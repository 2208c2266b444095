"""`vcamd.common.boundedjson`: hostile JSON is one `JsonRefused`, whatever json itself would have raised."""

from __future__ import annotations

import pytest

from vcamd.common.boundedjson import JsonRefused, loads_bounded, nesting_depth


@pytest.mark.parametrize("text, why", [
    (b"[" * 40_000, "nested more than 8 levels deep"),
    (b'{"a": "[[[[[[[[[[[[", "b": ' + b"[" * 9 + b"]" * 9 + b"}", "nested more than 8 levels deep"),
    (b"7" * 5000, "holding a number of 5000 digits"),
    (b"-" + b"7" * 65, "holding a number of 66 digits"),
    (b"1." + b"5" * 100, "holding a number of 102 characters"),
    (b"1e400", "out of range"),
    (b"-Infinity", "holding -Infinity, which is not a JSON number"),
    (b'"\\udc80"', "lone surrogate"),
    (b'{"\\ud800": 1}', "lone surrogate"),
    (b"\xc3\x28", "not UTF-8 text"),
    (b"x" * 100, "longer than 64 bytes"),
    (b"{", "not valid JSON"),
])
def test_hostile_json_is_refused_with_its_reason(text, why):
    with pytest.raises(JsonRefused, match=why.replace("(", r"\(").replace(")", r"\)")):
        loads_bounded(text, max_bytes=64 if why.startswith("longer") else 100_000, max_depth=8)


def test_what_requests_really_send_passes():
    line = b'{"cmd": "set_face", "args": {"path": "/home/a/[x]{y}\\"z.png", "n": [1, 2.5, -3e10, true, null]}}'
    assert loads_bounded(line, max_bytes=1024, max_depth=8) == {
        "cmd": "set_face", "args": {"path": '/home/a/[x]{y}"z.png', "n": [1, 2.5, -3e10, True, None]}}
    assert loads_bounded("[" * 8 + "]" * 8, max_bytes=1024, max_depth=8) == [[[[[[[[]]]]]]]]
    assert loads_bounded(b'"\\ud83d\\ude00"', max_bytes=64, max_depth=1) == "\U0001F600"  # a proper pair is text


def test_nesting_is_counted_outside_strings_only():
    assert nesting_depth('{"a": "[[[{{{", "b": [1, {"c": "]]]"}]}') == 3
    assert nesting_depth('"unterminated [[[[') == 0
