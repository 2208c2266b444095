"""Model files: the manifest, downloads (resume, SHA-256, atomic move), verification, paths.

The manifest (`models/manifest.toml`, shipped as `vcamd/data/manifest.toml`) names every production
model with its file, size, SHA-256, licence and URL. `ModelStore` keeps those files in one folder:

* `path_for(name_or_path, role)` turns a `[models]` config value into a file path, or says how to
  get the file;
* `pull(names)` downloads into `<file>.part`, resumes a partial `.part` with an HTTP Range request,
  checks the SHA-256 and only then moves the file into place with `os.replace`, so a file under
  its final name is always complete and verified;
* `verify(names)` re-hashes what is present.

A model whose hash is not published (gfpgan_1.4) is pinned on first download: its hash is recorded
in `<dir>/vcamd-models.json` and every later pull or verify checks against that record. With no
hash to check, a download is pinned only when its byte count is proven (the server's
Content-Length / Content-Range total, or the manifest's exact size) AND it loads as an ONNX model
of its role (the same signature checks the daemon runs at load): a mirror that closes cleanly half
way through a body sent without a length must not get half a model pinned as the truth.

Everything written here is private to the user (0600 files in a 0700 folder, never through a
symlink: `vcamd.private_files`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import time
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from vcamd.errors import ModelError
from vcamd.private_files import UnsafePathError, open_private, private_dir

if TYPE_CHECKING:
    from vcamd.config import ModelsConfig

log = logging.getLogger(__name__)

STATE_FILE = "vcamd-models.json"
"""Pinned hashes of models without a published SHA-256, and a cache of verified files."""
PART_SUFFIX = ".part"
CHUNK_BYTES = 1 << 20
ROLES = ("detector", "recognizer", "swapper", "enhancer", "parser")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SHA_RE = re.compile(r"^([0-9a-f]{64})?$")


# --------------------------------------------------------------------------------------------
# Manifest


def _plain_file_name(value: str) -> str:
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
        return _plain_file_name(v)

    @field_validator("sha256")
    @classmethod
    def _sha_is_hex(cls, v: str) -> str:
        v = v.strip().lower()
        if not _SHA_RE.match(v):
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
    extract: dict[str, FileSpec] = {}
    """For a zip pack: role → the member to extract. The zip itself is deleted afterwards."""

    @field_validator("url")
    @classmethod
    def _url_is_http(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http:// or https:// URL")
        return v

    @field_validator("extract")
    @classmethod
    def _extract_roles(cls, v: dict[str, FileSpec]) -> dict[str, FileSpec]:
        for role in v:
            if role not in ROLES:
                raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
        return v

    @model_validator(mode="after")
    def _name_and_roles(self) -> ModelEntry:
        if not _NAME_RE.match(self.name) or ".." in self.name:
            raise ValueError(f"model name {self.name!r}: use letters, digits, '.', '_' and '-' only")
        roles = self.role.split("+")
        if self.extract and set(roles) != set(self.extract):
            raise ValueError(f"role {self.role!r} must list exactly the extracted roles ({'+'.join(self.extract)})")
        if not self.extract and self.role not in ROLES:
            raise ValueError(f"role {self.role!r}: expected one of {', '.join(ROLES)}")
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
            raise ModelError(
                f"unknown model {name!r}; the manifest has {', '.join(self.entries)}",
                fix="run `vcamd models list` to see them",
            ) from None

    def default_for(self, role: str) -> str | None:
        for entry in self.entries.values():
            if entry.default and role in entry.roles:
                return entry.name
        return None


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
        self.mirror = _check_mirror(mirror)
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
        from vcamd.config import user_data_dir

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
                fix=f"run `vcamd models pull {name_or_path}`, or fix [models] {role} in the config",
            )
        if spec.size is not None and (actual := path.stat().st_size) != spec.size:
            raise ModelError(
                f"model file {path} is {actual:,} bytes, expected {spec.size:,}: incomplete or corrupt",
                fix=f"run `vcamd models pull {name_or_path}` to download it again",
            )
        return path

    def _inside(self, file_name: str) -> Path:
        """`dir / file_name`, refusing anything that would land outside the models dir."""
        try:
            _plain_file_name(file_name)
        except ValueError:
            raise ModelError(f"model file name {file_name!r} would write outside the models dir {self.dir}") from None
        # Only the name is checked, not where it resolves: a user may symlink a big model from
        # another disk into the models dir.
        return self.dir / file_name

    # ---- listing --------------------------------------------------------------------------

    def list(self) -> list[ModelRow]:
        state = self._read_state()
        rows = []
        for entry in self.manifest.entries.values():
            for role, spec in entry.installed().items():
                path = self._inside(spec.file)
                status, size = self._status(entry, spec, path, state)
                rows.append(ModelRow(entry.name, role, status, path, size, entry.license))
        return rows

    def _status(self, entry: ModelEntry, spec: FileSpec, path: Path, state: _State) -> tuple[Status, int | None]:
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

    def verify(self, names: Iterable[str] | None = None) -> list[VerifyResult]:
        """Re-hash the files of `names` (default: every model with a file present)."""
        state = self._read_state()
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
                sha = _sha256_file(path)
                expected = state.expected_sha(spec)
                if not spec.sha256 and sha == (expected or sha):
                    # No published hash: a pin only says "unchanged since it was recorded", so the
                    # file itself is checked too (a pin recorded from a cut-off download must not
                    # stay "ok" for ever), and so is a file about to be pinned.
                    try:
                        check_model_file(path, role)
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
        self._write_state(state, required=bool(state.new_pins or state.unpinned))
        return results

    # ---- pull -----------------------------------------------------------------------------

    def url_for(self, entry: ModelEntry) -> str:
        """The entry's URL, with scheme and host replaced by `mirror` when one is set."""
        if not self.mirror:
            return entry.url
        src, dst = urlsplit(entry.url), urlsplit(self.mirror)
        return urlunsplit((dst.scheme, dst.netloc, dst.path.rstrip("/") + src.path, src.query, ""))

    def pull(self, names: Iterable[str], progress: bool = True) -> list[PullResult]:
        """Download and verify each model unless a verified copy is already in place.

        Stops at the first failure with a ModelError; a partial download stays as `<file>.part`
        and the next pull resumes it.
        """
        entries = [self.manifest.get(n) for n in names]  # unknown names fail before any download
        try:
            private_dir(self.dir)
        except OSError as exc:
            raise self._dir_error(exc) from None
        return [self._pull_one(entry, progress) for entry in entries]

    def _pull_one(self, entry: ModelEntry, progress: bool) -> PullResult:
        with self._lock(entry):
            state = self._read_state()
            installed = entry.installed()
            paths = tuple(self._inside(s.file) for s in installed.values())
            if self._all_good(entry, state):
                self._write_state(state)
                return PullResult(entry.name, "already present", paths, tuple(state.new_pins))
            if state.unpinned:
                self._write_state(state)  # a pin of a broken file is gone even if this download fails

            target = self._inside(entry.file)
            for path in (*paths, target):
                _refuse_symlink(path)
            expected = state.expected_sha(entry)
            have_zip = bool(entry.extract) and target.is_file() and expected and _sha256_file(target) == expected
            if not have_zip:
                sha = self._download(entry, target, expected, progress)
                if not expected:
                    state.pin(entry, sha, target)
                else:
                    state.mark_verified(entry, target, sha)
            if entry.extract:
                self._extract(entry, target, state)
                target.unlink(missing_ok=True)
                state.forget(entry.file)
            self._write_state(state)
            return PullResult(entry.name, "downloaded", paths, tuple(state.new_pins))

    def _all_good(self, entry: ModelEntry, state: _State) -> bool:
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
            sha = _sha256_file(path)
            if not spec.sha256 and (not expected or (sha == expected and not state.role_checked(spec))):
                try:
                    check_model_file(path, role)
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

    def _download(self, entry: ModelEntry, target: Path, expected_sha: str, progress: bool) -> str:
        """Fetch `entry` into `target` via `target.part`; returns the SHA-256 of what was written.

        Nothing reaches `target` unless it is proven whole: by its (published or pinned) hash, or —
        with no hash to check — by a byte count the server or the manifest vouches for plus an
        ONNX load with the role's signature check.
        """
        import requests

        url = self.url_for(entry)
        part = target.with_name(target.name + PART_SUFFIX)
        expected_size = entry.size
        _refuse_symlink(part)
        offset = part.stat().st_size if part.exists() else 0
        if expected_size is not None and offset > expected_size:
            part.unlink()
            offset = 0

        headers = {"Accept-Encoding": "identity", "User-Agent": "vcamd"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        try:
            resp = requests.get(url, headers=headers, stream=True, timeout=(10.0, self.timeout_s))
        except requests.RequestException as exc:
            raise ModelError(
                f"{entry.name}: cannot reach {_host(url)}: {_reason(exc)}",
                fix="check the network connection and [models] mirror in the config, then run `vcamd models pull` again",
            ) from None

        declared: int | None = None  # the whole file's size as the server states it
        with resp:
            if resp.status_code == 416 and offset and offset == (expected_size or _content_range_total(resp.headers)):
                declared = _content_range_total(resp.headers)
                log.info("%s: %s is already complete", entry.name, part)
            elif resp.status_code == 206 and offset:
                start = _content_range_start(resp.headers.get("Content-Range", ""))
                if start != offset:
                    resp.close()
                    part.unlink()
                    raise ModelError(
                        f"{entry.name}: {_host(url)} resumed at byte {start}, not {offset}; the partial download was deleted",
                        fix=f"run `vcamd models pull {entry.name}` again to start over",
                    )
                declared = _content_range_full_size(resp.headers.get("Content-Range", ""))
                log.info("%s: resuming at %s", entry.name, _mb(offset))
                self._receive(entry, resp, part, offset, progress, url)
            elif resp.status_code == 200:
                if offset:
                    log.info("%s: %s ignored the resume request; starting over", entry.name, _host(url))
                    offset = 0
                length = resp.headers.get("Content-Length", "")
                declared = int(length) if length.isdigit() else None
                self._receive(entry, resp, part, 0, progress, url)
            else:
                if resp.status_code == 416:
                    part.unlink(missing_ok=True)  # our .part does not fit the server's file
                raise ModelError(
                    f"{entry.name}: download failed: HTTP {resp.status_code} {resp.reason or ''} from {url}".rstrip(),
                    fix="check [models] mirror in the config; without a mirror, the file may have moved upstream (see models/README.md)",
                )

        got = part.stat().st_size
        if expected_size is not None and got < expected_size:
            raise ModelError(
                f"{entry.name}: download ended early at {_mb(got)} of {_mb(expected_size)} from {_host(url)}",
                fix=f"run `vcamd models pull {entry.name}` again to resume",
            )
        size_proven = got == expected_size or got == declared
        sha = _sha256_file(part)
        wrong_size = (expected_size is not None and got != expected_size) or (declared is not None and got != declared)
        if wrong_size or (expected_sha and sha != expected_sha):
            part.unlink()
            if wrong_size:
                what = f"{got:,} bytes, expected {expected_size or declared:,}"
            else:
                what = f"SHA-256 {sha[:12]}…, expected {expected_sha[:12]}…"
                if not size_proven:
                    what += f"; {_host(url)} sent {got:,} bytes without saying how many to expect: probably cut off"
            source = "the manifest" if entry.sha256 or wrong_size else f"the hash recorded in {self.state_path}"
            raise ModelError(
                f"{entry.name}: the file from {url} does not match {source} ({what}); it was deleted",
                fix=f"run `vcamd models pull {entry.name}` again; if it repeats, the server or [models] mirror serves a different file",
            )
        if not expected_sha:
            self._prove_unpinned(entry, part, got, size_proven, url)
        _fsync(part)
        os.replace(part, target)
        return sha

    def _prove_unpinned(self, entry: ModelEntry, part: Path, got: int, size_proven: bool, url: str) -> None:
        """No hash to check: the byte count must be vouched for and the file must load as a model
        of its role; otherwise the download is deleted (nothing pinned, nothing installed)."""
        if not size_proven:
            part.unlink()
            raise ModelError(
                f"{entry.name}: {_host(url)} sent {got:,} bytes without a Content-Length, and the manifest publishes "
                "neither the exact size nor the SHA-256, so a cut-off download cannot be told from a whole one; "
                "nothing was installed",
                fix=f"pull it from a server that sends Content-Length (remove or change [models] mirror), then `vcamd models pull {entry.name}`",
            )
        if entry.extract:
            return  # a pack: each member is checked (CRC, size, role) as it is extracted
        try:
            check_model_file(part, entry.role)
        except ModelError as err:
            part.unlink()
            raise ModelError(
                f"{entry.name}: the {got:,} bytes from {url} are not a usable {entry.role} model ({err.message}); nothing was installed",
                fix=f"run `vcamd models pull {entry.name}` again; if it repeats, the server or [models] mirror serves a broken file",
            ) from None

    def _receive(self, entry: ModelEntry, resp: Any, part: Path, offset: int, progress: bool, url: str) -> None:
        """Append the response body to `part`; on a dropped or short body keep `part` for resume."""
        import requests
        import urllib3

        length = resp.headers.get("Content-Length")
        total = offset + int(length) if length and length.isdigit() else entry.size
        received = 0
        out = _open_for_write(part, append=bool(offset))
        try:
            with _progress_bar(entry.name, total, offset, progress) as advance:
                for chunk in _body_chunks(resp):
                    try:
                        out.write(chunk)
                    except OSError as exc:
                        raise ModelError(
                            f"{entry.name}: cannot write {part}: {exc.strerror}",
                            fix="free some disk space or set [models] dir to a folder on a disk with room",
                        ) from None
                    received += len(chunk)
                    advance(len(chunk))
            try:
                out.close()  # the last buffered bytes hit the disk here: a full disk shows now
            except OSError as exc:
                raise ModelError(
                    f"{entry.name}: cannot write {part}: {exc.strerror}",
                    fix="free some disk space or set [models] dir to a folder on a disk with room",
                ) from None
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            # Connection dropped or server closed early: keep .part so the next pull resumes.
            raise ModelError(
                f"{entry.name}: download interrupted at {_mb(offset + received)}"
                + (f" of {_mb(total)}" if total else "")
                + f" ({_reason(exc)})",
                fix=f"run `vcamd models pull {entry.name}` again to resume",
            ) from None
        finally:
            if not out.closed:
                # Already failing: a close error (full disk) must not hide the first error. The
                # .part may then hold less than `received`; the resume starts from its real size.
                with contextlib.suppress(OSError):
                    out.close()
        if length and length.isdigit() and received < int(length):
            raise ModelError(
                f"{entry.name}: {_host(url)} closed the connection at {_mb(offset + received)} of {_mb(total or 0)}",
                fix=f"run `vcamd models pull {entry.name}` again to resume",
            )

    def _extract(self, entry: ModelEntry, zip_path: Path, state: _State) -> None:
        """Extract each role's member from a verified zip; check each member's size and hash."""
        parts: list[tuple[Path, Path, FileSpec, str]] = []  # (.part, final, spec, sha256)
        started: list[Path] = []  # every .part opened, removed at the end whatever happens
        try:
            with zipfile.ZipFile(zip_path) as zf:
                by_base = {}
                for info in zf.infolist():
                    if not info.is_dir():
                        by_base.setdefault(Path(info.filename).name, []).append(info)
                for role, spec in entry.extract.items():
                    members = by_base.get(spec.file, [])
                    if len(members) != 1:
                        raise ModelError(
                            f"{entry.name}: {zip_path.name} has {len(members)} members named {spec.file}, expected 1",
                            fix="the manifest does not match this zip; report it (models/README.md)",
                        )
                    info = members[0]
                    # Checked before unpacking, so a bad zip cannot fill the disk.
                    limit = spec.size or 2 * (spec.approx_size or 0)
                    if (spec.size is not None and info.file_size != spec.size) or (limit and info.file_size > limit):
                        raise ModelError(
                            f"{entry.name}: {spec.file} in {zip_path.name} is {info.file_size:,} bytes, expected {spec.display_size:,}",
                            fix="the manifest does not match this zip; report it (models/README.md)",
                        )
                    final = self._inside(spec.file)
                    _refuse_symlink(final)
                    part = final.with_name(final.name + PART_SUFFIX)
                    started.append(part)
                    digest = hashlib.sha256()
                    with zf.open(info) as src, _open_for_write(part) as out:
                        while chunk := src.read(CHUNK_BYTES):
                            digest.update(chunk)
                            out.write(chunk)
                    sha = digest.hexdigest()
                    parts.append((part, final, spec, sha))
                    expected = state.expected_sha(spec)
                    if expected and sha != expected:
                        raise ModelError(
                            f"{entry.name}: {spec.file} in {zip_path.name} has SHA-256 {sha[:12]}…, expected {expected[:12]}…",
                            fix="the manifest does not match this zip; report it (models/README.md)",
                        )
                    if not spec.sha256:  # no published hash: it must at least be a model of its role
                        try:
                            check_model_file(part, role)
                        except ModelError as err:
                            raise ModelError(
                                f"{entry.name}: {spec.file} in {zip_path.name} is not a usable {role} model ({err.message})",
                                fix="the manifest does not match this zip; report it (models/README.md)",
                            ) from None
                    _fsync(part)
            for part, final, spec, sha in parts:
                os.replace(part, final)
                if state.expected_sha(spec):
                    state.mark_verified(spec, final, sha)
                else:
                    state.pin(spec, sha, final)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as exc:
            zip_path.unlink(missing_ok=True)
            raise ModelError(
                f"{entry.name}: cannot unpack {zip_path.name}: {exc}; it was deleted",
                fix=f"run `vcamd models pull {entry.name}` again",
            ) from None
        except ModelError:
            zip_path.unlink(missing_ok=True)
            raise
        finally:
            for part in started:
                part.unlink(missing_ok=True)

    @contextlib.contextmanager
    def _lock(self, entry: ModelEntry) -> Iterator[None]:
        """One pull per model at a time: two writers appending to one .part would corrupt it."""
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks here; concurrent pulls are the user's risk
            yield
            return
        lock_path = self._inside(f".{entry.file}.lock")
        while True:
            handle = _open_for_write(lock_path, truncate=False)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                raise ModelError(
                    f"{entry.name}: another `vcamd models pull` is downloading it right now",
                    fix="wait for it to finish",
                ) from None
            if _same_file(handle, lock_path):
                break
            # The holder removed the lock file between our open and our flock: this lock guards
            # nothing any more; take the one at the name now.
            handle.close()
        try:
            yield
        finally:
            # The lock file is removed while still held (success or failure: no empty file is left
            # behind); a pull that opened it meanwhile sees the name gone and retries, above.
            with contextlib.suppress(OSError):
                lock_path.unlink()
            handle.close()

    # ---- state file: pinned hashes, verified cache ---------------------------------------

    @property
    def state_path(self) -> Path:
        return self.dir / STATE_FILE

    def _read_state(self) -> _State:
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            data = {}
        except NotADirectoryError as exc:  # [models] dir (or a folder above it) is a file
            raise self._dir_error(exc) from None
        except (OSError, ValueError) as exc:
            raise ModelError(
                f"{self.state_path}: unreadable ({exc})",
                fix="delete it: verified files are re-hashed, and hashes of unpublished models are recorded again on the next pull",
            ) from None
        if not isinstance(data, dict):
            data = {}
        return _State(dict(data.get("pinned", {})), dict(data.get("verified", {})))

    def _dir_error(self, exc: OSError) -> ModelError:
        return ModelError(
            f"[models] dir = {str(self.dir)!r} cannot be used as the models folder ({exc.strerror})",
            fix="set [models] dir to a folder you can write to (or remove the key for the default)",
        )

    def _write_state(self, state: _State, *, required: bool = True) -> None:
        """Save pins and the verified-files cache. `required=False`: only the cache changed, so a
        failed write (full disk) is a warning — the files are simply re-hashed next time."""
        if not self.dir.is_dir():
            return
        tmp = self.state_path.with_name(STATE_FILE + ".tmp")
        try:
            tmp.unlink(missing_ok=True)  # a link planted here is removed, not written through
            with _open_for_write(tmp) as out:
                out.write(state.to_json().encode("utf-8"))
            os.replace(tmp, self.state_path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            if required:
                raise ModelError(
                    f"cannot record model hashes in {self.state_path}: {exc.strerror}",
                    fix="free some disk space, then run the command again",
                ) from None
            log.warning("could not update %s (%s); verified files will be re-hashed next time", self.state_path, exc.strerror)


@dataclass
class _State:
    """The contents of vcamd-models.json, plus the pins recorded during this call."""

    pinned: dict[str, dict[str, Any]]
    """file name → {sha256, size, recorded}: hashes of models the manifest publishes none for."""
    verified: dict[str, dict[str, Any]]
    """file name → {size, mtime_ns, sha256} at the last successful hash check."""
    new_pins: list[tuple[Path, str]] = field(default_factory=list)
    unpinned: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"pinned": self.pinned, "verified": self.verified}, indent=2, sort_keys=True) + "\n"

    def expected_sha(self, spec: FileSpec) -> str:
        """The published hash, else the one recorded on first download, else ""."""
        return spec.sha256 or self.pinned.get(spec.file, {}).get("sha256", "")

    def pin(self, spec: FileSpec, sha: str, path: Path) -> None:
        recorded = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        # "checked": recorded only after the byte count and the role check were proven (pins
        # written before that check existed lack it, and are checked again on the next pull).
        self.pinned[spec.file] = {"sha256": sha, "size": path.stat().st_size, "recorded": recorded, "checked": True}
        self.new_pins.append((path, sha))
        self.mark_verified(spec, path, sha)
        log.debug("%s has no published SHA-256; recorded %s", spec.file, sha)

    def mark_verified(self, spec: FileSpec, path: Path, sha: str) -> None:
        st = path.stat()
        self.verified[spec.file] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha}

    def forget(self, file_name: str) -> None:
        self.verified.pop(file_name, None)

    def unpin(self, file_name: str) -> None:
        """Drop a pin that turned out to record a broken file, so the next pull starts afresh."""
        if self.pinned.pop(file_name, None) is not None:
            self.unpinned.append(file_name)
        self.forget(file_name)

    def role_checked(self, spec: FileSpec) -> bool:
        return bool(self.pinned.get(spec.file, {}).get("checked"))

    def still_verified(self, spec: FileSpec, st: os.stat_result) -> bool:
        """True when the file is unchanged (size, mtime) since it last matched its expected hash."""
        expected = self.expected_sha(spec)
        cached = self.verified.get(spec.file)
        return bool(expected) and cached == {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": expected}


# --------------------------------------------------------------------------------------------
# Helpers


def _check_mirror(mirror: str) -> str:
    if not mirror:
        return ""
    parts = urlsplit(mirror)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment or ".." in parts.path.split("/"):
        raise ModelError(
            f"[models] mirror = {mirror!r} is not a usable base URL",
            fix='set it to "" or to an http(s) URL such as "https://mirror.example.org"',
        )
    return mirror.rstrip("/")


def _body_chunks(resp: Any) -> Iterator[bytes]:
    """The raw body in pieces of whatever has arrived (at most CHUNK_BYTES).

    `read1` hands over bytes as they come, so when the connection breaks everything received so
    far is already on disk for the resume; a fixed-size `read(n)` would drop a partly filled chunk.
    """
    raw = resp.raw
    if not hasattr(raw, "read1"):  # urllib3 < 2
        yield from resp.iter_content(CHUNK_BYTES)
        return
    while chunk := raw.read1(CHUNK_BYTES, decode_content=False):
        yield chunk


def _refuse_symlink(path: Path) -> None:
    """vcamd reads through a symlinked model file but never writes through or over one."""
    if not path.is_symlink():
        return
    target = Path(os.path.realpath(path))
    where = "outside the models dir" if target.parent != path.parent.resolve() else "inside the models dir"
    raise ModelError(
        f"{path} is a symlink to {target} ({where}); vcamd will not write through or replace it",
        fix="remove the link, or fix the file it points to, then run the pull again",
    )


def _open_for_write(path: Path, *, append: bool = False, truncate: bool = True) -> BinaryIO:
    """Open a file in the models dir for writing: 0600, a symlink at its name refused (O_NOFOLLOW)."""
    mode = "ab" if append else ("wb" if truncate else "r+b")
    try:
        return open_private(path, mode)  # type: ignore[return-value]
    except OSError as exc:
        if path.is_symlink():
            _refuse_symlink(path)
        if isinstance(exc, UnsafePathError):
            raise ModelError(exc.strerror or str(exc), fix="remove it, then run the pull again") from None
        raise ModelError(
            f"cannot write {path}: {exc.strerror}",
            fix="check the permissions of the models dir, or set [models] dir to a folder you can write",
        ) from None


def _same_file(handle: BinaryIO, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(handle.fileno()), os.lstat(path))
    except FileNotFoundError:
        return False


def check_model_file(path: Path, role: str) -> None:
    """Load `path` with ONNX Runtime (CPU) and run the signature check the daemon runs for `role`.

    Raises ModelError when it is not a readable ONNX model of that role — e.g. a cut-off download.
    One definition per contract: the checks are the daemon's own classes, not a copy of them.
    """
    from vcamd.runtime import Sessions

    sessions = Sessions(["cpu"], threads=1)
    if role == "enhancer":
        from vcamd.faces.enhance import Enhancer

        Enhancer(path, sessions)
    elif role == "swapper":
        from vcamd.faces.swap import Swapper

        Swapper(path, sessions)
    elif role == "detector":
        from vcamd.faces.detect import FaceDetector

        FaceDetector(path, sessions)
    elif role == "recognizer":
        from vcamd.faces.identity import Recognizer

        Recognizer(path, sessions)
    else:
        raise ModelError(f"{path.name}: unknown model role {role!r}; expected one of {', '.join(ROLES)}")


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync(path: Path) -> None:
    """Make the bytes durable before the rename makes them visible under the final name."""
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


def _content_range_start(header: str) -> int | None:
    match = re.match(r"bytes (\d+)-\d+/(\d+|\*)", header.strip())
    return int(match.group(1)) if match else None


def _content_range_full_size(header: str) -> int | None:
    """TOTAL from a 206 answer's `Content-Range: bytes START-END/TOTAL` (None for `/*`)."""
    match = re.match(r"bytes \d+-\d+/(\d+)", header.strip())
    return int(match.group(1)) if match else None


def _content_range_total(headers: Mapping[str, str]) -> int | None:
    """TOTAL from a 416 answer's `Content-Range: bytes */TOTAL`."""
    match = re.match(r"bytes \*/(\d+)", headers.get("Content-Range", "").strip())
    return int(match.group(1)) if match else None


def _host(url: str) -> str:
    return urlsplit(url).netloc


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _reason(exc: BaseException) -> str:
    """The innermost useful message of a requests/urllib3 exception chain, on one line."""
    text = str(exc)
    inner: BaseException = exc
    for _ in range(10):  # requests → urllib3 → socket: a few levels at most
        nxt = inner.__cause__ or inner.__context__
        if nxt is None:
            break
        inner = nxt
    if inner is not exc and str(inner):
        text = str(inner)
    return " ".join(text.split())[:200] or type(exc).__name__


@contextlib.contextmanager
def _progress_bar(name: str, total: int | None, done: int, enabled: bool) -> Iterator[Any]:
    """Yields `advance(n)`; a rich progress bar on stderr when enabled."""
    if not enabled:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(name, total=total, completed=done)
        yield lambda n: bar.advance(task, n)
