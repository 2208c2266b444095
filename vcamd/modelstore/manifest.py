"""The model manifest (`models/manifest.toml`, shipped as `vcamd/data/manifest.toml`): every
production model with its file, size, SHA-256, licence and URL, validated on load."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from vcamd.common.errors import ModelError
from vcamd.modelstore.roles import ROLE_NAMES

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SHA_RE = re.compile(r"^([0-9a-f]{64})?$")


def plain_file_name(value: str) -> str:
    """A file name that stays inside the models dir: no folders, no '..', not absolute."""
    if (
        not value
        or value in (".", "..")
        or "/" in value
        or "\\" in value
        or "\x00" in value
        or ":" in value  # Windows drive letters and alternate data streams
        or Path(value).name != value
    ):
        raise ValueError(f"{value!r} must be a plain file name inside the models dir (no folders, '..' or absolute paths)")
    return value


class FileSpec(BaseModel):
    """One file as it sits in the models dir."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str
    size: int | None = Field(default=None, gt=0)
    """Exact size in bytes, when published."""
    approx_size: int | None = Field(default=None, gt=0)
    """Rough size for display and sanity checks, when the exact size is not published."""
    sha256: str = ""
    """Published SHA-256 (lowercase hex); "" = unpublished, pinned on first download."""

    @field_validator("file")
    @classmethod
    def _file_stays_inside(cls, v: str) -> str:
        return plain_file_name(v)

    @field_validator("sha256")
    @classmethod
    def _sha_is_hex(cls, v: str) -> str:
        v = v.strip().lower()
        if not SHA_RE.match(v):
            raise ValueError("must be 64 hex digits, or \"\" when unpublished")
        return v

    @property
    def display_size(self) -> int | None:
        return self.size or self.approx_size


class ModelEntry(FileSpec):
    """One downloadable model (or a zip pack of several, see `extract`)."""

    name: str
    role: str
    url: str
    license: str
    default: bool = False
    crc32_url: str = ""
    """Where the file's CRC32 is published (FaceFusion's `<model>.hash`: 8 hex digits), for a model
    whose SHA-256 is not: the first download is checked against it before its SHA-256 is pinned."""
    extract: dict[str, FileSpec] = {}
    """For a zip pack: role → the member to extract. The zip itself is deleted afterwards."""

    @field_validator("url", "crc32_url")
    @classmethod
    def _url_is_http(cls, v: str, info: ValidationInfo) -> str:
        if info.field_name == "crc32_url" and not v:
            return v
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http:// or https:// URL")
        return v

    @field_validator("extract")
    @classmethod
    def _extract_roles(cls, v: dict[str, FileSpec]) -> dict[str, FileSpec]:
        for role in v:
            if role not in ROLE_NAMES:
                raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLE_NAMES)}")
        return v

    @model_validator(mode="after")
    def _name_and_roles(self) -> ModelEntry:
        if not NAME_RE.match(self.name) or ".." in self.name:
            raise ValueError(f"model name {self.name!r}: use letters, digits, '.', '_' and '-' only")
        roles = self.role.split("+")
        if self.extract and set(roles) != set(self.extract):
            raise ValueError(f"role {self.role!r} must list exactly the extracted roles ({'+'.join(self.extract)})")
        if not self.extract and self.role not in ROLE_NAMES:
            raise ValueError(f"role {self.role!r}: expected one of {', '.join(ROLE_NAMES)}")
        return self

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(self.extract) if self.extract else (self.role,)

    def installed(self) -> dict[str, FileSpec]:
        """role → the file that ends up in the models dir for that role."""
        return dict(self.extract) if self.extract else {self.role: self}


@dataclass(frozen=True)
class Manifest:
    entries: dict[str, ModelEntry]
    origin: str

    @classmethod
    def packaged(cls) -> Manifest:
        resource = resources.files("vcamd") / "data" / "manifest.toml"
        return cls.from_toml(resource.read_text(encoding="utf-8"), "vcamd/data/manifest.toml")

    @classmethod
    def load(cls, path: Path) -> Manifest:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ModelError(f"model manifest {path}: cannot read: {exc.strerror}") from None
        return cls.from_toml(text, str(path))

    @classmethod
    def from_toml(cls, text: str, origin: str) -> Manifest:
        import tomllib

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ModelError(f"model manifest {origin}: invalid TOML: {exc}") from None
        return cls.from_dict(data, origin)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], origin: str = "<manifest>") -> Manifest:
        if data.get("schema", 1) != 1:
            raise ModelError(f"model manifest {origin}: schema {data['schema']!r} is newer than this vcamd understands (1)", fix="update vcamd")
        models = data.get("models")
        if not isinstance(models, Mapping) or not models:
            raise ModelError(f"model manifest {origin}: needs a [models.NAME] table per model")
        entries: dict[str, ModelEntry] = {}
        for name, raw in models.items():
            if not isinstance(raw, Mapping):
                raise ModelError(f"model manifest {origin}: [models.{name}] must be a table")
            try:
                entries[name] = ModelEntry.model_validate({**raw, "name": name})
            except ValidationError as exc:
                problems = []
                for err in exc.errors():
                    where = ".".join(str(p) for p in err["loc"]) or "(entry)"
                    problems.append(f"{where}: {err['msg'].removeprefix('Value error, ')}")
                raise ModelError(f"model manifest {origin}: [models.{name}] " + "; ".join(problems)) from None
        return cls(entries, origin)

    def get(self, name: str) -> ModelEntry:
        try:
            return self.entries[name]
        except KeyError:
            import difflib

            close = difflib.get_close_matches(name, list(self.entries), n=3, cutoff=0.6)
            raise ModelError(
                f"unknown model {name!r}; "
                + (f"did you mean {' or '.join(close)}?" if close else f"the manifest has {', '.join(list(self.entries)[:8])}"
                   + (f" and {len(self.entries) - 8} more" if len(self.entries) > 8 else "")),
                fix="run `vcamd models list` to see them",
            ) from None

    def default_for(self, role: str) -> str | None:
        for entry in self.entries.values():
            if entry.default and role in entry.roles:
                return entry.name
        return None

