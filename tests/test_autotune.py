"""num_threads="auto": the tuner's decisions from given figures, and a loader resized while it runs."""

import dataclasses
import logging

import pytest

from parallel_loader import DataLoader, Train
from parallel_loader._loader import autotune
from parallel_loader._loader.autotune import HOLD, ThreadTuner, Window, decide
from tests.helpers import join_all
from tests.test_data_loader import Indices


def window(threads, *, call, step, wait=0.0, cores_used=0.05, batches=20):
    """A window of ``batches`` batches: the consumer spent ``step`` s on each and waited ``wait`` of the time."""
    busy = batches * step
    seconds = busy / (1 - wait) if busy > 0 else 1.0
    return Window(seconds, batches, seconds - busy, batches, batches * call, cores_used * seconds, threads)


def test_a_latency_bound_loader_grows_at_once_to_what_the_consumer_needs():
    # 100 ms calls, a 10 ms step: 10 threads keep up, 11 with the margin; the CPU is idle.
    target, why = decide(window(1, call=0.1, step=0.01, wait=0.9), cores=2, min_threads=1, max_threads=32)
    assert target == 11
    assert "input-bound" in why


def test_a_cpu_bound_loader_grows_only_as_far_as_the_idle_cores():
    # Each thread keeps a core busy: on 2 cores the second thread is the last that helps.
    assert decide(window(1, call=0.1, step=0.0, wait=0.99, cores_used=1.0), 2, 1, 32)[0] == 2
    target, why = decide(window(2, call=0.1, step=0.0, wait=0.99, cores_used=1.95), 2, 1, 32)
    assert target == 2
    assert "CPU is busy" in why


def test_a_core_another_process_keeps_busy_is_not_counted_as_idle():
    # 8 cores, this process uses 4 with 4 threads; its cores have only 1 idle core: one more thread, not 4.
    busy = dataclasses.replace(window(4, call=0.1, step=0.0, wait=0.99, cores_used=4.0), idle_seconds=1.0)
    busy = dataclasses.replace(busy, idle_seconds=1.0 * busy.seconds)
    target, why = decide(busy, 8, 1, 32)
    assert target == 5 and "1.0 idle" in why
    assert decide(dataclasses.replace(busy, idle_seconds=float("nan")), 8, 1, 32)[0] == 8  # not read: as before
    none_idle = dataclasses.replace(busy, idle_seconds=0.1 * busy.seconds)
    target, why = decide(none_idle, 8, 1, 32)
    assert target == 4 and "CPU is busy" in why


def test_a_tuner_with_its_own_clocks_reads_the_idle_time_of_its_cores():
    assert ThreadTuner().measure([], 0, 0.0).idle_seconds > 0
    fake = ThreadTuner(clock=lambda: 0.0, cpu_seconds=lambda: 0.0)
    assert fake.measure([], 0, 0.0).idle_seconds != fake.measure([], 0, 0.0).idle_seconds  # nan: not read


def test_a_loader_ahead_of_the_consumer_sheds_threads_at_most_half_at_once():
    assert decide(window(16, call=0.01, step=0.01, wait=0.0), 2, 1, 32)[0] == 8
    assert decide(window(8, call=0.01, step=0.01, wait=0.0), 2, 1, 32)[0] == 4
    assert decide(window(4, call=0.01, step=0.01, wait=0.0), 2, 1, 32)[0] == 2
    assert decide(window(2, call=0.01, step=0.01, wait=0.0), 2, 1, 32)[0] == 2  # needs ceil(1.1)
    assert decide(window(8, call=0.01, step=0.01, wait=0.0), 2, 6, 32)[0] == 6  # min_threads


def test_the_bounds_hold():
    assert decide(window(4, call=1.0, step=0.001, wait=0.9), 64, 1, 6)[0] == 6
    assert decide(window(6, call=1.0, step=0.001, wait=0.9), 64, 1, 6)[0] == 6
    assert decide(window(3, call=0.01, step=1.0, wait=0.0), 2, 3, 8)[0] == 3
    with pytest.raises(ValueError, match="max_threads"):
        ThreadTuner(4, 2)
    assert ThreadTuner(1, 8, cores=2).initial == 2 and ThreadTuner(1, 8, cores=16).initial == 8
    assert ThreadTuner(3, 8, cores=2).initial == 3
    with pytest.raises(ValueError, match="min_threads"):
        ThreadTuner(0)


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.cpu = 0.0

    def time(self):
        return self.now

    def cpu_seconds(self):
        return self.cpu


def feed(tuner, clock, totals, threads, *, seconds, batches, wait, call, cpu, calls=None):
    """Advance the fake clocks by one window and hand the tuner the totals; return its answer.

    ``calls`` finished in the window: ``batches`` unless given.
    """
    calls = batches if calls is None else calls
    clock.now += seconds
    clock.cpu += cpu * seconds
    totals["batches"] += batches
    totals["wait"] += wait * seconds
    totals["calls"] += calls
    totals["call_seconds"] += calls * call
    sample = tuner.sample(totals["batches"], totals["wait"], totals["calls"], totals["call_seconds"])
    return tuner.observe(sample, threads)


