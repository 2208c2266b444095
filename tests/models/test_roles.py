"""The roles table is the one list of model roles: the config schema, the loaders and the packaged
manifest agree with it."""

from __future__ import annotations

import inspect

from vcamd.config.reading import config_from_dict
from vcamd.config.schema import ModelsConfig
from vcamd.modelstore.manifest import Manifest
from vcamd.modelstore.roles import ROLE_NAMES, ROLES, configured_models


def test_every_role_has_a_models_key_and_a_loader_class():
    for role in ROLES:
        assert role.key in ModelsConfig.model_fields, role
        loader = role.loader_class()
        assert inspect.isclass(loader) and list(inspect.signature(loader).parameters)[:2] == ["path", "sessions"], role


def test_the_packaged_manifest_uses_only_the_tables_roles_and_has_a_default_for_each():
    manifest = Manifest.packaged()
    assert {r for entry in manifest.entries.values() for r in entry.roles} == set(ROLE_NAMES)
    # Every role the config names a model for by default has that model in the manifest; a role
    # that is off unless named (the face parser: "") has none.
    named_by_default = [role for role in ROLES if ModelsConfig.model_fields[role.key].default]
    assert [role.name for role in ROLES if role not in named_by_default] == ["converter", "parser"]
    assert all(manifest.default_for(role.name) for role in named_by_default)


def test_the_enhancer_is_used_only_when_enabled():
    off = config_from_dict({"enhancer": {"enabled": False}})
    on = config_from_dict({"enhancer": {"enabled": True}, "models": {"swapper": "/m/s.onnx"}})
    assert [role for _, role in configured_models(off)] == ["detector", "recognizer", "swapper"]
    assert configured_models(on) == [("buffalo_l", "detector"), ("buffalo_l", "recognizer"), ("/m/s.onnx", "swapper"), ("gfpgan_1.4", "enhancer")]
