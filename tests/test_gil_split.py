"""The GIL measured while a process runs (``GilMeter``), and ``processes="auto"`` splitting a worker it holds back."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from parallel_loader import DataLoader
from parallel_loader._calls import gil_split
from parallel_loader._calls.gil_split import GilSplit, split
from parallel_loader._calls.worker_launch import worker_children
from parallel_loader._calls.worker_places import Lane, Worker
from parallel_loader._core.gil_meter import GilMeter, GilReading, GilWindow, gil_ceiling
from parallel_loader._loader import placement

from . import process_data as data

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def no_worker_left():
    yield
    assert worker_children() == []


def window(seconds=2.0, cores=1.0, idle_cores=1.0, held=0.9) -> GilWindow:
    return GilWindow(seconds=seconds, cores=cores, idle_cores=idle_cores, held=held)


@pytest.mark.parametrize(
    ("figures", "threads", "expected"),
    [
        ({}, 2, 1),  # 2 threads of pure Python: one core, the GIL always busy, a core idle
        ({"cores": 4.6}, 8, 5),  # a reader at a fifth of the GIL: five threads' worth
        ({"cores": 1.2}, 1, None),  # one thread: nothing to split
        ({"seconds": 0.5}, 2, None),  # too short a window to judge
        ({"held": 0.2}, 8, None),  # the GIL mostly free: the threads wait on I/O
        ({"cores": 1.6}, 2, None),  # near a core per thread: not held back
        ({"idle_cores": 0.2}, 8, None),  # no idle core: another process would not run either
        ({"cores": 1.2, "held": 1.0}, 8, 1),  # at least one thread stays
        ({"cores": 0.6, "held": 0.55}, 5, None),  # under 0.9 cores: the GIL had time to spare (I/O-bound threads)
    ],
)
def test_the_gil_ceiling_is_the_cores_used_when_the_gil_holds_the_threads_back(figures, threads, expected):
    assert gil_ceiling(window(**figures), threads) == expected


def test_a_window_is_the_difference_of_two_readings():
    first = GilReading(wall=10.0, cpu=3.0, idle=100.0, wakes=50, held=10)
    then = GilReading(wall=12.0, cpu=6.0, idle=101.0, wakes=450, held=310)
    assert then.since(first) == GilWindow(seconds=2.0, cores=1.5, idle_cores=0.5, held=0.75)
    assert first.since(first).held == 0.0  # no wakes: no share


def test_the_meter_finds_the_gil_held_by_a_python_loop_and_its_thread_ends_at_close():
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    spinner = threading.Thread(target=spin)
    meter = GilMeter()
    try:
        start = meter.reading()
        spinner.start()
        deadline = time.monotonic() + 30
        while meter.reading().wakes - start.wakes < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        end = meter.reading()
    finally:
        stop.set()
        spinner.join(10)
        meter.close()
    assert end.wakes - start.wakes >= 40
    # A wake waits for the loop to give the GIL up: 5 ms, the switch interval, each time.
    assert end.since(start).held >= 0.5
    assert not meter._thread.is_alive()


def place(lanes: int, number: int = 0) -> Worker:
    worker = Worker(number, f"w-process-{number}")
    for j in range(lanes):
        Lane(worker, number * lanes + j)
    return worker


def test_a_split_keeps_the_ceiling_and_moves_the_rest_to_new_workers_with_their_numbers():
    worker, made = place(5), []

    def new_worker() -> Worker:
        made.append(Worker(len(made) + 1, f"w-process-{len(made) + 1}"))
        return made[-1]

    lanes = split(worker, 2, new_worker)
    assert [lane.moving for lane in worker.lanes] == [False, False, True, True, True]
    assert [lane.successor for lane in worker.lanes[2:]] == lanes
    assert [lane.number for lane in lanes] == [2, 3, 4]
    assert [[lane.number for lane in w.lanes] for w in made] == [[2, 3], [4]]


def test_a_window_starts_at_a_workers_first_reading_and_again_after_a_split_or_a_new_process():
    gil, worker = GilSplit("loader"), place(2)
    first = GilReading(wall=0.0, cpu=0.0, idle=0.0, wakes=0, held=0, pid=123)
    assert gil.ceiling(worker, first) is None  # the first reading starts a window
    bound = GilReading(wall=2.0, cpu=2.0, idle=2.0, wakes=200, held=180, pid=123)
    assert gil.ceiling(worker, bound) == 1 and gil.splits == 1
    assert gil.ceiling(worker, dataclasses.replace(bound, wall=4.0)) is None  # a new window after the split
    other = GilReading(wall=6.0, cpu=6.0, idle=6.0, wakes=600, held=540, pid=456)
    assert gil.ceiling(worker, other) is None  # a replaced process: its totals start again


@pytest.fixture
def fast_reviews(monkeypatch):
    """Reviews every 50 ms, and every window judged GIL-bound: a split depends on no machine's load."""
    monkeypatch.setattr(gil_split, "INTERVAL", 0.05)
    monkeypatch.setattr(gil_split, "gil_ceiling", lambda window, threads: 1 if threads > 1 else None)
    monkeypatch.setattr(placement, "available_cores", lambda: 2)  # processes="auto": 1 process of 2 threads


