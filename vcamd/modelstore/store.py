"""`ModelStore`: the models folder — a `[models]` config value turned into a file (or how to get
it), what is there (`list`), downloads (`pull`: locked, resumed, verified, unpacked) and
re-hashing (`verify`). The parts are in their own modules: `manifest`, `download`, `extract`,
`verify` (pins and the verified cache), `locking`, `files`, `roles`.

A model whose hash is not published (gfpgan_1.4) is pinned on first download: its hash is recorded
in `<dir>/vcamd-models.json` and every later pull or verify checks against that record. With no
hash to check, a download is pinned only when its byte count is proven (the server's
Content-Length / Content-Range total, or the manifest's exact size) AND it loads as an ONNX model
of its role (the same signature checks the daemon runs at load): a mirror that closes cleanly half
way through a body sent without a length must not get half a model pinned as the truth.

Everything written here is private to the user (0600 files in a 0700 folder, never through a
symlink: `vcamd.files.private_files`).
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from vcamd.common.errors import ModelError
from vcamd.files.private_files import private_dir
from vcamd.models.modelcheck import check_signature
from vcamd.modelstore.download import check_mirror, download, mirror_url
from vcamd.modelstore.extract import extract
from vcamd.modelstore.files import PART_SUFFIX, dir_error, refuse_symlink, sha256_file
from vcamd.modelstore.locking import pull_lock
from vcamd.modelstore.manifest import FileSpec, Manifest, ModelEntry, plain_file_name
from vcamd.modelstore.roles import configured_models
from vcamd.modelstore.verify import STATE_FILE, State, read_state, write_state
from vcamd.modelstore.wayout import ways_out

if TYPE_CHECKING:
    from vcamd.config.schema import Config, ModelsConfig

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# Results


Status = Literal["missing", "partial", "present", "verified", "corrupt"]


@dataclass(frozen=True)
class ModelRow:
    """One line of `vcamd models list`: one (model, role) pair."""

    name: str
    role: str
    status: Status
    path: Path
    size: int | None
    """Bytes on disk when present, else the manifest's (approximate) size."""
    license: str


@dataclass(frozen=True)
class PullResult:
    name: str
    action: Literal["downloaded", "already present"]
    paths: tuple[Path, ...]
    pinned: tuple[tuple[Path, str], ...] = ()
    """(file, sha256) recorded now because the manifest publishes no hash for it."""
    crc32: str = ""
    """The publisher's CRC32 the download matched before its SHA-256 was pinned ("" = none checked)."""


@dataclass(frozen=True)
class VerifyResult:
    name: str
    role: str
    path: Path
    status: Literal["ok", "mismatch", "missing", "pinned", "invalid"]
    sha256: str = ""
    expected: str = ""
    problem: str = ""
    """For "invalid": why the file is not a usable model of its role."""


# --------------------------------------------------------------------------------------------
# The store


