"""DataLoader: epochs, order, bounded memory, failures and shutdown."""

import threading
import time
import traceback

import numpy as np
import pytest

from parallel_loader import DataLoader, LoaderClosed, YieldFunction
from tests.helpers import join_all, run_in_thread

WAIT = 5  # seconds: the bound on every wait in these tests; a hang fails, it does not stall


class Indices(YieldFunction):
    """Returns its index; records the thread that made each one and the epochs that ended."""

    def __init__(self, n):
        self.n = n
        self.threads = set()
        self.ended = []

    def __len__(self):
        return self.n

    def __call__(self, index):
        self.threads.add(threading.current_thread().name)
        return index

    def on_epoch_end(self, epoch):
        self.ended.append((epoch, threading.current_thread().name))


@pytest.mark.parametrize(("threads", "max_len"), [(1, 1), (2, 3), (5, 1), (5, 3)])
@pytest.mark.parametrize("ordered", [False, True])
def test_an_epoch_gives_every_index_exactly_once(threads, max_len, ordered):
    with DataLoader(Indices(100), num_threads=threads, max_len=max_len, ordered=ordered) as loader:
        got = list(loader)
    assert sorted(got) == list(range(100))
    if ordered:
        assert got == list(range(100))


def test_threads_start_once_and_are_reused_across_epochs():
    fn = Indices(30)
    with DataLoader(fn, num_threads=3) as loader:
        assert loader.threads == ()
        assert sorted(loader) == list(range(30))
        first = loader.threads
        assert sorted(loader) == list(range(30))
        assert loader.threads == first and len(first) == 3
        assert loader.epoch == 1
    assert fn.threads <= {t.name for t in first}
    assert all(not t.is_alive() for t in first)


def test_on_epoch_end_runs_in_the_consumer_after_each_epoch():
    fn = Indices(5)
    with DataLoader(fn, num_threads=2) as loader:
        for epoch in range(3):
            assert len(list(loader)) == 5
            assert fn.ended[-1] == (epoch, threading.current_thread().name)
    assert [e for e, _ in fn.ended] == [0, 1, 2]


def test_shuffle_is_a_new_permutation_each_epoch_and_reproducible_with_a_seed():
    def orders(seed):
        with DataLoader(Indices(50), num_threads=3, shuffle=True, seed=seed, ordered=True) as loader:
            return [list(loader) for _ in range(3)]

    first, again, other = orders(7), orders(7), orders(8)
    assert all(sorted(o) == list(range(50)) for o in first)
    assert first == again
    assert first[0] != first[1] != first[2]
    assert first != other


def test_shuffle_without_a_seed_still_differs_per_epoch():
    with DataLoader(Indices(50), num_threads=2, shuffle=True, ordered=True) as loader:
        a, b = list(loader), list(loader)
    assert sorted(a) == sorted(b) == list(range(50)) and a != b


def test_first_epoch_continues_a_shuffled_sequence():
    with DataLoader(Indices(20), shuffle=True, seed=3, ordered=True) as loader:
        list(loader)
        second = list(loader)
    with DataLoader(Indices(20), shuffle=True, seed=3, ordered=True, first_epoch=1) as loader:
        assert list(loader) == second
        assert loader.epoch == 1


class HoldFirst(YieldFunction):
    """Index 0 is made only once ``release`` is set: it finishes after the others."""

    def __init__(self, n):
        self.n = n
        self.release = threading.Event()
        self.entered = threading.Event()

    def __len__(self):
        return self.n

    def __call__(self, index):
        if index == 0:
            self.entered.set()
            assert self.release.wait(WAIT), "index 0 was never released"
        return index


def test_unordered_delivers_each_batch_as_soon_as_it_is_ready():
    fn = HoldFirst(6)
    got = []
    with DataLoader(fn, num_threads=2, max_len=8) as loader:
        for batch in loader:
            got.append(batch)
            fn.release.set()  # index 0 can only arrive after another batch was delivered
    assert got[0] != 0 and sorted(got) == list(range(6))