def test_the_tuner_waits_for_a_full_window_logs_each_change_and_undoes_a_growth_that_did_not_pay(caplog):
    clock = FakeClock()
    tuner = ThreadTuner(1, 8, cores=4, clock=clock.time, cpu_seconds=clock.cpu_seconds, min_batches=3)
    totals = dict(batches=0, wait=0.0, calls=0, call_seconds=0.0)
    tuner.restart(tuner.sample(0, 0.0, 0, 0.0))
    assert tuner.initial == 4, "one thread per core to start with"
    assert not tuner.due(0, 0.0) and tuner.due(1, 0.0), "the first window ends with the first batch"
    with caplog.at_level(logging.INFO, logger="parallel_loader._loader.autotune"):
        # Input-bound at 10 batches/s, CPU half a core per thread: grow as far as the idle cores feed (1 + 3.5/0.5).
        assert feed(tuner, clock, totals, 1, seconds=0.2, batches=2, wait=0.9, call=0.1, cpu=0.5) == 8
        # From then on a window needs min_batches and min_seconds: two batches are not a window yet.
        assert not tuner.due(totals["batches"] + 2, totals["wait"])
        assert feed(tuner, clock, totals, 8, seconds=0.2, batches=2, wait=0.9, call=0.2, cpu=3.0) is None
        # 8 threads busy on the CPU deliver no more than 1 did: back to 1, and no growth for HOLD windows.
        assert feed(tuner, clock, totals, 8, seconds=0.3, batches=3, wait=0.9, call=0.2, cpu=3.0) == 1
        for _ in range(HOLD - 1):
            assert feed(tuner, clock, totals, 1, seconds=0.5, batches=5, wait=0.9, call=0.1, cpu=0.5) is None
        assert feed(tuner, clock, totals, 1, seconds=0.5, batches=5, wait=0.9, call=0.1, cpu=0.5) == 8
    assert [(a, b) for a, b, _ in tuner.changes] == [(1, 8), (8, 1), (1, 8)]
    changes = [r.getMessage() for r in caplog.records if "threads" in r.getMessage()]
    assert changes[0].startswith("loader: 1 -> 8 threads: input-bound")
    assert len(changes) == 3


def shifted_tuner():
    """A tuner that settled on 3 threads for 20 ms calls and a 10 ms step, with fake clocks; and its feed."""
    clock = FakeClock()
    tuner = ThreadTuner(1, 32, cores=2, clock=clock.time, cpu_seconds=clock.cpu_seconds)
    totals = dict(batches=0, wait=0.0, calls=0, call_seconds=0.0)
    tuner.restart(tuner.sample(0, 0.0, 0, 0.0))
    assert feed(tuner, clock, totals, 3, seconds=0.2, batches=20, wait=0.0, call=0.02, cpu=0.05) is None

    def window(threads, **figures):
        return feed(tuner, clock, totals, threads, **figures)

    return tuner, clock, totals, window


def test_a_sample_is_due_once_the_window_is_long_enough_or_the_consumer_waited():
    tuner, clock, totals, _ = shifted_tuner()
    batches, waited = totals["batches"], totals["wait"]
    clock.now += 0.05  # half the shortest window (min_seconds 0.1; two 20 ms calls are less)
    assert not tuner.due(batches + 5, waited), "a clock read decides: no sample taken"
    assert tuner.due(batches + 5, waited + 0.002), "the consumer waited 4% of it"
    assert not tuner.due(batches + 5, waited + 0.0005), "a wait of 1% is jitter"
    clock.now += 0.06
    assert tuner.due(batches + 3, waited) and not tuner.due(batches + 2, waited)


def test_a_call_cost_that_grows_is_followed_before_the_window_ends(caplog):
    # The calls now take 80 ms: 9 threads keep up with the 10 ms step (ceil(1.1 * 8)).
    # Two batches in 40 ms, half of it waited: too short a window, but the queue ran dry.
    *_, window = shifted_tuner()
    with caplog.at_level(logging.INFO, logger="parallel_loader._loader.autotune"):
        assert window(3, seconds=0.04, batches=2, calls=3, wait=0.5, call=0.08, cpu=0.05) == 9
    assert caplog.records[-1].getMessage().endswith("the window ended early")


