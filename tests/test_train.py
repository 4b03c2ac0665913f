"""Train: tasks run in the calling thread, history, failures and Ctrl-C."""

import signal
import threading
import time

import numpy as np
import pytest

from parallel_loader import Train, YieldFunction
from tests.helpers import join_all

WAIT = 5


class Indices(YieldFunction):
    def __init__(self, n, delay=0.0):
        self.n = n
        self.delay = delay

    def __len__(self):
        return self.n

    def __call__(self, index):
        if self.delay:
            time.sleep(self.delay)
        return index


def loader_threads():
    return [t for t in threading.enumerate() if t.name.split("-")[0] in ("train", "val", "test")]


def test_tasks_run_in_the_calling_thread_on_every_batch():
    seen = {"train": [], "val": [], "test": []}

    def recorder(name):
        def task(batch):
            seen[name].append((batch, threading.get_ident()))

        return task

    trainer = Train(
        recorder("train"),
        Indices(20),
        val_yield=Indices(7),
        test_yield=Indices(5),
        max_nthread=3,
        max_len=2,
        val_task=recorder("val"),
        test_task=recorder("test"),
    )
    history = trainer.run(2)
    stats = trainer.test()
    me = threading.get_ident()
    assert sorted(b for b, _ in seen["train"]) == sorted(list(range(20)) * 2)
    assert sorted(b for b, _ in seen["val"]) == sorted(list(range(7)) * 2)
    assert sorted(b for b, _ in seen["test"]) == list(range(5))
    assert all(ident == me for name in seen for _, ident in seen[name])
    assert [e.epoch for e in history] == [0, 1]
    assert [(e.batches, e.val.batches) for e in history] == [(20, 7), (20, 7)]
    assert stats.batches == 5
    assert not loader_threads(), "loader threads live only while run() and test() do"


def test_history_times_and_wait_fraction():
    slow_loader = Train(lambda b: None, Indices(10, delay=0.01), max_nthread=1).run(1)[0]
    slow_task = Train(lambda b: time.sleep(0.01), Indices(10), max_nthread=2).run(1)[0]
    for stats in (slow_loader, slow_task):
        assert stats.seconds > 0 and 0 <= stats.wait_fraction <= 1
        assert stats.train.batches_per_second == pytest.approx(10 / stats.seconds)
    # a loader ten times slower than the task: the consumer waits nearly all the time;
    # a task slower than the loader: it barely waits
    assert slow_loader.wait_fraction > 0.5
    assert slow_task.wait_fraction < 0.5


def test_keep_outputs_and_on_epoch_end():
    ended = []
    trainer = Train(lambda b: b * 2, Indices(4), keep_outputs=True, on_epoch_end=ended.append, shuffle=False)
    trainer.run(1)
    assert sorted(trainer.history[0].train.outputs) == [0, 2, 4, 6]
    assert ended == trainer.history


def test_a_later_run_continues_the_epochs_and_the_shuffled_orders():
    orders = []
    trainer = Train(lambda b: orders[-1].append(b), Indices(30), seed=5, ordered=True,
                    on_epoch_end=lambda s: orders.append([]))  # fmt: skip
    orders.append([])
    trainer.run(1)
    trainer.run(1)
    assert [e.epoch for e in trainer.history] == [0, 1]
    assert sorted(orders[0]) == sorted(orders[1]) == list(range(30))
    assert orders[0] != orders[1]


def test_a_stream_with_batches_per_epoch_loses_nothing():
    lock = threading.Lock()
    made = []

    def stream():
        with lock:
            made.append(len(made))
            return made[-1]

    got = []
    trainer = Train(got.append, stream, batches_per_epoch=6, max_nthread=3, max_len=4)
    assert [e.batches for e in trainer.run(3)] == [6, 6, 6]
    assert sorted(got) == made == list(range(18))
    assert not loader_threads()
    with pytest.raises(ValueError, match="batches_per_epoch must be at least 1"):
        Train(got.append, stream, batches_per_epoch=0)


def test_an_exception_in_the_main_task_stops_every_thread():
    def task(batch):
        if batch == 3:
            raise ValueError("bad step")

    trainer = Train(task, Indices(100), val_yield=Indices(5), val_task=print, max_nthread=4, shuffle=False,
                    ordered=True)  # fmt: skip
    with pytest.raises(ValueError, match="bad step"):
        trainer.run(1)
    assert not loader_threads()


