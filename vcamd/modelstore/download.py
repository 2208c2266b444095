"""Resumable downloads: a model's file is fetched into `<file>.part`, a partial `.part` resumed
with an HTTP Range request, and only a file proven whole (its published or pinned SHA-256, or with
no hash to check a byte count the server or the manifest vouches for plus the role's signature
check) is moved into place with `os.replace`. `[models] mirror` replaces the host of every URL."""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from vcamd.common.errors import ModelError
from vcamd.models.modelcheck import check_signature
from vcamd.modelstore.files import CHUNK_BYTES, PART_SUFFIX, crc32_file, fsync, open_for_write, refuse_symlink, sha256_file
from vcamd.modelstore.manifest import ModelEntry
from vcamd.modelstore.progress import progress_bar
from vcamd.modelstore.wayout import ways_out

log = logging.getLogger(__name__)


def download(entry: ModelEntry, target: Path, expected_sha: str, progress: bool, *, url: str, timeout_s: float, state_path: Path,
             crc32_url: str = "") -> tuple[str, str]:
    """Fetch `entry` into `target` via `target.part`; returns the SHA-256 of what was written and
    the published CRC32 it matched ("" when none was checked).

    Nothing reaches `target` unless it is proven whole: by its (published or pinned) hash, or —
    with no hash to check — by a byte count the server or the manifest vouches for plus an
    ONNX load with the role's signature check, and by its published CRC32 where there is one
    (`crc32_url`, already mirrored). `state_path` is named when a pinned hash does not match.
    """
    import requests

    part = target.with_name(target.name + PART_SUFFIX)
    expected_size = entry.size
    refuse_symlink(part)
    offset = part.stat().st_size if part.exists() else 0
    if expected_size is not None and offset > expected_size:
        part.unlink()
        offset = 0

    headers = {"Accept-Encoding": "identity", "User-Agent": "vcamd"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        resp = requests.get(url, headers=headers, stream=True, timeout=(10.0, timeout_s))
    except requests.RequestException as exc:
        raise ModelError(
            f"{entry.name}: cannot reach {_host(url)}: {_reason(exc)}",
            fix=ways_out([entry.name], before="check the network connection and [models] mirror in the config, then ", pull_note=" again"),
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
                    fix=ways_out([entry.name], pull_note=" again to start over"),
                )
            declared = _content_range_full_size(resp.headers.get("Content-Range", ""))
            log.info("%s: resuming at %s", entry.name, _mb(offset))
            _receive(entry, resp, part, offset, progress, url)
        elif resp.status_code == 200:
            if offset:
                log.info("%s: %s ignored the resume request; starting over", entry.name, _host(url))
                offset = 0
            length = resp.headers.get("Content-Length", "")
            declared = int(length) if length.isdigit() else None
            _receive(entry, resp, part, 0, progress, url)
        else:
            if resp.status_code == 416:
                part.unlink(missing_ok=True)  # our .part does not fit the server's file
            raise ModelError(
                f"{entry.name}: download failed: HTTP {resp.status_code} {resp.reason or ''} from {url}".rstrip(),
                fix=ways_out([entry.name], before="check [models] mirror in the config (without one, the file may have moved upstream: see models/README.md), then ", pull_note=" again"),
            )

    got = part.stat().st_size
    if expected_size is not None and got < expected_size:
        raise ModelError(
            f"{entry.name}: download ended early at {_mb(got)} of {_mb(expected_size)} from {_host(url)}",
            fix=ways_out([entry.name], pull_note=" again to resume"),
        )
    size_proven = got == expected_size or got == declared
    sha = sha256_file(part)
    wrong_size = (expected_size is not None and got != expected_size) or (declared is not None and got != declared)
    if wrong_size or (expected_sha and sha != expected_sha):
        part.unlink()
        if wrong_size:
            what = f"{got:,} bytes, expected {expected_size or declared:,}"
        else:
            what = f"SHA-256 {sha[:12]}…, expected {expected_sha[:12]}…"
            if not size_proven:
                what += f"; {_host(url)} sent {got:,} bytes without saying how many to expect: probably cut off"
        source = "the manifest" if entry.sha256 or wrong_size else f"the hash recorded in {state_path}"
        raise ModelError(
            f"{entry.name}: the file from {url} does not match {source} ({what}); it was deleted",
            fix=ways_out([entry.name], pull_note=" again (if it repeats, the server or [models] mirror serves a different file)"),
        )
    crc32 = _prove_unpinned(entry, part, got, size_proven, url, crc32_url, timeout_s) if not expected_sha else ""
    fsync(part)
    os.replace(part, target)
    return sha, crc32


CRC32_RE = re.compile(r"^[0-9a-f]{8}$")


def published_crc32(url: str, timeout_s: float) -> str | None:
    """The CRC32 published at `url` (8 hex digits, FaceFusion's `.hash`), or None when it cannot be
    had (unreachable, an HTTP error, not a CRC32): the reason is logged."""
    import requests

    try:
        resp = requests.get(url, headers={"Accept-Encoding": "identity", "User-Agent": "vcamd"}, timeout=(10.0, timeout_s))
        with resp:
            if resp.status_code != 200:
                log.warning("no published CRC32 from %s (HTTP %d)", url, resp.status_code)
                return None
            text = resp.content[:64].decode("ascii", "replace").strip().lower()
    except requests.RequestException as exc:
        log.warning("no published CRC32 from %s (%s)", url, _reason(exc))
        return None
    if not CRC32_RE.match(text):
        log.warning("%s is not a CRC32 (8 hex digits); not checked against it", url)
        return None
    return text


def _check_crc32(entry: ModelEntry, part: Path, crc32_url: str, timeout_s: float) -> str:
    """A download with no SHA-256 to check, against the CRC32 its publisher gives: a mismatch
    deletes it. No CRC32 to be had: said, and the other proofs (size, the role's load) decide.
    Returns the CRC32 matched, or ""."""
    published = published_crc32(crc32_url, timeout_s)
    if published is None:
        log.warning("%s: not checked against its published CRC32; checked by its size and by loading it", entry.name)
        return ""
    got = crc32_file(part)
    if got != published:
        part.unlink()
        raise ModelError(
            f"{entry.name}: the file's CRC32 is {got}, but {crc32_url} publishes {published}; the download was deleted",
            fix=ways_out([entry.name], pull_note=" again (if it repeats, the server or [models] mirror serves a different file)"),
        )
    return got


def _prove_unpinned(entry: ModelEntry, part: Path, got: int, size_proven: bool, url: str, crc32_url: str, timeout_s: float) -> str:
    """No SHA-256 to check: the byte count must be vouched for, the CRC32 match the published one
    (where there is one: `crc32_url`) and the file load as a model of its role; otherwise the
    download is deleted (nothing pinned, nothing installed). Returns the CRC32 matched, or ""."""
    if not size_proven:
        part.unlink()
        raise ModelError(
            f"{entry.name}: {_host(url)} sent {got:,} bytes without a Content-Length, and the manifest publishes "
            "neither the exact size nor the SHA-256, so a cut-off download cannot be told from a whole one; "
            "nothing was installed",
            fix=ways_out([entry.name], before="remove or change [models] mirror for a server that sends Content-Length, then "),
        )
    crc32 = _check_crc32(entry, part, crc32_url, timeout_s) if crc32_url else ""
    if entry.extract:
        return crc32  # a pack: each member is checked (CRC, size, role) as it is extracted
    try:
        check_signature(part, entry.role, family=entry.name)  # its file name is a `.part`: the family by the model's name
    except ModelError as err:
        part.unlink()
        raise ModelError(
            f"{entry.name}: the {got:,} bytes from {url} are not a usable {entry.role} model ({err.message}); nothing was installed",
            fix=ways_out([entry.name], pull_note=" again (if it repeats, the server or [models] mirror serves a broken file)"),
        ) from None
    return crc32


def _receive(entry: ModelEntry, resp: Any, part: Path, offset: int, progress: bool, url: str) -> None:
    """Append the response body to `part`; on a dropped or short body keep `part` for resume."""
    import requests
    import urllib3

    length = resp.headers.get("Content-Length")
    total = offset + int(length) if length and length.isdigit() else entry.size
    received = 0
    out = open_for_write(part, append=bool(offset))
    try:
        with progress_bar(entry.name, total, offset, progress) as advance:
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
            fix=ways_out([entry.name], pull_note=" again to resume"),
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
            fix=ways_out([entry.name], pull_note=" again to resume"),
        )


def check_mirror(mirror: str) -> str:
    if not mirror:
        return ""
    parts = urlsplit(mirror)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment or ".." in parts.path.split("/"):
        raise ModelError(
            f"[models] mirror = {mirror!r} is not a usable base URL",
            fix='set it to "" or to an http(s) URL such as "https://mirror.example.org"',
        )
    return mirror.rstrip("/")


def mirror_url(url: str, mirror: str) -> str:
    """`url` with its scheme and host replaced by `mirror` (a checked base URL) when one is set."""
    if not mirror:
        return url
    src, dst = urlsplit(url), urlsplit(mirror)
    return urlunsplit((dst.scheme, dst.netloc, dst.path.rstrip("/") + src.path, src.query, ""))


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

