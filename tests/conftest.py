"""Checks shared by every test: no thread a test started may outlive it."""

import threading

import pytest


@pytest.fixture(autouse=True)
def no_leaked_threads():
    """Fail a test that leaves a thread of its own running.

    Threads that native code (TensorFlow) runs Python in appear as dummy threads
    that never end; they are not ours and are ignored.
    """
    before = set(threading.enumerate())
    yield
    leaked = [
        t
        for t in threading.enumerate()
        if t not in before and t.is_alive() and not isinstance(t, threading._DummyThread)
    ]
    assert not leaked, f"threads still alive after the test: {[t.name for t in leaked]}"