def test_an_exception_in_a_loader_thread_reaches_run():
    class Broken(YieldFunction):
        def __len__(self):
            return 10

        def __call__(self, index):
            raise OSError(f"cannot read sample {index}")

    with pytest.raises(OSError, match="cannot read sample"):
        Train(lambda b: None, Broken(), max_nthread=3).run(1)
    assert not loader_threads()


def test_keyboard_interrupt_in_the_main_task_stops_every_thread():
    def task(batch):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Train(task, Indices(1000), max_nthread=4, max_len=2).run(1)
    assert not loader_threads()


@pytest.mark.parametrize("prefetch_to_device", [None, "/CPU:0"])  # with a device, a copy thread waits too
def test_ctrl_c_while_waiting_for_data_propagates_at_once_and_stops_every_thread(prefetch_to_device):
    """A real SIGINT reaches the main thread while it waits for a batch that is slow to come."""
    entered, release = threading.Event(), threading.Event()

    class Stuck(YieldFunction):
        def __len__(self):
            return 10

        def __call__(self, index):
            entered.set()
            release.wait(WAIT)  # bounded: the test cannot hang here
            return index

    sent = []

    def interrupt():
        # The first call comes after Train imports TensorFlow (for the device), which took over 5 s under load.
        assert entered.wait(6 * WAIT)
        time.sleep(0.1)  # let the main thread reach its wait for the queue
        sent.append(time.monotonic())
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    assert threading.current_thread() is threading.main_thread()
    sender = threading.Thread(target=interrupt, name="sigint-sender")
    sender.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            Train(
                lambda b: None, Stuck(), val_yield=Stuck(), val_task=print, max_nthread=2,
                prefetch_to_device=prefetch_to_device,
            ).run(1)  # fmt: skip
        interrupted_after = time.monotonic() - sent[0]  # from the signal: importing TensorFlow may come first
        # the loader threads still inside the yield function take no more work
        # and end as soon as their call returns
        release.set()
        join_all(loader_threads())
    finally:
        release.set()
        join_all([sender])
    # The contract is "within a second" of the signal; the bound here is looser
    # for a loaded machine, yet far below the WAIT the stuck call would take.
    assert interrupted_after < WAIT / 2


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"val_yield": Indices(2)}, TypeError, "val_task"),
        ({"test_yield": Indices(2)}, TypeError, "test_task"),
        ({"max_nthread": 0}, ValueError, "max_nthread"),
        ({"max_len": 0}, ValueError, "max_len"),
        ({"batches_per_epoch": 5}, ValueError, "batches_per_epoch is for a stream"),
        ({"val_task": 3}, TypeError, "val_task must be callable"),
        ({"val_task": print}, TypeError, "val_task was given without val_yield"),
        ({"test_task": print}, TypeError, "test_task was given without test_yield"),
        ({"on_epoch_end": "print"}, TypeError, "on_epoch_end must be callable"),
        ({"num_threads": 0}, ValueError, "num_threads must be at least 1"),
        ({"eval_nthread": 0}, ValueError, "eval_nthread must be at least 1"),
        ({"num_threads": 2, "max_nthread": 2}, TypeError, "pass num_threads or its alias max_nthread, not both"),
        ({"shuffle": "no"}, TypeError, "shuffle must be True or False"),
        ({"ordered": "False"}, TypeError, "ordered must be True or False"),
        ({"keep_outputs": 1}, TypeError, "keep_outputs must be True or False"),
        ({"train_yield": Indices}, TypeError, r"pass an instance: Indices\(\.\.\.\)"),
        ({"val_yield": Indices, "val_task": print}, TypeError, r"pass an instance: Indices\(\.\.\.\)"),
        ({"batch_size": 2, "train_yield": Indices}, TypeError, r"pass an instance: Indices\(\.\.\.\)"),
    ],
)
def test_bad_arguments_fail_before_any_thread_starts(kwargs, error, message):
    kwargs = {"train_yield": Indices(3), **kwargs}
    with pytest.raises(error, match=message):
        Train(lambda b: None, **kwargs)
    assert not loader_threads()


def test_bad_epochs_and_missing_test_data():
    trainer = Train(lambda b: None, Indices(3))
    with pytest.raises(ValueError, match="epochs"):
        trainer.run(0)
    with pytest.raises(ValueError, match="test_yield"):
        trainer.test()