def test_ordered_delivers_in_sequence_when_threads_finish_out_of_order():
    class LastFirst(YieldFunction):
        def __init__(self):
            self.others_done = threading.Semaphore(0)

        def __len__(self):
            return 6

        def __call__(self, index):
            if index == 0:  # finishes only after every other index was made
                for _ in range(5):
                    assert self.others_done.acquire(timeout=WAIT)
            else:
                self.others_done.release()
            return index

    with DataLoader(LastFirst(), num_threads=2, max_len=8, ordered=True) as loader:
        assert list(loader) == list(range(6))


class Counted(YieldFunction):
    """Counts batches made but not yet consumed, and the most there ever were."""

    def __init__(self, n, slow_index=None):
        self.n = n
        self.slow_index = slow_index
        self.lock = threading.Lock()
        self.alive = 0
        self.peak = 0
        self.slow_done = threading.Event()

    def __len__(self):
        return self.n

    def __call__(self, index):
        if index == self.slow_index:
            self.slow_done.wait(0.05)  # let the others run ahead of it
        with self.lock:
            self.alive += 1
            self.peak = max(self.peak, self.alive)
        return index

    def consumed(self):
        with self.lock:
            self.alive -= 1


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("ordered", [False, True])
def test_memory_is_bounded_by_max_len_plus_threads(ordered, overlap):
    max_len, threads = 3, 4
    fn = Counted(200, slow_index=0 if ordered else None)
    with DataLoader(fn, num_threads=threads, max_len=max_len, ordered=ordered, overlap_epochs=overlap) as loader:
        for _ in range(2):
            for i, _ in enumerate(loader):
                if i % 10 == 0:  # a slow consumer now and then lets the threads fill the queue
                    threading.Event().wait(0.002)
                fn.consumed()
    # + 1: the batch the consumer holds while the threads make the next ones; with
    # overlapping epochs, up to max_len batches of the next epoch are made ahead.
    assert fn.peak <= max_len + threads + 1 + (max_len if overlap else 0)
    assert fn.alive <= (max_len if overlap else 0)  # made ahead for a third epoch nobody asked for


def wait_for(condition, what):
    """Wait, boundedly, until ``condition()`` holds."""
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


class CountsCalls(YieldFunction):
    def __init__(self, n):
        self.n = n
        self.calls = 0
        self.lock = threading.Lock()

    def __len__(self):
        return self.n

    def __call__(self, index):
        with self.lock:
            self.calls += 1
        return index


def test_close_during_an_epoch_stops_threads_blocked_on_a_full_queue():
    fn = CountsCalls(1000)
    loader = DataLoader(fn, num_threads=3, max_len=2)
    batches = iter(loader)
    next(batches)
    # 1 taken + 2 queued + 1 held by each of the 3 threads, blocked on the full queue
    wait_for(lambda: fn.calls == 6, "every thread to block on the full queue")
    loader.close()
    assert not any(t.is_alive() for t in loader.threads)
    assert fn.calls == 6, "no work is taken after close()"
    with pytest.raises(LoaderClosed):  # after what was queued
        for _ in batches:
            pass


def test_breaking_out_then_closing_leaves_no_thread():
    with DataLoader(Indices(1000), num_threads=4, max_len=2) as loader:
        for _ in loader:
            break
    assert loader.threads and not any(t.is_alive() for t in loader.threads)


def test_an_epoch_after_an_abandoned_one_is_complete_and_clean():
    with DataLoader(Indices(200), num_threads=3, max_len=2, ordered=True) as loader:
        for i, _ in enumerate(loader):
            if i == 5:
                break
        assert list(loader) == list(range(200))
        assert sorted(loader) == list(range(200))


def test_zero_batches_per_epoch_is_an_empty_epoch():
    fn = Indices(0)
    with DataLoader(fn, num_threads=2) as loader:
        assert list(loader) == []
    assert [e for e, _ in fn.ended] == [0]


def test_none_is_a_batch_like_any_other():
    class Nones(YieldFunction):
        def __len__(self):
            return 4

        def __call__(self, index):
            return None

    with DataLoader(Nones(), num_threads=2) as loader:
        assert list(loader) == [None] * 4


