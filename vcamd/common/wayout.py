"""The two ways to get a model file, worded once: every model error's fix ends with them.

A machine behind a proxy (or without internet) cannot `vcamd models pull`; the user then copies
the files in by hand, and `vcamd models list` says for each missing file where it comes from and
where it goes. An error that names only one way strands half the users, so `vcamd models pull`,
`vcamd run`, `doctor`, `swap`, `faces` and the live daemon's status all take their fix from here.
Standard library only: the CLI's light commands and the daemon's status import it.
"""

from __future__ import annotations

from collections.abc import Iterable

BY_HAND = "`vcamd models list` says where each file comes from and where it goes"
"""What the by-hand way points at (`vcamd models list` prints address, size, SHA-256 and target)."""


def pull_command(names: Iterable[str] = ()) -> str:
    """`vcamd models pull NAME …` (no names: the models the config uses)."""
    listed = " ".join(dict.fromkeys(names))
    return f"vcamd models pull {listed}" if listed else "vcamd models pull"


def how_to_get(names: Iterable[str] = ()) -> str:
    """Both ways, short, for a fix that names the model to use ("set [models] parser to X (…)").

    >>> how_to_get(["gfpgan_1.4"])
    '`vcamd models pull gfpgan_1.4`, or by hand as `vcamd models list` says'
    """
    return f"`{pull_command(names)}`, or by hand as `vcamd models list` says"


def ways_out(names: Iterable[str] = (), *, files: int = 1, before: str = "", pull_note: str = "") -> str:
    """The fix for a model file that is missing, damaged or could not be downloaded: `before`
    (e.g. "check the network connection …, then "), then both ways — the pull (with `pull_note`,
    e.g. " again to resume") and the copy by hand.

    >>> ways_out(["buffalo_l"])
    'run `vcamd models pull buffalo_l`, or copy it in by hand: `vcamd models list` says where each file comes from and where it goes'
    """
    it = "them" if files > 1 else "it"
    return f"{before}run `{pull_command(names)}`{pull_note}, or copy {it} in by hand: {BY_HAND}"
