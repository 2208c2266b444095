"""The model roles, one table: each role's `[models]` key, the class that loads it and whether a
config can leave it out. Everything that lists the roles reads it (the manifest's checks, `vcamd
run`'s and `doctor`'s file checks, `config check`, the config's relative paths, `FaceEngine`).

Standard library only, so the CLI and `vcamd.config` import it without numpy or onnxruntime; the
loader is named as "module:Class" and imported only when a model is loaded.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Role:
    name: str
    """The role as the manifest and error messages name it."""
    key: str
    """Its key under `[models]` in the config (a manifest name or a path to an .onnx file)."""
    loader: str
    """"module:Class" whose constructor `(path, sessions)` loads the model and checks its signature."""
    enabled_by: str | None = None
    """Optional roles: the config switch ("section.key") that turns the model on; None = always used."""
    value_from: str | None = None
    """"module:function" giving the model `cfg` uses for this role ("" = none), for a role whose
    model follows from another's (the swapper's embedding converter); None = `[models] KEY`."""

    def loader_class(self) -> Any:
        return _named(self.loader)

    def value(self, cfg: Any) -> str:
        """The model (a manifest name or a path) `cfg` names for this role; "" = none."""
        return str(_named(self.value_from)(cfg)) if self.value_from is not None else getattr(cfg.models, self.key)

    def in_use(self, cfg: Any) -> bool:
        """Whether `cfg` (a `vcamd.config.Config`) uses this role's model."""
        if self.value_from is not None:
            return bool(self.value(cfg))
        if self.enabled_by is None:
            return True
        section, _, key = self.enabled_by.partition(".")
        return bool(getattr(getattr(cfg, section), key))


def _named(target: str) -> Any:
    """The object a "module:name" string names (imported on use: this module stays light)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


ROLES: tuple[Role, ...] = (
    Role("detector", "detector", "vcamd.faces.detect:FaceDetector"),
    Role("recognizer", "recognizer", "vcamd.faces.identity:Recognizer"),
    Role("swapper", "swapper", "vcamd.faces.swap:Swapper"),
    # The ghost, simswap and hififace swappers' embedding converter: `[models] converter`, or the family's own.
    Role("converter", "converter", "vcamd.faces.swap:EmbeddingConverter", value_from="vcamd.models.pipeline:converter_for"),
    Role("enhancer", "enhancer", "vcamd.faces.enhance:Enhancer", enabled_by="enhancer.enabled"),
    Role("parser", "parser", "vcamd.faces.parse:FaceParser", enabled_by="models.parser"),  # "" = off
)
ROLE_NAMES: tuple[str, ...] = tuple(role.name for role in ROLES)


def role_named(name: str) -> Role:
    """The row of `name`; ValueError for a name that is not a role (a caller's bug: roles come
    from this table or from the validated manifest)."""
    for role in ROLES:
        if role.name == name:
            return role
    raise ValueError(f"unknown model role {name!r}; expected one of {', '.join(ROLE_NAMES)}")


def roles_in_use(cfg: Any) -> list[Role]:
    """The roles whose models `cfg` needs, in table order (the enhancer only when enabled, the
    parser only when named)."""
    return [role for role in ROLES if role.in_use(cfg)]


def configured_models(cfg: Any) -> list[tuple[str, str]]:
    """(the `[models]` value, role name) for every model `cfg` needs, in table order."""
    return [(role.value(cfg), role.name) for role in roles_in_use(cfg)]