class FailsAt(YieldFunction):
    def __init__(self, n, bad):
        self.n = n
        self.bad = bad

    def __len__(self):
        return self.n

    def __call__(self, index):
        if index == self.bad:
            raise KeyError(f"no sample {index}")
        return index


def test_a_worker_exception_reaches_the_consumer_with_its_traceback():
    loader = DataLoader(FailsAt(50, bad=7), num_threads=3, max_len=2, ordered=True)
    got = []
    with pytest.raises(KeyError, match="no sample 7") as info, loader:
        for batch in loader:
            got.append(batch)
    # raised at the next dequeue after the failure: some earlier batches may be left undelivered
    assert got == list(range(len(got))) and len(got) <= 7
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "__call__" in frames, "the worker's frames are kept in the traceback"
    assert any("index 7" in note for note in info.value.__notes__)
    assert loader.closed
    assert not any(t.is_alive() for t in loader.threads)
    with pytest.raises(LoaderClosed, match="failed"):
        list(loader)


def test_stop_iteration_from_an_indexed_yield_function_is_an_error():
    class Stops(YieldFunction):
        def __len__(self):
            return 3

        def __call__(self, index):
            raise StopIteration

    with pytest.raises(RuntimeError, match="StopIteration for index"), DataLoader(Stops(), num_threads=2) as loader:
        list(loader)


def counter_stream(limit=None):
    """A thread-safe stream of 0, 1, 2, ...; ``made`` holds what it gave out."""
    lock = threading.Lock()
    made = []

    def stream():
        with lock:
            if len(made) == limit:
                raise StopIteration
            made.append(len(made))
            return made[-1]

    return stream, made


def test_a_plain_callable_is_a_stream_ended_by_stop_iteration():
    stream, _ = counter_stream(limit=40)
    with DataLoader(stream, num_threads=3) as loader:
        assert sorted(loader) == list(range(40))
        with pytest.raises(TypeError, match="no length"):
            len(loader)


def test_a_stream_with_batches_per_epoch_loses_nothing_between_epochs():
    stream, made = counter_stream()
    with DataLoader(stream, num_threads=4, max_len=8, batches_per_epoch=10) as loader:
        epochs = [sorted(loader) for _ in range(3)]
    assert sorted(b for epoch in epochs for b in epoch) == list(range(30))
    assert made == list(range(30)), "exactly batches_per_epoch calls per epoch"


def test_a_stream_ending_inside_an_epoch_of_batches_per_epoch():
    stream, _ = counter_stream(limit=15)
    with DataLoader(stream, num_threads=3, batches_per_epoch=10) as loader:
        assert sorted(loader) == list(range(10))
        assert sorted(loader) == list(range(10, 15))


def test_an_endless_stream_stops_when_the_consumer_breaks_and_closes():
    with DataLoader(lambda: "batch", num_threads=3, max_len=2) as loader:
        got = [b for _, b in zip(range(10), loader, strict=False)]
    assert got == ["batch"] * 10
    assert not any(t.is_alive() for t in loader.threads)


def test_on_epoch_begin_runs_in_the_consumer_before_any_call_of_the_epoch():
    class Begins(YieldFunction):
        def __init__(self):
            self.epoch = None
            self.log = []

        def __len__(self):
            return 6

        def on_epoch_begin(self, epoch):
            self.log.append(("begin", epoch, threading.current_thread().name))
            self.epoch = epoch

        def __call__(self, index):
            return self.epoch  # the calls see the epoch set before they started

    fn = Begins()
    me = threading.current_thread().name
    with DataLoader(fn, num_threads=3, first_epoch=4) as loader:
        assert list(loader) == [4] * 6
        for _ in loader:
            break  # an abandoned epoch began too
        assert list(loader) == [6] * 6
    assert fn.log == [("begin", 4, me), ("begin", 5, me), ("begin", 6, me)]


def test_an_error_in_on_epoch_begin_leaves_the_loader_usable():
    class FailsOnce(Indices):
        def on_epoch_begin(self, epoch):
            if epoch == 0:
                raise ValueError("not ready")

    with DataLoader(FailsOnce(5), num_threads=2) as loader:
        with pytest.raises(ValueError, match="not ready"):
            list(loader)
        assert sorted(loader) == list(range(5))


