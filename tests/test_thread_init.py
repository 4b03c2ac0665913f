"""thread_init: per-thread set-up, run once in each loader thread before its first call."""

import threading
import traceback

import pytest

from parallel_loader import DataLoader, LoaderClosed, Train, YieldFunction
from tests.helpers import join_all

WAIT = 5  # seconds: the bound on every wait in these tests; a hang fails, it does not stall


class PerThread(YieldFunction):
    """Records, for each call, the thread making it and the number its ``init`` left in that thread.

    ``init`` is the ``thread_init``: it stores the thread's number in a ``threading.local``,
    which only that thread's later calls can see. The first ``meet`` calls wait at a
    barrier, so that they are made by ``meet`` different threads at once.
    """

    def __init__(self, length, meet=0):
        self.length = length
        self.local = threading.local()
        self.lock = threading.Lock()
        self.inits = []  # (number, thread name), in the order called
        self.calls = []  # (index, thread name, the number init left in that thread or None)
        self.barrier = threading.Barrier(meet) if meet else None

    def __len__(self):
        return self.length

    def init(self, number):
        with self.lock:
            assert not hasattr(self.local, "number"), "thread_init called twice in one thread"
            self.local.number = number
            self.inits.append((number, threading.current_thread().name))

    def __call__(self, index):
        with self.lock:
            self.calls.append((index, threading.current_thread().name, getattr(self.local, "number", None)))
        if self.barrier is not None and index < self.barrier.parties:
            self.barrier.wait(WAIT)
        return index


def check_thread_init(data, name, num_threads):
    """Each of the loader's threads ran ``init`` once with its own number, and made its calls after it."""
    assert sorted(data.inits) == [(n, f"{name}-{n}") for n in range(num_threads)]
    assert data.calls and all(thread == f"{name}-{number}" for _, thread, number in data.calls)


@pytest.mark.parametrize("num_threads", [1, 3])
def test_each_thread_runs_thread_init_once_before_its_first_call(num_threads):
    data = PerThread(30, meet=num_threads)
    with DataLoader(data, num_threads=num_threads, name="init", thread_init=data.init) as loader:
        for _ in range(2):  # the threads, and their set-up, last from one epoch to the next
            assert sorted(loader) == list(range(30))
        threads = list(loader.threads)
    join_all(threads)
    assert len(threads) == num_threads
    check_thread_init(data, "init", num_threads)
    # The first calls met at the barrier: every thread made batches, each in the state its init set.
    assert {thread for index, thread, _ in data.calls if index < num_threads} == {t.name for t in threads}


class Refused(Exception):
    pass


class FailingInit(YieldFunction):
    """Thread ``failing``'s ``init`` raises; every call waits for ``release``, so no batch is made before it."""

    def __init__(self, length, failing):
        self.length = length
        self.failing = failing
        self.release = threading.Event()
        self.called = threading.Event()

    def __len__(self):
        return self.length

    def init(self, number):
        if number == self.failing:
            raise Refused(f"no connection for thread {number}")

    def __call__(self, index):
        self.called.set()
        assert self.release.wait(WAIT), "a call was not released"
        return index


@pytest.mark.parametrize(("num_threads", "failing"), [(1, 0), (3, 2)])
def test_an_exception_in_thread_init_is_raised_in_the_consumer(num_threads, failing):
    data = FailingInit(10, failing)
    loader = DataLoader(data, num_threads=num_threads, name="init", thread_init=data.init)
    try:
        with pytest.raises(Refused, match=f"no connection for thread {failing}") as caught:
            next(iter(loader))  # raised before any batch: every call waits for release
        assert f"raised by thread_init in loader thread init-{failing}" in caught.value.__notes__
        # The worker's traceback comes with it: it shows where thread_init raised.
        assert "init" in [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
        assert loader.closed
        with pytest.raises(LoaderClosed, match="a loader thread failed") as again:
            next(iter(loader))
        assert again.value.__cause__ is caught.value
    finally:
        data.release.set()  # the other threads' calls may end now
        loader.close(WAIT)
    join_all(list(loader.threads))
    assert len(loader.threads) == num_threads


def test_train_passes_thread_init_to_every_loader():
    train_data, val_data = PerThread(12), PerThread(5)
    inits = []

    def init(number):
        # Train passes one function to both loaders: the thread's name tells which one it serves.
        name = threading.current_thread().name
        inits.append(name)
        (train_data if name.startswith("train-") else val_data).init(number)

    train = Train(
        lambda batch: None, train_data, val_data, num_threads=2, eval_num_threads=1, val_task=lambda batch: None,
        thread_init=init,
    )  # fmt: skip
    (stats,) = train.run(1, progress=False)
    assert stats.batches == 12
    assert sorted(inits) == ["train-loader-0", "train-loader-1", "val-loader-0"]
    check_thread_init(train_data, "train-loader", 2)
    check_thread_init(val_data, "val-loader", 1)


def test_train_raises_what_thread_init_raised():
    data = FailingInit(6, failing=0)
    train = Train(lambda batch: None, data, num_threads=1, thread_init=data.init)
    try:
        with pytest.raises(Refused, match="no connection for thread 0") as caught:
            train.run(1, progress=False)
    finally:
        data.release.set()
    assert "raised by thread_init in loader thread train-loader-0" in caught.value.__notes__
    assert not data.called.is_set()  # the only thread failed before its first call


@pytest.mark.parametrize("thread_init", [42, "setup", object()])
def test_a_thread_init_that_is_not_callable_is_refused(thread_init):
    with pytest.raises(TypeError, match="thread_init must be callable"):
        DataLoader(PerThread(4), thread_init=thread_init)
    with pytest.raises(TypeError, match="thread_init must be callable"):
        Train(lambda batch: None, PerThread(4), thread_init=thread_init)
