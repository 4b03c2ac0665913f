"""The GIL measured while a process runs (``GilMeter``), and ``processes="auto"`` splitting a worker it holds back."""

from __future__ import annotations

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
        ({"cores": 0.1, "held": 1.0}, 8, 1),  # at least one thread stays
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
    assert [lane.number for lane in lanes] == [2, 3, 4]
    assert [[lane.number for lane in w.lanes] for w in made] == [[2, 3], [4]]


def test_a_review_is_due_once_an_interval_and_judges_a_window_from_the_second_reading():
    now = [0.0]
    gil = GilSplit("loader", interval=2.0, clock=lambda: now[0])
    worker = place(2)
    assert not gil.begin()
    now[0] = 2.0
    assert gil.begin()
    assert not gil.begin()  # one review at a time
    bound = GilReading(wall=0.0, cpu=0.0, idle=0.0, wakes=0, held=0)
    assert gil.ceiling(worker, 123, bound) is None  # the first reading starts a window
    gil.end()
    assert not gil.begin()
    now[0] = 4.0
    assert gil.begin()
    assert gil.ceiling(worker, 123, GilReading(wall=2.0, cpu=2.0, idle=2.0, wakes=400, held=360)) == 1
    assert gil.ceiling(worker, 456, GilReading(wall=4.0, cpu=4.0, idle=4.0, wakes=800, held=720)) is None  # new pid
    gil.end()
    assert gil.splits == 1


@pytest.fixture
def fast_reviews(monkeypatch):
    """Reviews every 50 ms, and every window judged GIL-bound: a split depends on no machine's load."""
    monkeypatch.setattr(gil_split, "INTERVAL", 0.05)
    monkeypatch.setattr(gil_split, "gil_ceiling", lambda window, threads: 1 if threads > 1 else None)
    monkeypatch.setattr(placement, "available_cores", lambda: 2)  # processes="auto": 1 process of 2 threads


def epochs_until_split(loader: DataLoader, most: int = 20) -> list[list[tuple[int, int, int]]]:
    epochs = []
    for _ in range(most):
        epochs.append(list(loader))
        if loader._yield_calls.splits:
            break
    return epochs


def test_processes_auto_splits_a_worker_held_back_by_its_gil_and_every_epoch_stays_exact(fast_reviews):
    fn = data.SpinningNumbers(length=40, spin_ms=3)
    with DataLoader(fn, processes="auto", num_threads=2, ordered=True, thread_init=data.remember_number) as loader:
        assert (loader.processes, loader.num_threads) == (1, 2)
        epochs = epochs_until_split(loader)
        assert loader._yield_calls.splits == 1
        epochs.append(list(loader))  # a whole epoch after the split
        pids = [pid for pid in loader._yield_calls.pids if pid is not None]
    for epoch in epochs:
        assert [index for index, _, _ in epoch] == list(range(40))  # each index once, in order
    last = epochs[-1]
    assert len(pids) == 2 and {pid for _, _, pid in last} == set(pids)  # both processes made batches
    by_pid = {pid: {number for _, number, p in last if p == pid} for pid in pids}
    assert sorted(map(sorted, by_pid.values())) == [[0], [1]]  # the moved thread kept its number


def test_explicit_processes_are_never_split(fast_reviews):
    fn = data.SpinningNumbers(length=40, spin_ms=3)
    with DataLoader(fn, processes=1, num_threads=2, ordered=True, thread_init=data.remember_number) as loader:
        for _ in range(3):
            assert [index for index, _, _ in loader] == list(range(40))
        assert loader._yield_calls.splits == 0
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
