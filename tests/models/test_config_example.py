"""config.example.toml documents every key with its default; `vcamd config check|init` work."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel

from vcamd.config.reading import load_config
from vcamd.config.schema import Config

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config.example.toml"
KEY_LINE = re.compile(r"^(?P<commented>#\s*)?(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*=")
SECTION_LINE = re.compile(r"^\[(?P<name>[A-Za-z0-9_.]+)\]\s*$")


def schema_keys(model: type[BaseModel], prefix: str = "") -> dict[str, object]:
    """Every leaf key of the schema as "section.key" → its default; nested models are walked."""
    keys: dict[str, object] = {}
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys.update(schema_keys(annotation, f"{prefix}{name}."))
        else:
            keys[f"{prefix}{name}"] = field.default
    return keys


def example_keys() -> dict[str, dict]:
    """"section.key" → {commented, documented} for every key line in the example, live or commented."""
    found: dict[str, dict] = {}
    section = ""
    paragraph_has_prose = False
    for raw in EXAMPLE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line:
            paragraph_has_prose = False
            continue
        if match := SECTION_LINE.match(line):
            section, paragraph_has_prose = match["name"], False
            continue
        match = KEY_LINE.match(line)
        if match and section:
            found[f"{section}.{match['key']}"] = {"commented": bool(match["commented"]), "documented": paragraph_has_prose}
        elif line.startswith("#"):
            paragraph_has_prose = True
    return found


def test_example_loads_to_exactly_the_defaults() -> None:
    config, origin = load_config(EXAMPLE)
    assert origin == EXAMPLE
    assert config == Config()  # no path keys are set in the example, so no path resolution differs


def test_every_schema_key_is_in_the_example_with_a_comment() -> None:
    schema = schema_keys(Config)
    documented = example_keys()
    live = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    missing = sorted(set(schema) - set(documented))
    assert not missing, f"add these keys (default + comment) to config.example.toml: {missing}"
    stale = sorted(set(documented) - set(schema))
    assert not stale, f"config.example.toml has keys the schema does not: {stale}"
    undocumented = sorted(k for k, v in documented.items() if not v["documented"])
    assert not undocumented, f"give these keys a comment line above them in config.example.toml: {undocumented}"
    for key, default in schema.items():
        section, name = key.rsplit(".", 1)
        if default is None:
            # TOML has no null: an unset-by-default key is shown commented out.
            assert documented[key]["commented"], f"{key} defaults to unset: show it as a commented-out line"
        else:
            assert not documented[key]["commented"], f"{key}: show it live with its default value"
            assert name in live.get(section, {}), key


def test_packaged_example_is_the_repo_example() -> None:
    from vcamd.commands.config import example_text

    assert (REPO / "vcamd" / "data" / "config.example.toml").resolve() == EXAMPLE.resolve()
    assert example_text() == EXAMPLE.read_text(encoding="utf-8")


# ---- `vcamd config check` ------------------------------------------------------------------


CHECK_CASES = {
    "invalid_toml": ("[camera]\nwidth = 1280\nheight = \n", r"invalid TOML: .*\(at line 3, column 10\)"),
    "unknown_key": ("[camera]\nwidht = 1280\n", r"\[camera\] widht: unknown key"),
    "unknown_section": ("[cmaera]\nwidth = 1280\n", r"\[cmaera\]: unknown section"),
    "bad_enum": ('[swap]\nface_selection = "bigest"\n', r"\[swap\] face_selection = 'bigest': Input should be 'largest', 'all' or 'reference'"),
    "out_of_range": ("[detection]\nthreshold = 1.5\n", r"\[detection\] threshold = 1\.5: Input should be less than 1"),
    "wrong_type": ("[preview]\nport = \"http\"\n", r"\[preview\] port = 'http': is text \(in quotes\), but it must be a whole number"),
    "missing_photo": ('[swap]\nsource_face = "nobody.jpg"\n', r"\[swap\] source_face = '.*nobody\.jpg': file not found"),
}


@pytest.mark.parametrize("case", sorted(CHECK_CASES))
def test_config_check_names_each_problem_precisely(tmp_path, vcamd_cli, case) -> None:
    text, expected = CHECK_CASES[case]
    path = tmp_path / f"{case}.toml"
    path.write_text(text)
    result = vcamd_cli("config", "check", str(path))
    assert result.returncode == 2, result
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and result.stderr == "", result
    assert lines[0].startswith(f"{path}: ")
    assert re.search(expected, lines[0]), lines[0]


def test_config_check_prints_one_line_per_problem(tmp_path, vcamd_cli) -> None:
    path = tmp_path / "several.toml"
    path.write_text('[camera]\nfps = 0\nheight = 99999\n[disclosure]\ncorner = "middle"\n')
    result = vcamd_cli("config", "check", str(path))
    assert result.returncode == 2
    lines = sorted(result.stdout.splitlines())
    assert len(lines) == 3, lines
    assert [re.sub(r" = .*", "", line.removeprefix(f"{path}: ")) for line in lines] == [
        "[camera] fps", "[camera] height", "[disclosure] corner",
    ]


def test_config_check_ok(tmp_path, vcamd_cli) -> None:
    face = tmp_path / "face.png"
    face.write_bytes(b"png")
    path = tmp_path / "good.toml"
    path.write_text('[swap]\nsource_face = "face.png"\nsource_consent = true\n[camera]\ndevice = "synthetic"\n')
    result = vcamd_cli("config", "check", str(path))
    assert (result.returncode, result.stdout) == (0, f"{path}: OK\n")


def test_config_init_writes_the_example_and_refuses_to_overwrite(tmp_path, vcamd_cli) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    target = tmp_path / "xdg" / "facelive" / "config.toml"

    before = vcamd_cli("config", "check", env=env)
    assert (before.returncode, before.stdout) == (0, f"{target}: not found; the defaults apply (create it with `vcamd config init`)\n")
    assert vcamd_cli("config", "path", env=env).stdout == f"{target}\n"

    first = vcamd_cli("config", "init", env=env)
    assert first.returncode == 0, first
    assert target.read_text() == EXAMPLE.read_text()
    assert vcamd_cli("config", "check", env=env).stdout == f"{target}: OK\n"

    target.write_text("[camera]\nfps = 15.0\n")
    again = vcamd_cli("config", "init", env=env)
    assert again.returncode == 2
    assert again.stderr.splitlines() == [f"vcamd: error: {target} already exists — edit it, or run `vcamd config init --force` to replace it with the example"]
    assert target.read_text() == "[camera]\nfps = 15.0\n"

    forced = vcamd_cli("config", "init", "--force", env=env)
    assert forced.returncode == 0 and target.read_text() == EXAMPLE.read_text()


def test_the_panel_comment_says_where_the_token_is() -> None:
    """Issue 36 item 5: the example said panel_url carries the access token; it is a plain address
    (the token is panel_token, for scripts, over the private socket)."""
    panel = EXAMPLE.read_text(encoding="utf-8").split("[panel]", 1)[1].split("\n[", 1)[0]
    assert "with the access token as \"panel_url\"" not in panel
    assert '"panel_url", no secret in it' in panel.replace("\n# ", " ") and '"panel_token"' in panel
