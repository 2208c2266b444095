"""The one way a value becomes plain JSON: status, stats, the control socket and the control page.

Status and stats hold enums (`quality.Level`, `Outcome`), paths, numpy numbers and NaN; JSON has
none of them. Standard library only (numpy values are recognised by their `tolist`), so the control
client and the CLI can use it without importing numpy.
"""

from __future__ import annotations

import math
import os
from enum import Enum
from typing import Any


def to_jsonable(value: Any, *, digits: int | None = None) -> Any:
    """`value` as plain JSON values, recursively.

    Enums by name when their value is a number (Level.low_res → "low_res"; an IntEnum would
    otherwise be written as its bare number), else by value; paths as strings; numpy numbers and
    arrays as Python numbers and lists; NaN and ±inf as null (not JSON); floats rounded to `digits`
    when given; anything else as its text.
    """
    if isinstance(value, Enum):
        return value.name if isinstance(value.value, int) else to_jsonable(value.value, digits=digits)
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return round(value, digits) if digits is not None else value
    if isinstance(value, dict):
        return {str(to_jsonable(k)): to_jsonable(v, digits=digits) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v, digits=digits) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays
    if callable(tolist):
        try:
            return to_jsonable(tolist(), digits=digits)
        except Exception:
            pass
    return str(value)