@pytest.mark.parametrize(
    ("figures", "why"),
    [
        (dict(calls=3, wait=0.5, call=0.02, cpu=0.05), "the calls so far need no more threads than run"),
        (dict(calls=2, wait=0.5, call=0.08, cpu=0.05), "too few calls to judge their cost"),
        (dict(calls=3, wait=0.5, call=0.08, cpu=1.5), "the CPU is busy: more threads may be slower"),
        (dict(calls=3, wait=0.5, call=0.08, cpu=0.5), "each thread costs a sixth of a core: it computes"),
        (dict(calls=3, wait=0.01, call=0.08, cpu=0.05), "the consumer hardly waited"),
    ],
)
def test_a_short_window_goes_on_unless_waiting_threads_would_help(figures, why):
    *_, window = shifted_tuner()
    assert window(3, seconds=0.04, batches=2, **figures) is None, why


def test_a_short_window_that_goes_on_ends_once_long_enough_with_all_its_figures():
    tuner, _, _, window = shifted_tuner()
    assert window(3, seconds=0.04, batches=4, calls=3, wait=0.0, call=0.08, cpu=0.05) is None
    # 180 ms (two calls of 80 ms and more), 6 batches, 4 calls: 14 ms waited, a step of 27.7 ms.
    assert window(3, seconds=0.14, batches=2, calls=1, wait=0.1, call=0.08, cpu=0.05) == 4  # ceil(1.1 * 80 / 27.7)
    assert not tuner.changes[-1][2].endswith("ended early")


class Scripted(ThreadTuner):
    """Answers the counts of a script, one per batch, whatever it measures."""

    def __init__(self, script, **kwargs):
        super().__init__(min_batches=1, **kwargs)
        self.script = list(script)
        self.seen = []

    def observe(self, sample, threads):
        self.seen.append(threads)
        return self.script.pop(0) if self.script else None


@pytest.mark.parametrize("ordered", [True, False])
def test_every_index_comes_once_and_in_order_while_threads_come_and_go(ordered):
    script = [1, 5, 2, 8, 1, 3, 6, 1] * 10
    tuner = Scripted(script, min_threads=2)
    started = []  # each thread's number, as thread_init is given it
    with DataLoader(Indices(300), num_threads=tuner, max_len=3, ordered=ordered, thread_init=started.append) as loader:
        for _ in range(2):
            got = list(loader)
            assert (got if ordered else sorted(got)) == list(range(300))
        threads = loader.threads
    join_all(list(threads))
    assert tuner.seen[:3] == [2, 1, 5]  # the loader ran the counts it was given
    assert len(started) > 8  # threads were retired and others started
    # An ended thread's number goes to the next one: numbers (and records) stay below the most
    # threads running at once (8, give or take those still ending), however many are started.
    assert max(started) < 12 and len(loader.stats().per_thread) == max(started) + 1


def test_resize_while_iterating_changes_the_running_threads():
    with DataLoader(Indices(50), num_threads=4, ordered=True) as loader:
        got = []
        for batch in loader:
            got.append(batch)
            if batch == 10:
                loader.resize(1)
            if batch == 30:
                loader.resize(3)
        assert got == list(range(50))
        assert loader.num_threads == 3 and loader.stats().threads == 3
        with pytest.raises(ValueError, match="num_threads must be at least 1"):
            loader.resize(0)


def test_auto_arguments_are_checked():
    with pytest.raises(ValueError, match="min_threads and max_threads"):
        DataLoader(Indices(4), num_threads=2, max_threads=4)
    with pytest.raises(ValueError, match="telemetry"):
        DataLoader(Indices(4), num_threads="auto", telemetry=False)
    with pytest.raises(ValueError, match="max_threads"):
        DataLoader(Indices(4), num_threads="auto", min_threads=5, max_threads=2)
    with pytest.raises(TypeError, match='"auto"'):
        DataLoader(Indices(4), num_threads="many")
    with pytest.raises(TypeError, match='"auto"'):
        Train(lambda b: None, Indices(4), num_threads="many")


@pytest.mark.parametrize(("cores", "bounded", "default"), [(1, 2, 1), (2, 2, 2), (4, 3, 4), (16, 3, 16)])
def test_auto_starts_at_one_thread_per_core_within_the_bounds(monkeypatch, cores, bounded, default):
    # The tuner reads the cores it may use when made; patched, the rule holds whatever this machine has.
    monkeypatch.setattr(autotune, "available_cores", lambda: cores)
    with DataLoader(Indices(4), num_threads="auto") as loader:  # bounds 1 and 32; no thread starts
        assert loader.tuner.cores == cores
        assert loader.num_threads == default
    with DataLoader(Indices(20), num_threads="auto", min_threads=2, max_threads=3) as loader:
        assert loader.num_threads == bounded
        assert (loader.tuner.min_threads, loader.tuner.max_threads) == (2, 3)
        assert sorted(loader) == list(range(20))
        assert 2 <= loader.num_threads <= 3


def test_train_takes_auto():
    train = Train(lambda b: None, Indices(10), max_nthread="auto")
    (stats,) = train.run(1, progress=False)
    assert stats.batches == 10 and stats.train.loader.threads >= 1
