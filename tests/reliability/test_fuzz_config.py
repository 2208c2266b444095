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
from support.waiting import wait_for

from vcamd.common.errors import ConfigError
from vcamd.config.reading import config_from_dict, load_config
from vcamd.config.schema import Config

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


# ---- a config path that is not a regular file (issue 10, item 3) ---------------------------------
#
# Every config read (load_config, the watcher's poll, `vcamd reload`, `config check`) goes through
# one function that reads only regular files, at most 1 MiB, without blocking. Each case below
# must end as a ConfigError quickly; a watcher seeing it must keep running and apply the next
# valid edit. The /dev/zero case runs in a child under an address-space limit only: before the
# fix it grew memory without bound, which must never happen to the machine running the suite.

import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402

from vcamd.config.reading import MAX_CONFIG_BYTES  # noqa: E402
from vcamd.live.reload import ConfigWatcher  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
VALID = "[swap]\nenabled = true\n"
DEADLINE_S = 30.0


def _load_in_thread(path: Path) -> BaseException | None:
    """load_config(path) on a daemon thread; fails the test if it has not returned in 30 s (a
    FIFO would block it for good: the thread is left behind rather than hanging the suite)."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            load_config(path)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 — the test inspects whatever came out
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    assert outcome, f"load_config({path}) still blocked after {DEADLINE_S:.0f} s"
    return outcome[0]


def _special_path(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "config.toml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "fifo_with_a_writer":  # a writer that never closes: a blocking read never ends
        os.mkfifo(path)
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)  # keeps a writer on the pipe for the test's life
        os.write(fd, b"[swap]\n")
        _held_fds.append(fd)
    elif kind == "dev_zero_symlink":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    elif kind == "huge_file":
        with path.open("wb") as f:  # sparse: 64 MiB without using the disk
            f.truncate(64 * 1024**2)
    return path


_held_fds: list[int] = []


@pytest.fixture(autouse=False)
def held_fds():
    yield
    while _held_fds:
        os.close(_held_fds.pop())


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="POSIX special files")
@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("fifo", "is not a regular file (a FIFO)"),
        ("fifo_with_a_writer", "is not a regular file (a FIFO)"),
        ("directory", "is a folder, not a file"),
        ("huge_file", f"over the {MAX_CONFIG_BYTES:,}-byte (1 MiB) limit"),
    ],
)
def test_config_path_that_is_not_a_small_regular_file_is_a_config_error(tmp_path: Path, held_fds, kind: str, expected: str) -> None:
    path = _special_path(tmp_path, kind)
    err = _load_in_thread(path)
    assert isinstance(err, ConfigError), repr(err)
    assert str(err).startswith(f"{path}: ") and expected in str(err) and "\n" not in str(err)


def test_a_config_that_grows_past_the_limit_while_read_is_refused(tmp_path: Path) -> None:
    # Exactly at the limit is fine (a long comment); one byte over is not.
    path = tmp_path / "config.toml"
    path.write_text("#" * (MAX_CONFIG_BYTES - 1) + "\n")
    assert load_config(path)[0] == Config()
    path.write_text("#" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(ConfigError, match="1 MiB"):
        load_config(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
@pytest.mark.parametrize("kind", ["fifo", "fifo_with_a_writer", "directory", "huge_file"])
def test_watcher_reports_a_special_file_then_applies_the_next_valid_edit(tmp_path: Path, held_fds, kind: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(VALID)
    changes: list[set[str]] = []
    errors: list[ConfigError] = []
    watcher = ConfigWatcher(path, lambda cfg, changed: changes.append(changed), errors.append,
                            interval=0.05, settle_s=0.05, max_delay_s=0.2)
    with watcher:
        # The file is replaced by something that is not a regular file while the watcher runs.
        path.unlink()
        _special_path(tmp_path, kind)
        wait_for(lambda: watcher.error is not None, f"the watcher to report the {kind}", timeout_s=DEADLINE_S)
        assert "config.toml" in str(watcher.error) and errors
        assert watcher._thread is not None and watcher._thread.is_alive()

        # ...and replaced back by a valid edit, which applies.
        if path.is_dir():
            path.rmdir()
        else:
            path.unlink()
        tmp = tmp_path / "config.toml.new"
        tmp.write_text("[swap]\nenabled = false\n")
        tmp.replace(path)
        wait_for(lambda: watcher.error is None and watcher.config is not None and not watcher.config.swap.enabled,
                 "the valid edit to apply", timeout_s=DEADLINE_S)
        assert watcher._thread.is_alive()


def test_watcher_survives_an_unexpected_error_while_loading(tmp_path: Path, monkeypatch) -> None:
    # Under [runtime] max_memory_gb a big allocation raises MemoryError: it must show as a config
    # error, not kill the watching thread while config_error says all is well.
    import vcamd.live.reload as reload_module

    path = tmp_path / "config.toml"
    path.write_text(VALID)
    real_load = reload_module.load_config
    failures = [MemoryError()]

    def flaky_load(p):
        if failures:
            raise failures.pop()
        return real_load(p)

    monkeypatch.setattr(reload_module, "load_config", flaky_load)
    errors: list[ConfigError] = []
    watcher = ConfigWatcher(path, lambda cfg, changed: None, errors.append, interval=0.05, settle_s=0.05,
                            max_delay_s=0.2, current=Config())
    with watcher:
        path.write_text("[swap]\nenabled = false\n")
        wait_for(lambda: errors, "the MemoryError to be reported", timeout_s=DEADLINE_S)
        assert isinstance(errors[0], ConfigError) and "MemoryError" in str(errors[0])
        assert watcher.error is not None
        path.write_text("[swap]\nenabled = true\n# fixed\n")  # the next edit loads normally
        wait_for(lambda: watcher.error is None and watcher.config is not None and watcher.config.swap.enabled,
                 "the next valid edit to apply", timeout_s=DEADLINE_S)
        assert watcher._thread is not None and watcher._thread.is_alive()


@pytest.mark.skipif(sys.platform == "win32" or not Path("/dev/zero").exists(), reason="RLIMIT_AS and /dev/zero are POSIX")
def test_dev_zero_under_a_memory_limit_is_a_config_error_and_the_watcher_lives(tmp_path: Path) -> None:
    """The probe's case in a child with a 1.5 GB address-space limit (so a reader that slurps
    /dev/zero fails fast with MemoryError instead of eating the test machine)."""
    code = f"""
