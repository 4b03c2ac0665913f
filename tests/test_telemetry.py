"""loader.stats(): what the loader counts and times, per pass in Train, as a dict and back."""

import threading
import time

import pytest

from parallel_loader import DataLoader, Train, YieldFunction
from parallel_loader._core.telemetry import WINDOW, CallStats, CallTimes, LoaderStats
from tests.test_data_loader import Indices

WAIT = 5.0


def wait_for(condition, what):
    """Poll ``condition`` until it holds (bounded): for states that only a loader thread reaches."""
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_an_epoch_is_counted_call_by_call_and_thread_by_thread():
    with DataLoader(Indices(30), num_threads=3, max_len=4) as loader:
        assert loader.stats() == LoaderStats()  # nothing before the first iteration
        assert sorted(loader) == list(range(30))
        stats = loader.stats()
    assert stats.threads == 3
    assert loader.stats().threads == 0  # closed: every thread ended
    assert stats.batches == stats.takes == stats.calls.count == 30
    assert sum(s.count for s in stats.per_thread.values()) == 30
    assert set(stats.per_thread) == {f"DataLoader-{i}" for i in range(3)}
    assert stats.errors == 0
    assert 0 < stats.calls.p50 <= stats.calls.p95 <= stats.calls.max
    assert stats.calls.mean == pytest.approx(stats.calls.total_seconds / 30)
    assert 0 <= stats.wait_seconds <= stats.seconds
    assert 0 <= stats.queue_fill <= 1
    assert stats.batches_per_second == pytest.approx(30 / stats.seconds)


def test_the_consumers_wait_and_the_threads_busy_are_seen():
    gate = threading.Event()

    class Gated(YieldFunction):
        def __len__(self):
            return 2

        def __call__(self, index):
            gate.wait(WAIT)
            return index

    seen = []

    def release():
        wait_for(lambda: loader.stats().busy == 2, "both threads inside a call")
        seen.append(loader.stats())
        time.sleep(0.1)  # the consumer waits meanwhile
        gate.set()

    with DataLoader(Gated(), num_threads=2) as loader:
        releaser = threading.Thread(target=release, name="releaser")
        releaser.start()
        try:
            assert sorted(loader) == [0, 1]
        finally:
            gate.set()
            releaser.join(WAIT)
        stats = loader.stats()
    assert seen[0].threads == 2 and seen[0].busy == 2
    assert stats.wait_seconds >= 0.1
    assert stats.calls.max >= 0.1
    assert stats.busy == 0


def test_a_full_queue_shows_as_a_high_fill():
    with DataLoader(Indices(9), num_threads=1, max_len=4, ordered=True) as loader:
        batches = iter(loader)
        assert next(batches) == 0
        # 4 batches queued and a fifth made, waiting for room: the queue stays full from here.
        wait_for(lambda: loader.stats().calls.count == 6, "the queue to fill")
        full = loader.stats()
        assert next(batches) == 1
        assert loader.stats().since(full).queue_fill == 1.0
        assert list(batches) == list(range(2, 9))
    assert 0 < loader.stats().queue_fill < 1


def test_skipped_calls_are_counted_as_errors():
    class Flaky(YieldFunction):
        def __len__(self):
            return 10

        def __call__(self, index):
            if index % 5 == 0:
                raise ValueError(f"bad {index}")
            return index

    # Epochs kept apart: otherwise the next epoch's first calls, made ahead, count too.
    with DataLoader(Flaky(), num_threads=2, on_error="skip", overlap_epochs=False) as loader:
        assert len(list(loader)) == 8
        stats = loader.stats()
    assert stats.errors == 2
    assert stats.batches == 8 and stats.takes == 10 and stats.calls.count == 10


def test_since_gives_one_epoch_of_several():
    with DataLoader(Indices(12), num_threads=2) as loader:
        list(loader)
        first = loader.stats()
        list(loader)
        second = loader.stats().since(first)
    assert second.batches == second.takes == second.calls.count == 12
    assert sum(s.count for s in second.per_thread.values()) == 12
    assert 0 < second.seconds < loader.stats().seconds
    assert 0 <= second.queue_fill <= 1


def test_telemetry_off_leaves_the_call_times_and_batches_at_zero():
    with DataLoader(Indices(5), num_threads=2, telemetry=False) as loader:
        assert sorted(loader) == list(range(5))
        stats = loader.stats()
    assert (stats.batches, stats.calls.count) == (0, 0)  # the queue still counts its takes: that costs no clock


def test_percentiles_are_over_the_recent_calls():
    times = CallTimes()
    for i in range(WINDOW + 100):
        times.add(1.0 if i < 100 else 0.001 * (i % 100 + 1))
    stats = times.stats()
    assert stats.count == WINDOW + 100
    assert stats.max == pytest.approx(0.1)  # the slow first 100 left the window
    assert stats.p50 == pytest.approx(0.05, abs=0.002)
    assert stats.p95 == pytest.approx(0.095, abs=0.002)
    assert CallStats.of(0, 0.0, []) == CallStats()


def test_a_snapshot_goes_to_a_dict_and_back():
    with DataLoader(Indices(6), num_threads=2) as loader:
        list(loader)
        stats = loader.stats()
    assert LoaderStats.from_dict(stats.to_dict()) == stats


def test_train_keeps_each_passs_loader_figures_and_restores_them():
    train = Train(lambda b: None, Indices(8), val_yield=Indices(4), val_task=lambda b: None, num_threads=2)
    history = train.run(2, progress=False)
    for stats in history:
        assert stats.train.loader.batches == stats.train.batches == 8
        assert stats.train.loader.calls.count == 8  # this pass's calls, not the run's
        assert stats.val.loader.batches == 4
    restored = Train(lambda b: None, Indices(8), num_threads=2)
    restored.load_state_dict(train.state_dict())
    assert restored.history[1].train.loader == history[1].train.loader
