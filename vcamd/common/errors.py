"""User-facing errors.

Every problem a user can cause (bad file, missing model, bad config value) is raised as a
`VcamdError` whose message names the thing and the fix. The CLI prints it as one line and exits
non-zero; it never shows a traceback for these.
"""

from __future__ import annotations


class VcamdError(Exception):
    """A problem the user can fix. `str(err)` is a complete one-line explanation."""

    exit_code = 2

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        super().__init__(self.__str__())

    def __str__(self) -> str:
        return f"{self.message} — {self.fix}" if self.fix else self.message


class ConfigError(VcamdError):
    """The configuration file is unreadable or has invalid values.

    `problems` holds one line per problem (key path, bad value, what was expected).
    """

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: " + "; ".join(problems))


class ModelError(VcamdError):
    """A model file is missing, corrupt, or does not have the expected signature."""


class FaceError(VcamdError):
    """A face image is unreadable or contains no usable face."""
