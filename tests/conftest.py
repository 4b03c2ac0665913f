"""Checks shared by every test: no thread a test started may outlive it, nor change the process's scheduling.

Video indexes are kept per test, written by the end of it. The training default keeps its calls in threads (see below).
"""

import os
import sys
import threading

import pytest

from parallel_loader._loader import placement
from parallel_loader.video._indexes import cache as video_index
from parallel_loader.video._indexes import writer as index_writer

# The training default (as_tf_dataset and Train with neither num_threads nor processes) decodes in worker
# processes. Tests of Train's and as_tf_dataset's own logic keep it in threads, as a user debugging in place
# does; tests/test_placement.py tests the default itself with this unset.
os.environ[placement.ENV] = "0"


def _fsspec_resolver_threads() -> set[threading.Thread]:
    """The threads of fsspec's event loop's default executor, which resolves host names.

    The loop lives as long as the process (see the remote guide), and so does
    its executor; it starts one more thread when lookups overlap.
    """
    asyn = sys.modules.get("fsspec.asyn")
    loop = asyn.loop[0] if asyn is not None else None
    executor = getattr(loop, "_default_executor", None)
    return set(getattr(executor, "_threads", ()))


@pytest.fixture(scope="session")
def fsspec_event_loop() -> None:
    """fsspec's event-loop thread and its resolver's executor live as long as the process: start them first.

    The remote tests ask for it, so each test's leaked-thread check finds them already there.
    """
    from fsspec.asyn import get_loop, sync

    loop = get_loop()
    sync(loop, loop.getaddrinfo, "127.0.0.1", 80)


@pytest.fixture(autouse=True)
def no_leaked_threads():
    """Fail a test that leaves a thread of its own running.

    Threads that native code (TensorFlow) runs Python in appear as dummy threads
    that never end; they are not ours and are ignored.
    """
    before = set(threading.enumerate())
    yield
    for thread in threading.enumerate():
        # A loader thread that ended after video_index_store's teardown may have handed the index writer a
        # record: the writer ends IDLE_S after its last one, as the guarantees page says. Give it that.
        if thread not in before and thread.name == "video-index-writer":
            thread.join(index_writer.IDLE_S + 2.0)
    lifelong = _fsspec_resolver_threads()
    leaked = [
        t
        for t in threading.enumerate()
        if t not in before and t.is_alive() and not isinstance(t, threading._DummyThread) and t not in lifelong
    ]
    assert not leaked, f"threads still alive after the test: {[t.name for t in leaked]}"


_POLICY = os.sched_getscheduler(0)  # this process's scheduling policy when the tests start


@pytest.fixture(autouse=True)
def scheduling_kept():
    """Fail a test (or a fixture it uses) that leaves the process's scheduling policy changed.

    SVT-AV1 run as root leaves its caller SCHED_FIFO at priority 99: a test process
    then starves everything else on the machine (``video_files`` puts it back).
    """
    yield
    assert os.sched_getscheduler(0) == _POLICY, "the test left this process's scheduling policy changed"


@pytest.fixture(autouse=True)
def video_index_store(tmp_path_factory, monkeypatch):
    """Each test keeps video indexes in a directory of its own, never the user's, and starts a fresh default cache.

    Each test ends with its caches' writes done and their writer threads ended, as a process's exit ends them.
    """
    directory = tmp_path_factory.mktemp("video_index")
    monkeypatch.setenv(video_index.ENVIRONMENT_VARIABLE, str(directory))
    monkeypatch.setattr(video_index, "_default", [None])
    yield directory
    index_writer.close_all()
