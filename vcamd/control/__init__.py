"""Local control API: the daemon's `ControlServer` and the `ControlClient` the CLI and tray use.

See `vcamd.control.protocol` for the wire format and where the endpoint lives.
"""

from vcamd.control.protocol import (
    Command,
    ControlError,
    Controllable,
    DaemonNotRunning,
    runtime_dir,
)

__all__ = ["Command", "ControlError", "Controllable", "DaemonNotRunning", "runtime_dir"]
