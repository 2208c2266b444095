"""Fuzz the config loaders: whatever text or nested data comes in, only ConfigError comes out.

A user edits config.toml by hand while the daemon runs; the hot-reload path must turn every broken
edit into a ConfigError (one line per problem) so the daemon can keep its last good config. Any
other exception type escaping here would take the reload thread (or `vcamd config check`) down.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vcamd.config import Config, config_from_dict, load_config
from vcamd.errors import ConfigError

FUZZ = settings(
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=False,
)

# Real section and key names, so the fuzzer reaches the validators instead of stopping at
# "unknown key" on the first level.
SECTIONS = {name: list(field.annotation.model_fields) for name, field in Config.model_fields.items()}

# Values a hand-edited TOML file can hold, plus the strings that have broken path handling before
# ("~user" expansion, NUL bytes, absolute/relative paths) and numbers at the edges.
path_like = st.sampled_from(["~", "~/face.png", "~nosuchuser_h8/face.png", "/", "..", "a\x00b", "face.png", ""])
scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    path_like,
)
toml_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)


@st.composite
def config_dicts(draw: st.DrawFn) -> dict:
    """A dict shaped like a config file: mostly real sections and keys, sometimes junk."""
    data: dict = {}
    for section in draw(st.lists(st.sampled_from(sorted(SECTIONS)), max_size=4, unique=True)):
        keys = st.one_of(st.sampled_from(SECTIONS[section]), st.text(max_size=8))
        data[section] = draw(st.dictionaries(keys, toml_values, max_size=5))
    if draw(st.booleans()):
        data[draw(st.text(max_size=8))] = draw(toml_values)
    return data


def _only_config_error(call) -> None:
    try:
        call()
    except ConfigError as err:
        assert str(err).strip(), "ConfigError with an empty message"
        assert err.problems and all(isinstance(p, str) and p for p in err.problems)


@FUZZ
@given(data=config_dicts())
def test_config_from_dict_raises_only_config_error(data: dict) -> None:
    _only_config_error(lambda: config_from_dict(data, "fuzz.toml"))


@FUZZ
@given(data=config_dicts())
def test_load_config_on_generated_toml_raises_only_config_error(tmp_path: Path, data: dict) -> None:
    try:
        text = tomli_w.dumps(data)
    except (TypeError, ValueError):
        return  # tomli_w cannot write it (e.g. NUL in a key); the text fuzzer below covers junk
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    _only_config_error(lambda: load_config(path))


toml_fragments = st.sampled_from(
    [
        "[swap]\n", "[camera]\n", "[models]\n", "[[swap]]\n", "[swap.x]\n", "source_face = ", "fps = ",
        "enabled = ", "true", "nan", "-inf", "1e999", "0x7f", "\"~nosuchuser_h8/a.png\"", "'''", "\"\"\"",
        "[", "]", "{", "}", "=", ",", "\n", "\\u0000", "\r\n", "#", "1979-05-27T07:32:00Z",
    ]
)


@FUZZ
@given(pieces=st.lists(st.one_of(toml_fragments, st.text(max_size=6)), max_size=25))
def test_load_config_on_toml_ish_text_raises_only_config_error(tmp_path: Path, pieces: list[str]) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes("".join(pieces).encode("utf-8", "surrogatepass"))
    _only_config_error(lambda: load_config(path))


@FUZZ
@given(raw=st.binary(max_size=200))
def test_load_config_on_random_bytes_raises_only_config_error(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(raw)
    _only_config_error(lambda: load_config(path))


path_keys = st.sampled_from([("swap", "source_face"), ("swap", "reference_face"), ("models", "dir")])


@FUZZ
@given(where=path_keys, value=st.one_of(path_like, st.text(max_size=20), st.text(max_size=10).map("~".__add__)))
def test_load_config_path_values_raise_only_config_error(tmp_path: Path, where: tuple[str, str], value: str) -> None:
    # Path keys are the one place load_config does more than validate (it resolves them against
    # the file's folder), so fuzz them on their own, in an otherwise valid file.
    section, key = where
    try:
        text = tomli_w.dumps({section: {key: value}})
    except (TypeError, ValueError):
        return
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _only_config_error(lambda: load_config(path))


# --- specific inputs the fuzzer found, kept as plain regression tests ---------------------------


@pytest.mark.parametrize(
    "text",
    [
        '[swap]\nsource_face = "~nosuchuser_h8/face.png"\n',
        '[swap]\nreference_face = "~nosuchuser_h8/ref.png"\n',
        '[models]\ndir = "~nosuchuser_h8/models"\n',
    ],
    ids=["source_face", "reference_face", "models.dir"],
)
def test_tilde_path_of_unknown_user_is_a_config_error(tmp_path: Path, text: str) -> None:
    # Found by the fuzzer: Path.expanduser() raises RuntimeError for "~someone" when that user
    # does not exist; load_config must report it as a ConfigError naming the key.
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="nosuchuser_h8"):
        load_config(path)


def test_deeply_nested_toml_is_a_config_error(tmp_path: Path) -> None:
    # Found by the fuzzer: tomllib recurses per nesting level, so a 5000-deep array raises
    # RecursionError, which load_config does not catch.
    path = tmp_path / "config.toml"
    path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="TOML|nest"):
        load_config(path)


def test_nan_and_inf_are_refused_with_the_key(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[camera]\nfps = nan\n[watchdog]\nbudget_ms = inf\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert "[camera] fps" in text and "[watchdog] budget_ms" in text


def test_valid_toml_survives_round_trip(tmp_path: Path) -> None:
    # The fuzz tests above must be able to fail on a good file too: a known-good file loads.
    path = tmp_path / "config.toml"
    path.write_text('[camera]\nfps = 25.0\n[swap]\nsource_face = "face.png"\n')
    config, origin = load_config(path)
    assert origin == path and config.camera.fps == 25.0
    assert config.swap.source_face == tmp_path / "face.png"
    assert tomllib.loads(path.read_text())["camera"]["fps"] == 25.0
