"""JSON from strangers (a control-socket request line, a control-page request body), bounded
before and while it is parsed, so that every way it can be wrong is one `JsonRefused` saying why.

Python's `json` turns some inputs into errors other than `JSONDecodeError`, and a reader that
caught only that let them through — a control-socket worker died with each: a line nested ~40 KB
deep (`RecursionError`), an integer of 5,000 digits (`ValueError`: int's digit limit). Here:

- a text longer than `max_bytes`, or not UTF-8, is refused before parsing;
- nesting is counted outside strings before parsing: deeper than `max_depth` is refused;
- a number of more than `MAX_NUMBER_CHARS` characters, NaN, Infinity, or a float that overflows is
  refused while parsing (no huge int is ever built);
- a lone surrogate (`"\\ud800"`: valid JSON, but no file name or message can hold it) is refused
  after parsing;
- whatever else `json` raises is refused with its message.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

MAX_NUMBER_CHARS = 64
"""No request needs a longer number literal (a 64-bit int has 20 digits)."""

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class JsonRefused(ValueError):
    """The text is not JSON this reader takes; `str()` says why, in words that follow "… is" (e.g.
    "request is nested more than 8 levels deep")."""


def loads_bounded(data: bytes | str, *, max_bytes: int, max_depth: int) -> Any:
    """Parse `data` as JSON within the bounds above, or raise JsonRefused."""
    if isinstance(data, bytes):
        if len(data) > max_bytes:
            raise JsonRefused(f"longer than {max_bytes} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise JsonRefused("not UTF-8 text") from None
    else:
        text = data
        if len(text.encode("utf-8", "surrogatepass")) > max_bytes:
            raise JsonRefused(f"longer than {max_bytes} bytes")
    if nesting_depth(text) > max_depth:
        raise JsonRefused(f"nested more than {max_depth} levels deep")
    try:
        value = json.loads(text, parse_int=_integer, parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise JsonRefused(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except JsonRefused:
        raise
    except (ValueError, RecursionError, MemoryError) as exc:  # defence in depth: the checks above should stop these
        raise JsonRefused(f"not JSON this reader takes ({type(exc).__name__})") from None
    for string in _strings(value):
        try:
            string.encode("utf-8")
        except UnicodeEncodeError:
            raise JsonRefused("holding a lone surrogate escape (\\ud800-\\udfff), which is no text") from None
    return value


def nesting_depth(text: str) -> int:
    """How deep arrays and objects nest in `text`, counting brackets outside strings only (a broken
    string ends the count there: the parser refuses it anyway)."""
    outside = _STRING.sub("", text).split('"', 1)[0]
    brackets = _NOT_BRACKET.sub("", outside)
    if not brackets:
        return 0
    return max(0, max(accumulate(1 if c in "[{" else -1 for c in brackets)))


def _integer(literal: str) -> int:
    if len(literal) > MAX_NUMBER_CHARS:
        raise JsonRefused(f"holding a number of {len(literal)} digits (at most {MAX_NUMBER_CHARS})")
    return int(literal)


def _float(literal: str) -> float:
    if len(literal) > MAX_NUMBER_CHARS:
        raise JsonRefused(f"holding a number of {len(literal)} characters (at most {MAX_NUMBER_CHARS})")
    value = float(literal)
    if not math.isfinite(value):
        raise JsonRefused(f"holding the number {literal}, which is out of range")
    return value


def _constant(name: str) -> float:
    raise JsonRefused(f"holding {name}, which is not a JSON number")


def _strings(value: Any) -> Iterator[str]:
    """Every string in a parsed value, keys included (its depth is bounded, so recursion is)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