def test_on_epoch_end_is_skipped_for_an_abandoned_epoch():
    fn = Indices(10)
    with DataLoader(fn, num_threads=2) as loader:
        for _ in loader:
            break
        assert fn.ended == []
        list(loader)
    assert [e for e, _ in fn.ended] == [1]


def test_on_epoch_end_waits_for_calls_left_over_from_an_abandoned_epoch():
    class Slow(YieldFunction):
        def __init__(self):
            self.running = 0
            self.lock = threading.Lock()
            self.entered = threading.Event()
            self.seen_at_end = []

        def __len__(self):
            return 4

        def __call__(self, index):
            with self.lock:
                self.running += 1
            self.entered.set()
            time.sleep(0.05)  # long enough to still run when the next epoch ends
            with self.lock:
                self.running -= 1
            return index

        def on_epoch_end(self, epoch):
            self.seen_at_end.append(self.running)

    fn = Slow()
    with DataLoader(fn, num_threads=4, max_len=1) as loader:
        abandoned = iter(loader)
        next(abandoned)
        abandoned.close()
        list(loader)
    assert fn.seen_at_end == [0]


def test_a_failure_in_an_abandoned_epoch_is_raised_by_the_next_one():
    entered, release = threading.Event(), threading.Event()

    class FailsLate(YieldFunction):
        def __len__(self):
            return 10

        def __call__(self, index):
            if index == 1:
                entered.set()
                assert release.wait(WAIT)
                raise OSError("corrupt sample 1")
            return index

    loader = DataLoader(FailsLate(), num_threads=2, max_len=10, ordered=True)
    batches = iter(loader)
    assert next(batches) == 0
    assert entered.wait(WAIT)
    batches.close()
    release.set()
    wait_for(lambda: loader.closed, "the failing thread to close the loader")
    with pytest.raises(OSError, match="corrupt sample 1"):
        list(loader)
    with pytest.raises(LoaderClosed, match="failed") as info:
        list(loader)
    assert isinstance(info.value.__cause__, OSError)
    assert not any(t.is_alive() for t in loader.threads)


def test_a_failure_is_raised_without_waiting_for_slow_calls():
    release = threading.Event()

    class OneSlow(YieldFunction):
        def __len__(self):
            return 2

        def __call__(self, index):
            if index == 0:
                assert release.wait(WAIT)
                return index
            raise OSError("bad sample")

    loader = DataLoader(OneSlow(), num_threads=2)
    started = time.monotonic()
    with pytest.raises(OSError, match="bad sample"):
        list(loader)
    waited = time.monotonic() - started
    release.set()
    loader.close()
    assert waited < WAIT / 2, "the error waited for the slow call to end"


def test_two_iterations_at_once_are_refused():
    with DataLoader(Indices(10), num_threads=2) as loader:
        first = iter(loader)
        next(first)
        with pytest.raises(RuntimeError, match="in progress"):
            next(iter(loader))
        first.close()
        assert sorted(loader) == list(range(10))


def test_iterating_a_closed_loader_raises():
    loader = DataLoader(Indices(3))
    loader.close()
    loader.close()
    with pytest.raises(LoaderClosed):
        list(loader)


def test_close_from_another_thread_ends_a_waiting_consumer():
    fn = HoldFirst(3)
    loader = DataLoader(fn, num_threads=1, max_len=2)
    consumer, outcome = run_in_thread(lambda: list(loader), "consumer")
    # the consumer waits for index 0, which is held; close, then let the worker go
    assert fn.entered.wait(WAIT)
    closer, _ = run_in_thread(loader.close, "closer")
    fn.release.set()
    join_all([closer, consumer])
    assert isinstance(outcome.get("error"), LoaderClosed)


