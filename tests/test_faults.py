"""Ctrl-C at any point, and the fault-injection campaign in short.

The deterministic tests raise ``KeyboardInterrupt`` from a trace function at each
line in turn (the way ``benchmarks/faults.py`` does at random), so every traced
line of a short run (the package's and ``threading.Condition``'s) is hit: the
waits, the wake-ups and the shutdown path included.
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
import weakref
from typing import Any

import pytest

from benchmarks import faults
from parallel_loader import DataLoader
from parallel_loader._core.interrupt_safe import new_lock, new_thread, notify_all, wait

from .helpers import Faulty, join_all


class Interrupt:
    """Raises KeyboardInterrupt at the ``at``-th line run in the watched code (see ``faults.LineTrap``)."""

    def __init__(self, at: int) -> None:
        self.trap = faults.LineTrap(at)

    def __enter__(self) -> faults.LineTrap:
        sys.settrace(self.trap)
        return self.trap

    def __exit__(self, *exc_info: object) -> None:
        sys.settrace(None)


def _waiter(cond: threading.Condition, lock: threading.RLock, woken: threading.Event) -> threading.Thread:
    """A thread waiting on ``cond`` until ``woken`` is set."""
    ready = threading.Event()

    def run() -> None:
        with lock:
            ready.set()
            while not woken.is_set():
                wait(cond, lock)

    thread = threading.Thread(target=run, name="waiter")
    thread.start()
    assert ready.wait(5)
    return thread


@pytest.mark.parametrize("at", range(1, 25))
def test_an_interrupted_wait_leaves_the_lock_held_and_no_wake_up_lost(at: int) -> None:
    """Whatever line of Condition.wait the interrupt hits, ``with lock`` exits cleanly and a notify still wakes."""
    lock = new_lock()
    cond = threading.Condition(lock)
    woken = threading.Event()
    other = None
    trap = faults.LineTrap(at)
    try:
        with pytest.raises(KeyboardInterrupt), lock:  # never "release unlocked lock"
            sys.settrace(trap)
            try:
                wait(cond, lock, timeout=0.05)
                sys.settrace(None)
                raise KeyboardInterrupt  # the wait had fewer lines than ``at``: end the same way
            finally:
                sys.settrace(None)
        assert not lock._is_owned()
        other = _waiter(cond, lock, woken)  # queued after anything the interrupted wait left behind
        with lock:
            woken.set()
            cond.notify()  # one notify: no waiter the interrupted wait left queued may take it
        other.join(5)
        assert not other.is_alive(), "the notify went to a waiter the interrupted wait left behind"
    finally:
        woken.set()
        with lock:
            cond.notify_all()
        join_all([other] if other is not None else [])


@pytest.mark.parametrize("at", range(1, 12))
def test_an_interrupted_notify_all_still_wakes_every_waiter(at: int) -> None:
    lock = new_lock()
    cond = threading.Condition(lock)
    woken = threading.Event()
    waiters = [_waiter(cond, lock, woken) for _ in range(3)]
    try:
        with lock:
            woken.set()
            with pytest.raises(KeyboardInterrupt), Interrupt(at):
                notify_all(cond)
                raise KeyboardInterrupt  # fewer lines than ``at``
        join_all(waiters, timeout=5)  # every one woke, though the first notify_all was cut short
    finally:
        woken.set()
        with lock:
            cond.notify_all()
        join_all(waiters)


def test_freeing_a_closed_loader_runs_no_python_code_a_ctrl_c_could_be_lost_in() -> None:
    """A closed loader's threads, freed in the main thread (by the collector, at any later allocation), run no Python.

    CPython raises a KeyboardInterrupt that lands in Python code run while an
    object is freed (a weakref callback, a ``__del__``) nowhere: it prints
    "Exception ignored" and the Ctrl-C is lost. ``threading`` keeps every
    ``Thread`` in a ``WeakSet`` whose callback is such code, and a loader's
    threads sit in reference cycles, so the collector freed them in the middle
    of a later run (seed 464 of the campaign lost its SIGINT about once in 200).
    """
    gc.collect()
    loader = DataLoader(Faulty(6), num_threads=3, call_timeout=5.0)  # the watchdog's thread too
    with loader:
        assert sorted(loader) == list(range(6))
    threads = [weakref.ref(t) for t in loader._pool.threads]
    threads.append(weakref.ref(loader._pool._watchdog))
    ran: list[str] = []

    def trace(frame: Any, event: str, arg: Any) -> None:
        ran.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_qualname}")

    callbacks, gc.callbacks[:] = gc.callbacks[:], []
    gc.disable()
    try:
        sys.settrace(trace)
        try:
            del loader
            gc.collect()
        finally:
            sys.settrace(None)
    finally:
        gc.enable()
        gc.callbacks[:] = callbacks
    assert not any(ref() for ref in threads), "the loader's threads must have been freed"
    assert not ran, "Python code ran as the loader was freed; a Ctrl-C there would have been lost"


@pytest.mark.parametrize("at", range(1, 20))
def test_a_thread_made_as_ctrl_c_comes_is_not_left_in_threadings_weak_set(at: int) -> None:
    """Ctrl-C at each line of ``new_thread`` leaves no thread whose freeing runs Python code (see above)."""
    name, handler = f"made-{at}", signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt) as interrupted, Interrupt(at):  # its traceback keeps the thread alive
        new_thread(lambda: None, name)
        raise KeyboardInterrupt  # fewer lines than ``at``
    assert not [t for t in threading._dangling if t.name == name]
    del interrupted
    assert signal.getsignal(signal.SIGINT) is handler, "Ctrl-C held back for ever"


def test_ctrl_c_at_every_line_of_a_short_run_leaves_no_thread_and_raises_keyboard_interrupt() -> None:
    """The sweep the campaign makes at random, line by line: a loader over two short epochs, ordered and not."""
    interrupts = faults.Interrupts()
    failures = []
    try:
        for ordered in (False, True):
            at = 1
            while True:
                cfg = faults.Config(
                    seed=at, fault="trace", protocol="get_batch", threads=2, max_len=2, ordered=ordered,
                    shuffle=True, overlap=True, length=4, epochs=2, line=at,
                )  # fmt: skip
                outcome = faults.run_one(cfg, interrupts)
                if not outcome.ok:  # KeyboardInterrupt must come out whenever the trap raised it
                    failures.append(faults._failure(outcome))
                if not outcome.where:  # the run ended before line ``at``: every line was hit
                    break
                at += 1
            assert at > 50, "the sweep should cover the whole run"
    finally:
        interrupts.restore()
    assert not failures


def test_a_short_campaign_finds_no_hang_leak_wrong_exception_or_lost_index() -> None:
    """CI's version of ``python -m benchmarks.faults --runs 1000`` (each fault about 40 times)."""
    outcomes = faults.campaign(runs=500, seed=20_000, run_limit=50.0, progress=False)
    failures = [faults._failure(o) for o in outcomes if not o.ok]
    assert not failures
    assert {o.config.fault for o in outcomes} == set(faults.FAULTS)
    summary = faults.summarize(outcomes)["total"]
    assert summary["ended_with_error"] > 100 and summary["epochs"] > 300, "the faults really happened"
