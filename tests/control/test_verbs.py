"""Every change the control API knows is one row of `protocol.VERBS`, calling a `Controllable` method."""

from __future__ import annotations

import pytest

from vcamd.common.quality import Level
from vcamd.control.protocol import VERBS, Command, Controllable, ProtocolError

ANSWERED_BY_THE_SERVER = {Command.status, Command.snapshot, Command.quit}


def test_every_command_is_a_verb_row_or_answered_by_the_server():
    assert set(VERBS) | ANSWERED_BY_THE_SERVER == set(Command)
    assert not set(VERBS) & ANSWERED_BY_THE_SERVER
    for command, verb in VERBS.items():
        assert callable(getattr(Controllable, verb.method, None)), f"{command}: Controllable has no {verb.method}"


def test_rows_turn_wire_args_into_call_args():
    assert VERBS[Command.on].call_args({}) == (True,) and VERBS[Command.off].call_args({}) == (False,)
    assert VERBS[Command.quality].call_args({"level": "low_res"}) == (Level.low_res,)
    assert VERBS[Command.quality].call_args({"level": "auto"}) == (None,)
    with pytest.raises(ProtocolError, match="quality needs"):
        VERBS[Command.quality].call_args({"level": 2})
    with pytest.raises(ProtocolError, match="relative"):
        VERBS[Command.set_face].call_args({"path": "face.png"})
    assert VERBS[Command.model].call_args({"role": "swapper", "name": "ghost_1_256"}) == ("swapper", "ghost_1_256")
    for bad in ({"role": "parser", "name": "x"}, {"role": "enhancer"}, {"role": "swapper", "name": ""}):
        with pytest.raises(ProtocolError, match="model needs"):
            VERBS[Command.model].call_args(bad)