def test_on_epoch_end_returning_true_stops_after_that_epoch_and_keeps_the_history():
    ended = []

    def early_stop(stats):
        ended.append(stats.epoch)
        return stats.epoch == 1

    trainer = Train(lambda b: None, Indices(6), val_yield=Indices(2), val_task=lambda b: None, num_threads=3,
                    on_epoch_end=early_stop)  # fmt: skip
    history = trainer.run(10, progress=False)
    assert [e.epoch for e in history] == ended == [0, 1]
    assert all(e.batches == 6 and e.val.batches == 2 for e in history)
    assert not loader_threads()
    trainer.run(1, progress=False)  # a later run goes on from the next epoch
    assert [e.epoch for e in trainer.history] == [0, 1, 2]
    assert not loader_threads()


@pytest.mark.parametrize("returned", [None, 1, "stop", [True], False])
def test_only_true_from_on_epoch_end_stops(returned):
    history = Train(lambda b: None, Indices(2), on_epoch_end=lambda s: returned).run(3, progress=False)
    assert len(history) == 3


def test_stop_from_the_main_task_ends_the_epoch_after_that_batch():
    done = []

    def task(batch):
        done.append(batch)
        if len(done) == 4:
            trainer.stop()

    ended = []
    trainer = Train(task, Indices(100), val_yield=Indices(3), val_task=lambda b: None, num_threads=4, max_len=2,
                    ordered=True, shuffle=False, on_epoch_end=ended.append)  # fmt: skip
    history = trainer.run(5, progress=False)
    assert done == [0, 1, 2, 3]
    assert len(history) == 1 and history[0].batches == 4, "the stopped epoch is kept, with the batches it ran"
    assert history[0].val.batches == 3, "and it is validated, as Keras does"
    assert ended == history
    assert not loader_threads()
    assert len(trainer.run(1, progress=False)[-1:]) == 1 and trainer.history[-1].batches == 100


def test_stop_from_another_thread():
    reached, stopped = threading.Event(), threading.Event()

    def task(batch):
        if batch == 2:
            reached.set()
            assert stopped.wait(WAIT)

    def stopper():
        assert reached.wait(WAIT)
        trainer.stop()
        stopped.set()

    trainer = Train(task, Indices(50), num_threads=2, shuffle=False, ordered=True)
    thread = threading.Thread(target=stopper, name="stopper")
    thread.start()
    try:
        history = trainer.run(3, progress=False)
    finally:
        stopped.set()
        join_all([thread])
    assert [e.batches for e in history] == [3]
    assert not loader_threads()


def test_num_threads_and_its_alias_max_nthread():
    assert Train(lambda b: None, Indices(1), None, None, 3).num_threads == 3, "the place of max_nthread"
    assert Train(lambda b: None, Indices(1), max_nthread=2, eval_nthread=5).eval_num_threads == 5
    trainer = Train(lambda b: None, Indices(1), val_yield=Indices(1), val_task=print, num_threads=2)
    assert trainer.eval_num_threads == 2, "evaluation uses the training thread count by default"


def test_metrics_are_the_means_of_the_numbers_the_task_returns():
    class Tensorish:
        def __float__(self):
            raise AssertionError("a tensor is never read: that would wait for the device")

    def step(batch):
        return {"loss": float(batch), "count": np.int64(1), "acc": np.array(0.5, np.float32), "t": Tensorish(),
                "flag": True}  # fmt: skip

    trainer = Train(step, Indices(4), val_yield=Indices(2), val_task=lambda b: {"loss": 10.0 * b})
    stats = trainer.run(1, progress=False)[0]
    assert stats.train.metrics == {"loss": 1.5, "count": 1.0, "acc": 0.5}
    assert stats.val.metrics == {"loss": 5.0}
    assert Train(lambda b: b, Indices(2)).run(1, progress=False)[0].train.metrics == {}


def test_train_batches_samples_and_keeps_every_validation_sample():
    class Samples:
        def __init__(self, n):
            self.n = n

        def __len__(self):
            return self.n

        def __getitem__(self, index):
            return np.zeros(2), index

    seen = {"train": [], "val": []}
    trainer = Train(
        lambda batch: seen["train"].append(batch[1].tolist()),
        Samples(10),
        val_yield=Samples(5),
        val_task=lambda batch: seen["val"].append(batch[1].tolist()),
        num_threads=2,
        batch_size=4,
        drop_last=True,
        seed=0,
        ordered=True,
    )
    trainer.run(2, progress=False)
    assert [len(batch) for batch in seen["train"]] == [4] * 4
    assert seen["train"][:2] != seen["train"][2:], "Train shuffles samples by default"
    # Validation batches come as made (two threads): each pass has every sample, none dropped.
    assert [sorted(seen["val"][i : i + 2]) for i in (0, 2)] == [[[0, 1, 2, 3], [4]]] * 2
