"""One JSON sanitiser for status, stats, the control socket and the control page."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from vcamd.common.jsonable import to_jsonable
from vcamd.common.quality import Level
from vcamd.common.types import Outcome


def test_status_values_become_plain_json():
    status = {
        "level": Level.low_res,
        "outcome": Outcome.held,
        "source_face": Path("/tmp/face.png"),
        "fps": np.float32(29.5),
        "count": np.int64(7),
        "latency_ms": {"p50": float("nan"), "p95": float("inf")},
        "box": np.array([1.5, 2.0]),
        "share": {Level.full: 0.25},
        "flags": (True, None),
        "odd": object,
    }
    plain = to_jsonable(status)
    text = json.dumps(plain, allow_nan=False)  # no NaN, no numpy, no enum left
    assert json.loads(text) == {
        "level": "low_res", "outcome": "held", "source_face": "/tmp/face.png", "fps": 29.5, "count": 7,
        "latency_ms": {"p50": None, "p95": None}, "box": [1.5, 2.0], "share": {"full": 0.25},
        "flags": [True, None], "odd": str(object),
    }
    assert type(plain["count"]) is int and plain["flags"][0] is True


def test_rounding_is_the_callers_choice():
    assert to_jsonable({"p95": 12.3456, "n": 3, "deep": [np.float64(0.126)]}, digits=2) == {"p95": 12.35, "n": 3, "deep": [0.13]}
    assert to_jsonable(12.3456) == 12.3456


def test_importing_it_does_not_import_numpy():
    code = "import sys, vcamd.common.jsonable, vcamd.control.protocol; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False", out.stderr
