"""What a check returns (`CheckResult`: ✓ ok, ! warn, ✗ fail, with its fix) and the printed report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    ok = "ok"
    warn = "warn"
    fail = "fail"


MARKS = {Status.ok: "✓", Status.warn: "!", Status.fail: "✗"}
ASCII_MARKS = {Status.ok: "OK", Status.warn: "!!", Status.fail: "XX"}


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    status: Status
    detail: str
    fix: str = ""

    def line(self, marks: dict[Status, str] = MARKS) -> str:
        text = f"{marks[self.status]} {self.name}: {self.detail}"
        if self.fix and self.status is not Status.ok:
            text += f"\n    fix: {self.fix}"
        return text


def ok(name: str, detail: str) -> CheckResult:
    return CheckResult(name, Status.ok, detail)


def report(results: Sequence[CheckResult], encoding: str | None = None) -> str:
    """The printed report; ASCII marks when the console cannot print ✓/✗ (old Windows consoles)."""
    marks = MARKS
    try:
        "".join(MARKS.values()).encode(encoding or "utf-8")
    except (UnicodeEncodeError, LookupError):
        marks = ASCII_MARKS
    lines = [r.line(marks) for r in results]
    counts = {s: sum(1 for r in results if r.status is s) for s in Status}
    lines.append(f"\n{len(results)} checks: {counts[Status.ok]} ok, {counts[Status.warn]} warnings, {counts[Status.fail]} failed")
    return "\n".join(lines)


def exit_code(results: Sequence[CheckResult]) -> int:
    return 1 if any(r.status is Status.fail for r in results) else 0
