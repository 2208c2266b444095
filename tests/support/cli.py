"""The `vcamd` command as a user runs it: a subprocess, and what a refusal must look like."""

from __future__ import annotations

import subprocess
import sys


def run_vcamd(*args: object, env: dict[str, str] | None = None, timeout: float = 60,
              user: int | None = None) -> subprocess.CompletedProcess:
    """`python -m vcamd ARGS` (each argument str()-ed), its output captured as text; `user`: run as
    that uid (and gid, no other groups; needs root — see `support.users.can_run_as`)."""
    return subprocess.run([*as_user(user), sys.executable, "-m", "vcamd", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def as_user(uid: int | None) -> list[str]:
    """The command prefix that runs a command as `uid` (util-linux setpriv), or nothing for None."""
    if uid is None:
        return []
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def one_clear_line(proc: subprocess.CompletedProcess, *names: str) -> None:
    """Refused as a user error: exit 2, no traceback, one `vcamd: error:` line naming each of `names`."""
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("vcamd: error:")]
    assert len(errors) == 1, proc.stderr
    for name in names:
        assert name in errors[0], errors[0]
