"""Checks shared by every test: no thread a test started may outlive it; video indexes kept per test."""

import threading

import pytest

from parallel_loader.video._indexes import cache as video_index


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


@pytest.fixture(autouse=True)
def video_index_store(tmp_path_factory, monkeypatch):
    """Each test keeps video indexes in a directory of its own, never the user's, and starts a fresh default cache."""
    directory = tmp_path_factory.mktemp("video_index")
    monkeypatch.setenv(video_index.ENVIRONMENT_VARIABLE, str(directory))
    monkeypatch.setattr(video_index, "_default", [None])
    return directory
