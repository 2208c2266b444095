"""vcamd.common.signalrelay: a signal caught by any thread is acted on while the main thread waits
in a C call with no timeout (as it does in the tray's event loop), once per signal, and the relay
leaves the handlers and wakeup fd as it found them."""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from support.waiting import WAIT_S

from vcamd.common.signalrelay import relayed

pytestmark = pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs POSIX signals")


@pytest.fixture(autouse=True)
def _on_the_main_thread() -> None:
    """`relayed` sets handlers and the wakeup fd, which only the main thread may do."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are relayed from the main thread only")


@contextmanager
def a_bystander_thread() -> Iterator[threading.Thread]:
    """A thread that does nothing but exist: the kernel may hand a process's signal to it."""
    done = threading.Event()
    thread = threading.Thread(target=done.wait, name="bystander", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        done.set()
        thread.join()


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    os.close(read_fd)
    os.close(write_fd)


def _main_thread_waits_for(read_fd: int) -> bool:
    """The main thread blocks in select() — a C call — until `read_fd` is readable (or the bound)."""
    readable, _, _ = select.select([read_fd], [], [], WAIT_S)
    return bool(readable)


def test_a_signal_caught_by_another_thread_is_acted_on_while_the_main_thread_waits(pipe) -> None:
    read_fd, write_fd = pipe
    acted_in: list[str] = []

    def action() -> None:
        acted_in.append(threading.current_thread().name)
        os.write(write_fd, b"x")  # ends the main thread's wait

    with a_bystander_thread() as bystander, relayed({signal.SIGUSR1: action}):
        signal.pthread_kill(bystander.ident, signal.SIGUSR1)
        # With a plain Python handler the action would wait for the main thread's select() to end
        # on its own: this wait would time out.
        assert _main_thread_waits_for(read_fd), "the signal's action did not run while the main thread waited"
    assert acted_in == ["signal-relay"]  # once, on the relay's thread


def test_each_signal_is_acted_on_once_and_an_inner_relay_passes_on_the_outer_ones(pipe) -> None:
    read_fd, write_fd = pipe
    acted: list[str] = []

    def record(name: str):
        def action() -> None:
            acted.append(name)
            os.write(write_fd, b"x")
        return action

    with a_bystander_thread() as bystander, relayed({signal.SIGUSR1: record("outer")}):
        with relayed({signal.SIGUSR2: record("inner")}):
            signal.pthread_kill(bystander.ident, signal.SIGUSR2)
            assert _main_thread_waits_for(read_fd)
            os.read(read_fd, 1)
            signal.pthread_kill(bystander.ident, signal.SIGUSR1)  # the outer relay's signal
            assert _main_thread_waits_for(read_fd)
            os.read(read_fd, 1)
            signal.raise_signal(signal.SIGUSR2)  # caught by the main thread itself: still once
            assert _main_thread_waits_for(read_fd)
            os.read(read_fd, 1)
        assert acted == ["inner", "outer", "inner"]


def test_leaving_restores_the_handlers_and_wakeup_fd_before_it() -> None:
    before = signal.getsignal(signal.SIGUSR1)
    with relayed({signal.SIGUSR1: lambda: None}):
        assert signal.getsignal(signal.SIGUSR1) is not before
    assert signal.getsignal(signal.SIGUSR1) is before
    assert signal.set_wakeup_fd(-1) == -1  # none was set before, none is left


def test_a_failing_action_is_logged_and_the_relay_goes_on(pipe, caplog) -> None:
    read_fd, write_fd = pipe
    calls: list[int] = []

    def flaky() -> None:
        calls.append(1)
        os.write(write_fd, b"x")
        if len(calls) == 1:
            raise RuntimeError("boom")

    with relayed({signal.SIGUSR1: flaky}):
        for _ in range(2):
            signal.raise_signal(signal.SIGUSR1)
            assert _main_thread_waits_for(read_fd)
            os.read(read_fd, 1)
    assert len(calls) == 2
    assert "acting on signal SIGUSR1 failed" in caplog.text