class ModelStore:
    """The models folder: resolve config values to files, download, verify."""

    def __init__(
        self,
        dir: Path,
        mirror: str = "",
        manifest: Manifest | Path | Mapping[str, Any] | None = None,
        *,
        timeout_s: float = 30.0,
    ) -> None:
        self.dir = Path(dir).expanduser()
        self.mirror = check_mirror(mirror)
        if manifest is None:
            manifest = Manifest.packaged()
        elif isinstance(manifest, Path):
            manifest = Manifest.load(manifest)
        elif not isinstance(manifest, Manifest):
            manifest = Manifest.from_dict(manifest)
        self.manifest = manifest
        self.timeout_s = timeout_s

    @classmethod
    def from_config(cls, models_cfg: ModelsConfig, manifest: Manifest | Path | Mapping[str, Any] | None = None) -> ModelStore:
        """From a `ModelsConfig`: `[models] dir` (default: user data dir / models) and `mirror`."""
        from vcamd.config.folders import user_data_dir

        directory = models_cfg.dir if models_cfg.dir is not None else user_data_dir() / "models"
        return cls(Path(directory), models_cfg.mirror, manifest)

    # ---- paths ----------------------------------------------------------------------------

    def path_for(self, name_or_path: str, role: str) -> Path:
        """A manifest name → its file in the models dir; anything else is a file path.

        Raises ModelError naming the file and the fix when it is missing or the wrong role.
        """
        entry = self.manifest.entries.get(name_or_path)
        if entry is None:
            path = Path(name_or_path).expanduser()
            if path.is_file():
                return path
            known = ", ".join(n for n, e in self.manifest.entries.items() if role in e.roles)
            raise ModelError(
                f"[models] {role} = {name_or_path!r}: no such file, and not a model name in the manifest",
                fix=f"fix [models] {role} in the config: a path to an existing .onnx file or one of: {known}",
            )
        if role not in entry.roles:
            suggestion = self.manifest.default_for(role) or "a path to an .onnx file"
            raise ModelError(
                f"[models] {role} = {name_or_path!r} is not a {role} model (its role is {entry.role})",
                fix=f"fix [models] {role} in the config, e.g. {role} = {suggestion!r}",
            )
        spec = entry.installed()[role]
        path = self._inside(spec.file)
        if not path.is_file():
            raise ModelError(
                f"model file {path} ({name_or_path}, the {role}) is missing",
                fix=f"{ways_out([name_or_path])} (or fix [models] {role} in the config)",
            )
        if spec.size is not None and (actual := path.stat().st_size) != spec.size:
            raise ModelError(
                f"model file {path} is {actual:,} bytes, expected {spec.size:,}: incomplete or corrupt",
                fix=ways_out([name_or_path], pull_note=" to download it again"),
            )
        return path

    def paths_for(self, wanted: Sequence[tuple[str, str]]) -> list[Path]:
        """`path_for` for each (name_or_path, role), in order; the manifest files that are missing
        are named all in one ModelError (not the first only), with the pull for all of them."""
        missing: dict[Path, str] = {}  # the file → the manifest name it belongs to
        for value, role in wanted:
            entry = self.manifest.entries.get(value)
            if entry is not None and role in entry.roles and not (path := self._inside(entry.installed()[role].file)).is_file():
                missing[path] = value
        if missing:
            files = "; ".join(f"{path} ({value})" for path, value in missing.items())
            raise ModelError(
                f"{len(missing)} model file{'s' if len(missing) > 1 else ''} missing: {files}",
                fix=ways_out(missing.values(), files=len(missing)),
            )
        return [self.path_for(value, role) for value, role in wanted]

    def paths_in_use(self, cfg: Config, served: Mapping[str, Path] | None = None) -> dict[str, Path]:
        """role → file for every model `cfg` uses (`roles.configured_models`), every missing file
        named in one ModelError (`paths_for`). A role in `served` runs on the Triton server with no
        copy here: it stands as its served name and is not looked for."""
        served = served or {}
        wanted = configured_models(cfg)
        here = [(value, role) for value, role in wanted if role not in served]
        found = dict(zip((role for _, role in here), self.paths_for(here), strict=True))
        return {role: served[role] if role in served else found[role] for _, role in wanted}

    def _inside(self, file_name: str) -> Path:
        """`dir / file_name`, refusing anything that would land outside the models dir."""
        try:
            plain_file_name(file_name)
        except ValueError:
            raise ModelError(f"model file name {file_name!r} would write outside the models dir {self.dir}") from None
        # Only the name is checked, not where it resolves: a user may symlink a big model from
        # another disk into the models dir.
        return self.dir / file_name

    # ---- listing --------------------------------------------------------------------------

    def list(self) -> list[ModelRow]:
        state = read_state(self.dir)
        rows = []
        for entry in self.manifest.entries.values():
            for role, spec in entry.installed().items():
                path = self._inside(spec.file)
                status, size = self._status(entry, spec, path, state)
                rows.append(ModelRow(entry.name, role, status, path, size, entry.license))
        return rows

    def _status(self, entry: ModelEntry, spec: FileSpec, path: Path, state: State) -> tuple[Status, int | None]:
        try:
            st = path.stat()
        except FileNotFoundError:
            part = self._part_for(entry, spec)
            return ("partial" if part.exists() else "missing"), spec.display_size
        if spec.size is not None and st.st_size != spec.size:
            return "corrupt", st.st_size
        if state.still_verified(spec, st):
            return "verified", st.st_size
        return "present", st.st_size

    def _part_for(self, entry: ModelEntry, spec: FileSpec) -> Path:
        # A pack downloads its zip; its members only ever exist complete.
        return self._inside((entry.file if entry.extract else spec.file) + PART_SUFFIX)

    # ---- verify ---------------------------------------------------------------------------

    def verify(self, names: Iterable[str] | None = None) -> builtins.list[VerifyResult]:
        """Re-hash the files of `names` (default: every model with a file present)."""
        state = read_state(self.dir)
        if names is None:
            entries = [e for e in self.manifest.entries.values() if any(self._inside(s.file).exists() for s in e.installed().values())]
        else:
            entries = [self.manifest.get(n) for n in names]
        results = []
        for entry in entries:
            for role, spec in entry.installed().items():
                path = self._inside(spec.file)
                if not path.is_file():
                    results.append(VerifyResult(entry.name, role, path, "missing"))
                    continue
                sha = sha256_file(path)
                expected = state.expected_sha(spec)
                if not spec.sha256 and sha == (expected or sha):
                    # No published hash: a pin only says "unchanged since it was recorded", so the
                    # file itself is checked too (a pin recorded from a cut-off download must not
                    # stay "ok" for ever), and so is a file about to be pinned.
                    try:
                        check_signature(path, role)
                    except ModelError as err:
                        state.unpin(spec.file)
                        results.append(VerifyResult(entry.name, role, path, "invalid", sha, expected, err.message))
                        continue
                    if expected:
                        state.pinned[spec.file]["checked"] = True
                if not expected:
                    state.pin(spec, sha, path)
                    results.append(VerifyResult(entry.name, role, path, "pinned", sha))
                elif sha == expected:
                    state.mark_verified(spec, path, sha)
                    results.append(VerifyResult(entry.name, role, path, "ok", sha, expected))
                else:
                    state.forget(spec.file)
                    results.append(VerifyResult(entry.name, role, path, "mismatch", sha, expected))
        write_state(self.dir, state, required=bool(state.new_pins or state.unpinned))
        return results

    # ---- pull -----------------------------------------------------------------------------

    def url_for(self, entry: ModelEntry) -> str:
        """The entry's URL, with scheme and host replaced by `mirror` when one is set."""
        return mirror_url(entry.url, self.mirror)

    def pull(self, names: Iterable[str], progress: bool = True) -> builtins.list[PullResult]:
        """Download and verify each model unless a verified copy is already in place.

        Stops at the first failure with a ModelError; a partial download stays as `<file>.part`
        and the next pull resumes it.
        """
        entries = [self.manifest.get(n) for n in names]  # unknown names fail before any download
        try:
            private_dir(self.dir)
        except OSError as exc:
            raise dir_error(self.dir, exc) from None
        return [self._pull_one(entry, progress) for entry in entries]

    def _pull_one(self, entry: ModelEntry, progress: bool) -> PullResult:
        with pull_lock(entry, self._inside(f".{entry.file}.lock")):
            state = read_state(self.dir)
            installed = entry.installed()
            paths = tuple(self._inside(s.file) for s in installed.values())
            if self._all_good(entry, state):
                write_state(self.dir, state)
                return PullResult(entry.name, "already present", paths, tuple(state.new_pins))
            if state.unpinned:
                write_state(self.dir, state)  # a pin of a broken file is gone even if this download fails

            target = self._inside(entry.file)
            for path in (*paths, target):
                refuse_symlink(path)
            expected = state.expected_sha(entry)
            have_zip = bool(entry.extract) and target.is_file() and expected and sha256_file(target) == expected
            crc32 = ""
            if not have_zip:
                sha, crc32 = download(entry, target, expected, progress, url=self.url_for(entry), timeout_s=self.timeout_s, state_path=self.state_path,
                               crc32_url=mirror_url(entry.crc32_url, self.mirror) if entry.crc32_url else "")
                if not expected:
                    state.pin(entry, sha, target)
                else:
                    state.mark_verified(entry, target, sha)
            if entry.extract:
                extract(entry, target, state, self._inside)
                target.unlink(missing_ok=True)
                state.forget(entry.file)
            write_state(self.dir, state)
            return PullResult(entry.name, "downloaded", paths, tuple(state.new_pins), crc32)

    def _all_good(self, entry: ModelEntry, state: State) -> bool:
        """True when every installed file exists and matches its (published or pinned) hash."""
        for role, spec in entry.installed().items():
            path = self._inside(spec.file)
            try:
                st = path.stat()
            except FileNotFoundError:
                return False
            if spec.size is not None and st.st_size != spec.size:
                log.warning("%s is %d bytes, expected %d: downloading it again", path, st.st_size, spec.size)
                return False
            if state.still_verified(spec, st) and (spec.sha256 or state.role_checked(spec)):
                continue
            expected = state.expected_sha(spec)
            sha = sha256_file(path)
            if not spec.sha256 and (not expected or (sha == expected and not state.role_checked(spec))):
                try:
                    check_signature(path, role)
                except ModelError as err:
                    log.warning("%s: %s; downloading it again", path, err.message)
                    state.unpin(spec.file)
                    return False
                expected = state.expected_sha(spec)
                if expected == sha:
                    state.pinned[spec.file]["checked"] = True  # a pin from before the check existed
            if not expected:
                state.pin(spec, sha, path)
            elif sha != expected:
                log.warning("%s does not match its SHA-256: downloading it again", path)
                return False
            else:
                state.mark_verified(spec, path, sha)
        return True

    # ---- state file: pinned hashes, verified cache ---------------------------------------

    @property
    def state_path(self) -> Path:
        return self.dir / STATE_FILE
