"""Local control API: the daemon's `ControlServer` and the `ControlClient` the CLI verbs, `vcamd panel` and
`doctor` use (the tray runs in the daemon's process and drives the engine directly).

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
