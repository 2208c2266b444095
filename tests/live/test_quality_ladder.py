"""The quality ladder is one table: what each level does is read from it, never from a level's order."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import vcamd
from vcamd.common.quality import BEST, LADDER, Level, higher, label, lower, quality_names, worst
from vcamd.config.schema import Config
from vcamd.live.tracking.sizes import TrackerSettings, detect_sizes

PACKAGE = Path(vcamd.__file__).parent

ORDER_COMPARISON = re.compile(
    r"(level|Level\.\w+)\s*(<|>|<=|>=)\s*\w"  # level >= Level.low_res, Level.full < x
    r"|(<|>|<=|>=)\s*Level\."  # x > Level.full
    r"|Level\(\s*\w+\s*[+-]"  # Level(level + 1)
)


def test_every_level_has_a_row_and_the_ladder_starts_at_the_best():
    assert set(LADDER) == set(Level)
    assert BEST is list(Level)[0] and LADDER[BEST].enhancer and LADDER[BEST].frame_stride == 1
    assert len({label(level) for level in Level}) == len(Level)  # the tray needs them apart
    assert quality_names() == ["auto", *(level.name for level in Level)]


@pytest.mark.parametrize("boost", [True, False])
@pytest.mark.parametrize("enhancer", [True, False])
def test_walking_down_then_up_visits_every_rung_that_changes_the_work(enhancer, boost):
    down, level = [BEST], BEST
    while (level := lower(level, enhancer_configured=enhancer, boost_configured=boost)) is not None:
        down.append(level)
    skipped = ({Level.no_enhancer} if not enhancer else set()) | ({Level.no_boost} if not boost else set())
    expected = [lv for lv in Level if lv not in skipped]
    assert down == expected
    if boost:  # pixel boost is given up first, and taken back last
        assert down[:2] == [Level.full, Level.no_boost]
    up, level = [down[-1]], down[-1]
    while (level := higher(level, enhancer_configured=enhancer, boost_configured=boost)) is not None:
        up.append(level)
    assert up == list(reversed(expected))
    assert worst(down) is down[-1] and worst([]) is BEST


def test_detection_sizes_follow_the_table():
    cfg = TrackerSettings.of(Config())
    full = detect_sizes(cfg, BEST)
    for level in Level:
        sizes = detect_sizes(cfg, level)
        if LADDER[level].reduced_detection:
            assert sizes["full_size"] < full["full_size"] and sizes["track_size"] < full["track_size"], level
        else:
            assert sizes == full, level


def test_the_cli_lists_the_levels_without_importing_numpy():
    code = (
        "import sys, argparse\n"
        "from vcamd.commands import control\n"
        "p = argparse.ArgumentParser(); control.register(p.add_subparsers())\n"
        "assert p.parse_args(['quality', 'low_res']).level == 'low_res'\n"
        "print('numpy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_no_module_compares_levels_by_their_order():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "quality.py" and path.parent == PACKAGE / "common":
            continue  # the ladder itself walks its order
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if "Level" in code or "level" in code:
                if ORDER_COMPARISON.search(code) and "log" not in code.lower():
                    offenders.append(f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}")
    assert offenders == []
