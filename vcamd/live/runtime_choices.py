"""What the user chose while the daemon runs, over the config file: a source face (`--face`, `vcamd
set-face`, the tray) and models (the page, the tray). Each choice outlives edits of the file's other
keys and gives way only when the file's own value of its key is edited (then the file wins).

The engine's settings (`engine_settings.Settings`) lay these over every valid file (`over`) and
ask here whether a model may be chosen (`choose_model`) and what the status says of the models.
Loop thread only.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from vcamd.common.errors import VcamdError
from vcamd.config.schema import Config, ModelsConfig

log = logging.getLogger(__name__)

MODEL_CHOICE_ROLES = ("swapper", "enhancer")
"""The roles whose model the page and the tray switch (`Settings.set_model`)."""


class RuntimeChoices:
    """The source face and the models chosen at run time, and the file they were chosen over."""

    def __init__(self, cfg: Config, file_cfg: Config) -> None:
        """`cfg`: the config the engine starts on (the file's, with `--face`); `file_cfg`: the file's."""
        self._file_cfg = file_cfg
        self.face: Path | None = cfg.swap.source_face if cfg.swap.source_face != file_cfg.swap.source_face else None
        """A source face chosen at run time (None: the file's)."""
        self._models: dict[str, str] = {}
        """[models] key → value chosen at run time."""
        self._model_list: dict[str, list[dict[str, Any]]] | None = None  # read from the models dir on first ask

    def over(self, file_cfg: Config) -> Config:
        """The file's new config, with the choices whose key the file did not edit laid over it."""
        previous, self._file_cfg = self._file_cfg, file_cfg
        if file_cfg.swap.source_face != previous.swap.source_face:
            self.face = None
        for key in list(self._models):
            if getattr(file_cfg.models, key) != getattr(previous.models, key):
                del self._models[key]
        new = file_cfg
        if self._models:
            new = new.model_copy(update={"models": new.models.model_copy(update=self._models)})
        if self.face is None:
            return new
        return new.model_copy(update={"swap": new.swap.model_copy(update={"source_face": self.face})})

    def choose_model(self, cfg: Config, role: str, name: str) -> Config:
        """`cfg` with the manifest's model `name` for `role` ("swapper" or "enhancer"), the choice
        kept from now on. VcamdError (with the pull to run) for a model that cannot be chosen here or
        is not there; nothing is kept then."""
        from vcamd.modelstore.store import ModelStore

        if role not in MODEL_CHOICE_ROLES:
            raise VcamdError(f"models can be switched here for {' and '.join(MODEL_CHOICE_ROLES)}, not {role!r}",
                             fix="edit [models] in the config file for the others")
        served = cfg.models.server and cfg.models.fallback != "local"
        if served and getattr(cfg.models, role):  # (a local fallback has the files here: it switches as without a server)
            raise VcamdError(
                f"the {role} runs on the Triton server at {cfg.models.server}, which serves the one it was started with, "
                f"not one chosen here",
                fix=f"serve {name} there (`vcamd serve` with [models] {role} = \"{name}\"), then set [models] {role} = \"{name}\" "
                    "in this config (or [models] server = \"\" to run it here)",
            )
        store = ModelStore.from_config(cfg.models)
        entry = store.manifest.get(name)  # an unknown name: ModelError with the closest names
        if role not in entry.roles:
            raise VcamdError(f"{name} is not a {role} (it is a {entry.role})", fix=f"choose a {role} from `vcamd models list`")
        update = {role: name}
        if role == "swapper":  # the model's name says its family and converter
            update |= {"swapper_family": "", "converter": ""}
        new = cfg.model_copy(update={"models": cfg.models.model_copy(update=update)})
        store.paths_in_use(new)  # a file (or its converter) not downloaded: said now, with its pull
        self._models |= update
        self._model_list = None
        return new

    def forget_model_list(self) -> None:
        """The models dir may have changed (a pipeline was installed): list it again on the next ask."""
        self._model_list = None

    def models_status(self, *, running: ModelsConfig, wanted: ModelsConfig) -> dict[str, Any]:
        """What the status says of the models: the ones `running`, the ones loading (a model `wanted`
        that differs from the running one's: a rebuild key; None when none), and the manifest's
        choices per role with licence and whether the file is there."""
        loading = [getattr(wanted, role) for role in MODEL_CHOICE_ROLES if getattr(wanted, role) != getattr(running, role)]
        if self._model_list is None:
            self._model_list = _model_choices(wanted)
        return {
            "models": {**{role: getattr(running, role) for role in MODEL_CHOICE_ROLES}, "loading": ", ".join(loading) or None},
            "model_choices": self._model_list,
        }


def _model_choices(models: ModelsConfig) -> dict[str, list[dict[str, Any]]]:
    """role → the manifest's models of that role: name, licence, whether the file is in the models
    dir (a broken models dir or manifest: no choices, the running models stay)."""
    from vcamd.modelstore.store import ModelStore

    try:
        rows = ModelStore.from_config(models).list()
    except VcamdError as err:
        log.warning("the models to choose from could not be listed: %s", err)
        return {role: [] for role in MODEL_CHOICE_ROLES}
    return {role: [{"name": row.name, "license": row.license, "present": row.status in ("present", "verified")}
                   for row in rows if row.role == role] for role in MODEL_CHOICE_ROLES}