def epochs_until_moved(loader: DataLoader, seconds: float = 60) -> list[list[tuple[int, int, int]]]:
    """Epochs until one comes from two processes: the moved thread took its successor, once that was ready."""
    epochs: list[list[tuple[int, int, int]]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (epochs and len({pid for _, _, pid in epochs[-1]}) == 2):
        epochs.append(list(loader))
    return epochs


def test_processes_auto_splits_a_worker_held_back_by_its_gil_and_every_epoch_stays_exact(fast_reviews):
    fn = data.SpinningNumbers(length=40, spin_ms=3)
    with DataLoader(fn, processes="auto", num_threads=2, ordered=True, thread_init=data.remember_number) as loader:
        assert (loader.processes, loader.num_threads) == (1, 2)
        epochs = epochs_until_moved(loader)
        assert loader._yield_calls.split.splits == 1
        pids = [pid for pid in loader._yield_calls.pids if pid is not None]
    for epoch in epochs:
        assert [index for index, _, _ in epoch] == list(range(40))  # each index once, in order
    last = epochs[-1]
    assert len(pids) == 2 and {pid for _, _, pid in last} == set(pids)  # both processes made batches
    old, new = pids  # the worker split, and the one made for its moved thread
    assert {number for epoch in epochs for _, number, pid in epoch if pid == new} == {1}  # it kept its number
    assert 0 in {number for _, number, pid in last if pid == old}


def test_explicit_processes_are_never_split(fast_reviews):
    fn = data.SpinningNumbers(length=40, spin_ms=3)
    with DataLoader(fn, processes=1, num_threads=2, ordered=True, thread_init=data.remember_number) as loader:
        for _ in range(3):
            assert [index for index, _, _ in loader] == list(range(40))
        assert loader._yield_calls.split is None  # no review thread, no GIL meter
        assert len(loader._yield_calls.pids) == 1


class Unasked:
    """A control pipe that fails the test if a request is sent on it."""

    def send(self, request: object) -> None:
        raise AssertionError(f"asked {request!r} while the control pipe was busy")


def test_a_review_skips_a_worker_whose_control_pipe_is_busy_without_waiting():
    worker = place(2)
    worker.control = Unasked()
    held, release = threading.Event(), threading.Event()

    def hook_in_progress() -> None:  # as an epoch hook's request holds the pipe until the hook returns
        with worker.control_lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hook_in_progress)
    holder.start()
    try:
        assert held.wait(30)
        assert GilSplit("loader").review([worker]) == []
    finally:
        release.set()
        holder.join(30)


def test_a_moving_thread_waits_for_no_slow_start_so_no_call_times_out(fast_reviews, tmp_path):
    # The new worker's thread_init takes 2 s, longer than call_timeout: the thread keeps its lane meanwhile.
    init = data.SlowInitElsewhere(str(tmp_path / "first"), seconds=2.0)
    fn = data.SpinningNumbers(length=40, spin_ms=3)
    with DataLoader(fn, processes="auto", num_threads=2, thread_init=init, call_timeout=1.0) as loader:
        epochs = epochs_until_moved(loader)
        assert loader._yield_calls.split.splits == 1
        assert loader.errors == []
    assert all(sorted(index for index, _, _ in epoch) == list(range(40)) for epoch in epochs)


def test_close_does_not_wait_on_a_review_of_a_worker_holding_its_gil(monkeypatch):
    monkeypatch.setattr(gil_split, "INTERVAL", 0.05)
    monkeypatch.setattr(placement, "available_cores", lambda: 4)  # 2 processes of 2 threads
    loader = DataLoader(data.HoldsTheGil(400, at=8, seconds=30), processes="auto", num_threads=2, on_error="skip")
    with loader:
        for got, _ in enumerate(loader):
            if got == 30:
                break
        started = time.monotonic()
        loader.close(timeout=1.0)
        # Before reviews gave up on a silent worker, close() waited out its 30 s in C.
        assert time.monotonic() - started < 15
