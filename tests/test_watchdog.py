"""The watchdog: a call of the yield function running past call_timeout, raised or skipped; close() bounded."""

import gc
import json
import threading

import pytest

from parallel_loader import DataLoader, LoaderClosed
from parallel_loader._core.worker_pool import thread_frames
from parallel_loader._faults.errors import ErrorBudgetExceeded, LoaderTimeout
from tests.helpers import Faulty, join_all, run_in_thread

TIMEOUT = 0.2  # call_timeout in these tests: the hung calls wait on events, never on this


def test_a_stuck_call_raises_loader_timeout_naming_thread_index_time_and_stack():
    fn = Faulty(20, hang={5})
    # Epochs kept apart: made ahead, the next epoch's index 5 would hang a second thread.
    loader = DataLoader(fn, num_threads=2, call_timeout=TIMEOUT, overlap_epochs=False)
    try:
        with loader, pytest.raises(LoaderTimeout) as info:
            list(loader)
    finally:
        fn.unhang()
    error = info.value
    assert isinstance(error, TimeoutError)
    (stuck,) = fn.hung_threads
    assert error.thread == stuck.name and error.index == 5 and error.elapsed >= TIMEOUT
    message = str(error)
    assert f"index 5 in thread {stuck.name}" in message
    assert f"past call_timeout={TIMEOUT} s" in message
    # The stuck thread's stack, down to the line it waits on.
    assert "in hang_until_released" in message and "release.wait(HANG_LIMIT)" in message
    assert "in __call__" in message
    assert loader.errors == []


def test_calls_within_the_timeout_are_not_disturbed():
    with DataLoader(Faulty(50), num_threads=3, call_timeout=5) as loader:
        assert sorted(loader) == list(range(50))
        assert sorted(loader) == list(range(50))
    assert len(loader.threads) == 3


class Described(Faulty):
    """Like ``Faulty``; its ``error_context`` (called as a failure is recorded) sets ``recorded``."""

    def __init__(self, length, hang):
        super().__init__(length, hang=hang)
        self.recorded = threading.Event()

    def error_context(self, index):
        self.recorded.set()
        return {"source": f"item-{index}"}


@pytest.mark.parametrize("ordered", [False, True])
def test_with_skip_a_stuck_call_is_recorded_replaced_and_its_late_result_dropped(ordered):
    fn = Described(20, hang={5})
    third = threading.Event()  # thread number 2 started: with two threads, the stuck one's replacement
    got = []
    try:
        with DataLoader(
            fn, num_threads=2, max_len=4, ordered=ordered, call_timeout=TIMEOUT, on_error="skip",
            thread_init=lambda number: number == 2 and third.set(),
        ) as loader:  # fmt: skip
            for batch in loader:
                got.append(batch)
                if len(got) == 1:
                    # Mid-epoch: the consumer holds back (no call is in progress meanwhile:
                    # the threads wait for room in the queue) until the watchdog has
                    # recorded index 5, then lets the stuck call return. A late result
                    # that were queued would be delivered in this epoch, and a thread
                    # that tried to queue it would block on the full queue and not end.
                    # The stuck call is let go only once its replacement has started: a
                    # thread started after the stuck one ended would take its number instead.
                    assert fn.recorded.wait(5)
                    assert third.wait(5)
                    fn.unhang()
            threads = loader.threads
            assert sorted(loader) == list(range(20))  # the next epoch is whole: index 5 no longer hangs
    finally:
        fn.release.set()
    expected = [i for i in range(20) if i != 5]
    assert (got if ordered else sorted(got)) == expected
    (record,) = loader.errors
    stuck = fn.hung_threads[0]  # the second epoch calls index 5 again, released at once
    assert (record.epoch, record.index, record.type) == (0, 5, "LoaderTimeout")
    assert record.context == {"source": "item-5"}
    assert stuck.name in record.message and "in hang_until_released" in record.message
    assert record.thread == f"{loader.name}-watchdog"
    # A replacement thread took over: num_threads are working, plus the one that was stuck.
    assert len(threads) == 3 and stuck in threads and not stuck.is_alive()