def test_len_is_batches_per_epoch():
    with DataLoader(Indices(12)) as loader:
        assert len(loader) == 12


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"num_threads": 0}, ValueError, "num_threads must be at least 1"),
        ({"num_threads": "2"}, TypeError, "num_threads must be an int"),
        ({"max_len": 0}, ValueError, "max_len must be at least 1"),
        ({"max_len": 1.5}, TypeError, "max_len must be an int"),
        ({"seed": "x"}, TypeError, "seed"),
        ({"first_epoch": -1}, ValueError, "first_epoch"),
        ({"seed": -1}, ValueError, "seed must be at least 0"),
        ({"batches_per_epoch": 5}, ValueError, "batches_per_epoch is for a stream"),
        ({"shuffle": "no"}, TypeError, "shuffle must be True or False, got str 'no'"),
        ({"ordered": "False"}, TypeError, "ordered must be True or False"),
        ({"ordered": 1}, TypeError, "ordered must be True or False"),
    ],
)
def test_bad_arguments_say_what_to_fix(kwargs, error, message):
    with pytest.raises(error, match=message):
        DataLoader(Indices(3), **kwargs)


def test_numpy_integers_are_accepted():
    with DataLoader(Indices(6), num_threads=np.int64(2), max_len=np.int32(3), seed=np.uint8(4)) as loader:
        assert sorted(loader) == list(range(6))
        assert (loader.num_threads, loader.max_len, loader.seed) == (2, 3, 4)


@pytest.mark.parametrize("option", ["shuffle", "ordered"])
def test_shuffling_or_ordering_a_stream_is_refused(option):
    with pytest.raises(ValueError, match=f"{option}=True needs a yield function with __len__"):
        DataLoader(lambda: 1, **{option: True})


def test_a_generator_is_refused_with_a_hint():
    def gen():
        yield 1

    for bad in (gen, gen(), iter([1, 2])):
        with pytest.raises(TypeError, match="under a lock"):
            DataLoader(bad)


def test_numpy_bools_are_accepted_as_flags():
    with DataLoader(Indices(4), shuffle=np.bool_(True), ordered=np.True_, seed=0) as loader:
        assert sorted(loader) == list(range(4))
        assert loader.shuffle is True and loader.ordered is True


def test_a_class_instead_of_an_instance_is_refused_at_construction():
    class NoArguments(YieldFunction):
        def __len__(self):
            return 1

        def __call__(self, index):
            return index

    with pytest.raises(TypeError, match=r"got the class Indices itself: pass an instance: Indices\(\.\.\.\)"):
        DataLoader(Indices)
    with pytest.raises(TypeError, match=r"pass an instance: NoArguments\(\)$"):
        DataLoader(NoArguments)


def test_a_yield_function_that_is_not_callable_is_refused():
    with pytest.raises(TypeError, match="must be callable"):
        DataLoader([1, 2, 3])


@pytest.mark.parametrize(
    ("length", "error"), [(-1, ValueError), (2.5, TypeError), ("3", TypeError), (10**20, ValueError)]
)
def test_a_bad_length_is_refused(length, error):
    class BadLength(YieldFunction):
        def __len__(self):
            return length

        def __call__(self, index):
            return index

    with pytest.raises(error, match="len"):
        DataLoader(BadLength())


def test_yield_function_base_class_says_what_to_define():
    with pytest.raises(TypeError, match="__len__"):
        DataLoader(YieldFunction())


@pytest.mark.parametrize(("timeout", "error"), [("1", TypeError), (-1, ValueError), (float("nan"), ValueError)])
def test_close_with_a_bad_timeout_fails_before_stopping_anything(timeout, error):
    loader = DataLoader(Indices(4), num_threads=2)
    with pytest.raises(error, match="timeout"):
        loader.close(timeout=timeout)
    assert not loader.closed
    assert sorted(loader) == [0, 1, 2, 3]  # still usable
    loader.close(timeout=float("inf"))  # inf: wait as long as it takes, as None does
    assert loader.closed and not any(t.is_alive() for t in loader.threads)


def test_close_racing_the_first_epoch_never_leaves_a_thread():
    for _ in range(50):
        loader = DataLoader(Indices(20), num_threads=2, max_len=1)
        consumer, outcome = run_in_thread(lambda loader=loader: list(loader), "consumer")
        loader.close()
        join_all([consumer])
        assert not any(t.is_alive() for t in loader.threads)
        assert "result" in outcome or isinstance(outcome.get("error"), LoaderClosed)
