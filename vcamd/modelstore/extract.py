"""Model packs: a verified zip's members unpacked, one per role, each checked (size before it is
unpacked, then its hash or, with none published, the role's signature check) before any is moved
into place; the zip is deleted when it is broken."""

from __future__ import annotations

import hashlib
import os
import zipfile
from collections.abc import Callable
from pathlib import Path

from vcamd.common.errors import ModelError
from vcamd.models.modelcheck import check_signature
from vcamd.modelstore.files import CHUNK_BYTES, PART_SUFFIX, fsync, open_for_write, refuse_symlink
from vcamd.modelstore.manifest import FileSpec, ModelEntry
from vcamd.modelstore.verify import State
from vcamd.modelstore.wayout import ways_out


def extract(entry: ModelEntry, zip_path: Path, state: State, inside: Callable[[str], Path]) -> None:
    """Extract each role's member from a verified zip; check each member's size and hash.
    `inside(file_name)`: the path of a file in the models dir."""
    parts: list[tuple[Path, Path, FileSpec, str]] = []  # (.part, final, spec, sha256)
    started: list[Path] = []  # every .part opened, removed at the end whatever happens
    try:
        with zipfile.ZipFile(zip_path) as zf:
            by_base: dict[str, list[zipfile.ZipInfo]] = {}
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
                final = inside(spec.file)
                refuse_symlink(final)
                part = final.with_name(final.name + PART_SUFFIX)
                started.append(part)
                digest = hashlib.sha256()
                with zf.open(info) as src, open_for_write(part) as out:
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
                        check_signature(part, role)
                    except ModelError as err:
                        raise ModelError(
                            f"{entry.name}: {spec.file} in {zip_path.name} is not a usable {role} model ({err.message})",
                            fix="the manifest does not match this zip; report it (models/README.md)",
                        ) from None
                fsync(part)
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
            fix=ways_out([entry.name], pull_note=" again"),
        ) from None
    except ModelError:
        zip_path.unlink(missing_ok=True)
        raise
    finally:
        for part in started:
            part.unlink(missing_ok=True)

