"""The recent source faces the tray and the control page offer: a bad history file never breaks the
daemon, and the list is private to the user."""

from __future__ import annotations

import stat

from vcamd.tray import RecentFaces


def test_recent_faces_never_breaks_on_a_bad_history_file(tmp_path):
    photo = tmp_path / "face.png"
    photo.write_bytes(b"png")
    # The history path is a folder: reading gives an empty list, adding is skipped with a warning.
    blocked = tmp_path / "state" / "recent_faces.json"
    blocked.mkdir(parents=True)
    recent = RecentFaces(blocked)
    assert recent.list() == []
    recent.add(photo)  # must not raise: the recent-faces shortcut list must not stop the daemon
    # The state folder cannot be created (a file in its place).
    (tmp_path / "file").write_text("")
    recent = RecentFaces(tmp_path / "file" / "state" / "recent_faces.json")
    recent.add(photo)
    assert recent.list() == []


def test_recent_faces_file_is_private(tmp_path):
    # It lists which photos of which people the user swapped in: only the user may read it.
    photo = tmp_path / "face.png"
    photo.write_bytes(b"png")
    recent = RecentFaces(tmp_path / "state" / "recent_faces.json")
    recent.add(photo)
    assert recent.list() == [photo.resolve()]
    assert stat.S_IMODE((tmp_path / "state" / "recent_faces.json").stat().st_mode) == 0o600
