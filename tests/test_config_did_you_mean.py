"""Config typos get a "did you mean" (issue 12, item 4): the nearest valid name, read from the schema."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vcamd.common.errors import ConfigError
from vcamd.config.reading import config_from_dict
from vcamd.config.schema import Config


def problems(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    return info.value.problems


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"cmaera": {}}, "[cmaera]: unknown section — did you mean [camera]?"),
        ({"camera": {"fsp": 30}}, "[camera] fsp: unknown key — did you mean fps?"),
        ({"swap": {"source_fase": "me.jpg"}}, "[swap] source_fase: unknown key — did you mean source_face?"),
        ({"virtual_camera": {"devise": "/dev/video10"}}, "[virtual_camera] devise: unknown key — did you mean device?"),
        ({"disclosure": {"bagde": True}}, "[disclosure] bagde: unknown key — did you mean badge?"),
    ],
)
def test_a_typo_gets_the_nearest_valid_name(data, expected):
    assert [p.split(" (see")[0] for p in problems(data)] == [expected]


def test_a_name_like_nothing_lists_the_valid_ones():
    (section,) = problems({"zzz": {}})
    assert section.startswith("[zzz]: unknown section — remove it; the valid sections are: models, detection, swap")
    assert all(name in section for name in Config.model_fields)
    (key,) = problems({"camera": {"qqqq": 1}})
    assert key == "[camera] qqqq: unknown key — remove it; the valid keys are: " + ", ".join(Config.model_fields["camera"].annotation.model_fields)


def test_a_key_under_a_misspelt_section_is_not_guessed_at():
    # Only the section is wrong; its keys are not judged against some other section.
    assert problems({"cmaera": {"fps": 30}}) == ["[cmaera]: unknown section — did you mean [camera]? (see config.example.toml)"]


def test_config_check_prints_the_suggestion(tmp_path: Path):
    path = tmp_path / "config.toml"
    path.write_text("[camera]\nfsp = 30\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "vcamd", "config", "check", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"{path}: [camera] fsp: unknown key — did you mean fps?" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_a_cover_threshold_above_the_threshold_is_named_with_the_fix() -> None:
    (line,) = problems({"detection": {"threshold": 0.4, "cover_threshold": 0.45}})
    assert line.startswith("[detection] cover_threshold = 0.45: ") and "above threshold (0.4)" in line and "at most 0.4" in line
    assert config_from_dict({"detection": {"threshold": 0.4, "cover_threshold": 0.4}}).detection.cover_threshold == 0.4
    (line,) = problems({"detection": {"threshold": 1.5, "cover_threshold": 0.3}})  # the threshold's own error, once
    assert line.startswith("[detection] threshold = 1.5")