def test_more_stuck_calls_than_threads_raise_anyway():
    fn = Faulty(20, hang={0, 1, 2})
    try:
        with (
            DataLoader(fn, num_threads=2, call_timeout=TIMEOUT, on_error="skip", overlap_epochs=False) as loader,
            pytest.raises(LoaderTimeout, match="3 calls are stuck at once, more than num_threads=2") as info,
        ):
            list(loader)
    finally:
        fn.unhang()
    # The first two were skipped as errors, the third stopped the loader.
    assert sorted(r.index for r in loader.errors) == sorted({0, 1, 2} - {info.value.index})
    assert len(fn.hung_threads) == 3


def test_a_stuck_call_under_skip_counts_against_the_budget_and_is_in_the_manifest(tmp_path):
    log = tmp_path / "manifest.jsonl"
    fn = Faulty(20, hang={3}, fail={8: ValueError})
    try:
        with (
            DataLoader(fn, num_threads=2, call_timeout=TIMEOUT, on_error="skip", max_errors=1, error_log=log) as loader,
            pytest.raises(ErrorBudgetExceeded, match="2 failed calls") as info,
        ):
            list(loader)
    finally:
        fn.unhang()
    assert {(r.index, r.type) for r in info.value.errors} == {(3, "LoaderTimeout"), (8, "ValueError")}
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert {(r["index"], r["type"]) for r in logged} == {(3, "LoaderTimeout"), (8, "ValueError")}
    timeout_record = next(r for r in logged if r["type"] == "LoaderTimeout")
    assert "past call_timeout" in timeout_record["message"]


def test_close_with_a_timeout_returns_while_a_call_is_stuck():
    fn = Faulty(10, hang={0})
    loader = DataLoader(fn, num_threads=1)
    consumer, outcome = run_in_thread(lambda: list(loader), name="consumer")
    try:
        assert fn.hung.wait(5)
        closer, closed = run_in_thread(lambda: loader.close(timeout=0.3), name="closer")
        join_all([closer, consumer], timeout=3)  # bounded: a close() waiting on the call would fail here
        assert "error" not in closed
        assert isinstance(outcome.get("error"), LoaderClosed)
        assert fn.hung_threads[0].is_alive()  # close() did not wait for it: it is still in its call
    finally:
        fn.unhang()


def test_close_without_a_timeout_waits_for_a_call_no_longer_than_call_timeout():
    fn = Faulty(10, hang={0})
    loader = DataLoader(fn, num_threads=1, call_timeout=0.5)
    consumer, outcome = run_in_thread(lambda: list(loader), name="consumer")
    try:
        assert fn.hung.wait(5)
        closer, closed = run_in_thread(loader.close, name="closer")  # timeout=None
        join_all([closer, consumer], timeout=5)  # within call_timeout, not HANG_LIMIT
        assert "error" not in closed
        assert isinstance(outcome.get("error"), LoaderClosed)
    finally:
        fn.unhang()


def test_a_call_timeout_must_be_a_positive_number():
    for value, error in ((0, ValueError), (-1, ValueError), (float("nan"), ValueError), ("1", TypeError)):
        with pytest.raises(error, match="call_timeout"):
            DataLoader(Faulty(3), call_timeout=value)
    assert DataLoader(Faulty(3), call_timeout=float("inf")).call_timeout is None


def test_a_stuck_stream_call_names_no_index():
    release = threading.Event()
    hung = []

    def stream():
        hung.append(threading.current_thread())
        release.wait(10)
        raise StopIteration

    loader = DataLoader(stream, num_threads=1, call_timeout=TIMEOUT)
    try:
        with loader, pytest.raises(LoaderTimeout, match="for index None") as info:
            list(loader)
    finally:
        release.set()
        join_all(hung)
    assert info.value.index is None


def test_thread_frames_pause_the_collector_and_leave_its_state_as_they_found_it():
    """The watchdog reads other threads' stacks with the collector paused (CPython 3.11 can deadlock otherwise)."""
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            frames = thread_frames()
            assert gc.isenabled() is enabled
            assert threading.get_ident() in frames
    finally:
        (gc.enable if was else gc.disable)()
