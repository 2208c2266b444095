"""How a refused config value reads: one line per problem, `[section] key = value: what it takes`,
in the config file's words (TOML's kinds, not Python's), with "did you mean" for a misspelt name.
"""

from __future__ import annotations

import difflib

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from vcamd.config.schema import Config


def describe_error(err: ErrorDetails) -> str:
    """One line: [section].key = bad value: what was expected."""
    loc = [str(p) for p in err["loc"]]
    if len(loc) >= 2:
        where = f"[{loc[0]}] {'.'.join(loc[1:])}"
    else:
        where = f"[{loc[0]}]" if loc else "(top level)"
    if err["type"] == "extra_forbidden":
        return f"{where}: {_unknown_name_hint(loc)}"
    got = err.get("input")
    msg = _WRONG_TYPE.get(err["type"])
    if msg is not None:
        msg = f"is {_toml_kind(got)}, but {msg}"
    else:
        msg = err["msg"]
    if isinstance(got, (dict, list)) and len(repr(got)) > 60:
        return f"{where}: {msg}"
    return f"{where} = {_toml_value(got)}: {msg}"


_WRONG_TYPE = {
    # pydantic's strict type errors → what the key takes, in TOML's words
    "float_type": "it must be a number, written without quotes (e.g. 0.3)",
    "int_type": "it must be a whole number, written without quotes or a decimal point (e.g. 640)",
    "bool_type": "it must be true or false, written without quotes",
    "string_type": 'it must be text in quotes (e.g. "0")',
    "list_type": 'it must be a list in brackets (e.g. ["auto"])',
    "model_type": "it must be a [section] of keys",
    "model_attributes_type": "it must be a [section] of keys",
}


def _toml_kind(value: object) -> str:
    """What a TOML value is, in the words the config file uses."""
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, str):
        return "text (in quotes)"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a decimal number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"  # a TOML date or time


def _toml_value(value: object) -> str:
    """The value as the error line shows it: true/false as TOML writes them, the rest as Python
    writes it ('0.3' in quotes: text)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _unknown_name_hint(loc: list[str]) -> str:
    """"unknown key — did you mean fps?": the valid names are read from the schema, so a section
    or key added later is suggested too."""
    kind = "section" if len(loc) == 1 else "key"
    model: type[BaseModel] | None = Config
    for part in loc[:-1]:  # walk down to the section that holds the unknown name
        field = model.model_fields.get(part) if model is not None else None
        annotation = field.annotation if field is not None else None
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    if model is None:
        return f"unknown {kind} — remove it or check the spelling (see config.example.toml)"
    valid = list(model.model_fields)
    close = difflib.get_close_matches(loc[-1], valid, n=1, cutoff=0.6)
    if close:
        shown = f"[{close[0]}]" if kind == "section" else close[0]
        return f"unknown {kind} — did you mean {shown}? (see config.example.toml)"
    return f"unknown {kind} — remove it; the valid {kind}s are: {', '.join(valid)}"