import resource, time
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (1536 * 1024**2, 1536 * 1024**2))
from vcamd.config.reading import load_config
from vcamd.common.errors import ConfigError
from vcamd.live.reload import ConfigWatcher
path = Path({str(tmp_path / 'config.toml')!r})
zero = Path({str(tmp_path / 'zero.toml')!r})
zero.symlink_to("/dev/zero")
try:
    load_config(zero)
except ConfigError as err:
    print("load:", err)
path.write_text("[swap]\\nenabled = true\\n")
errors = []
w = ConfigWatcher(path, lambda c, s: None, errors.append, interval=0.05, settle_s=0.05, max_delay_s=0.2).start()
path.unlink(); path.symlink_to("/dev/zero")
deadline = time.monotonic() + 30
while w.error is None and time.monotonic() < deadline:
    time.sleep(0.02)
print("error:", w.error)
path.unlink(); path.write_text("[swap]\\nenabled = false\\n")
while (w.error is not None or w.config.swap.enabled) and time.monotonic() < deadline:
    time.sleep(0.02)
print("alive:", w._thread.is_alive(), "applied:", not w.config.swap.enabled)
w.close()
"""
    python = REPO / ".venv" / "bin" / "python"
    result = subprocess.run([str(python) if python.exists() else sys.executable, "-c", code],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0] == f"load: {tmp_path / 'zero.toml'}: is not a regular file (a character device) — point it at a TOML file"
    assert lines[1].startswith("error: ") and "is not a regular file (a character device)" in lines[1]
    assert lines[-1] == "alive: True applied: True"
    assert "MemoryError" not in result.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
@pytest.mark.parametrize("kind", ["fifo"])
def test_config_check_cli_on_a_special_file_answers_in_one_line(tmp_path: Path, kind: str) -> None:
    path = _special_path(tmp_path, kind)
    python = REPO / ".venv" / "bin" / "python"
    result = subprocess.run([str(python) if python.exists() else sys.executable, "-m", "vcamd", "config", "check", str(path)],
                            cwd=REPO, capture_output=True, text=True, timeout=30)  # blocked for good before the fix
    assert result.returncode == 2
    assert result.stdout.splitlines() == [f"{path}: is not a regular file (a {'FIFO' if kind == 'fifo' else 'character device'}) — point it at a TOML file"]


@pytest.mark.parametrize(
    ("text", "key", "says"),
    [
        ('[detection]\ncover_threshold = "0.3"', "cover_threshold", "must be a number"),
        ("[detection]\ncover_threshold = true", "cover_threshold", "must be a number"),
        ('[swap]\nsource_consent = "false"', "source_consent", "must be true or false"),
        ("[swap]\nenabled = 1", "enabled", "must be true or false"),
        ('[camera]\nwidth = "640"', "width", "must be a whole number"),
        ("[camera]\nwidth = 640.0", "width", "must be a whole number"),
        ("[camera]\ndevice = 0", "device", "must be text in quotes"),
        ('[models]\nproviders = "cpu"', "providers", "must be a list"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_in_one_clear_line(tmp_path: Path, text: str, key: str, says: str) -> None:
    """Strict types: a quoted number or a true/false is never converted (nor reported as out of range)."""
    path = tmp_path / "config.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    (line,) = caught.value.problems
    assert key in line and says in line, line
    assert "less than" not in line and "greater than" not in line, line


def test_an_integer_is_a_number_for_a_decimal_key(tmp_path: Path) -> None:
    """`fps = 25` and `strength = 1` mean what they say: a TOML integer is read for a float key."""
    path = tmp_path / "config.toml"
    path.write_text("[camera]\nfps = 25\n[enhancer]\nstrength = 1\n[swap]\nface_selection = \"all\"\nsource_face = \"face.png\"\n")
    cfg, _ = load_config(path)
    assert cfg.camera.fps == 25.0 and isinstance(cfg.camera.fps, float | int)
    assert cfg.enhancer.strength == 1.0
    assert cfg.swap.face_selection == "all" and cfg.swap.source_face == tmp_path / "face.png"
