"""The tray icon: which backend the daemon would use here, and whether it shows a menu."""

from __future__ import annotations

from vcamd.doctor.platform import Platform
from vcamd.doctor.results import CheckResult, Status, ok


def check_tray(platform: Platform | None = None) -> CheckResult:
    """Which tray backend the daemon would use here and whether it shows a menu; ✓ only with a menu."""
    from vcamd.tray.backends import diagnose_tray

    platform = platform or Platform.here()
    diagnosis = diagnose_tray(platform.environ, platform.system)
    if not diagnosis.available:
        return CheckResult("tray icon", Status.warn, f"not available: {diagnosis.detail}",
                           diagnosis.fix or "use `vcamd run --no-tray` (and `vcamd on/off/status`)")
    if not diagnosis.has_menu:
        return CheckResult("tray icon", Status.warn, diagnosis.detail, diagnosis.fix)
    return ok("tray icon", diagnosis.detail)
