"""Prefetch onto a device: on /CPU:0 (every machine has one), the bound, errors, shutdown, and the no-op."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from parallel_loader import Train, YieldFunction
from parallel_loader.tensorflow._device_prefetch import DevicePrefetcher, find_device, prefetch_dataset
from tests.helpers import TRIGGER_DELAY, join_all

WAIT = 5
MISSING = "/GPU:7"  # no machine running these tests has eight GPUs


def batches(n: int):
    return [(np.full((2, 3), i, np.float32), {"label": np.array([i, i])}) for i in range(n)]


def copy_threads(name: str = "device-prefetch") -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_find_device_names_a_local_device_or_none():
    assert find_device("/CPU:0") == "/device:CPU:0"
    assert find_device("cpu:0") == "/device:CPU:0"
    assert find_device(MISSING) is None
    with pytest.raises(ValueError, match="not a device name"):
        find_device("banana")
    with pytest.raises(TypeError, match="name such as '/GPU:0'"):
        find_device(0)


def test_batches_arrive_as_tensors_on_the_device_in_order():
    source = batches(6)
    with DevicePrefetcher("/CPU:0", buffer=2) as prefetcher:
        got = list(prefetcher.iterate(source))
        assert not copy_threads()  # the thread of a finished pass is joined
    assert len(got) == 6
    for (x, y), (x0, y0) in zip(got, source, strict=True):
        assert isinstance(x, tf.Tensor) and x.device.endswith("CPU:0")
        assert isinstance(y["label"], tf.Tensor) and y["label"].device.endswith("CPU:0")
        np.testing.assert_array_equal(x.numpy(), x0)
        np.testing.assert_array_equal(y["label"].numpy(), y0["label"])


@pytest.mark.parametrize("buffer", [1, 3])
def test_at_most_buffer_batches_are_copied_ahead_of_the_one_in_use(buffer):
    taken = []
    more = threading.Event()

    def source():
        for i in range(20):
            taken.append(i)
            if len(taken) == buffer + 1:
                more.set()
            yield np.array([i])

    with DevicePrefetcher("/CPU:0", buffer=buffer) as prefetcher:
        iterator = prefetcher.iterate(source())
        first = next(iterator)  # the step's batch; the thread copies ahead
        assert more.wait(WAIT), f"the copy thread took {len(taken)} batches, not {buffer + 1}"
        time.sleep(TRIGGER_DELAY)  # room to overrun the bound, if it could
        assert len(taken) == buffer + 1
        assert int(first[0]) == 0
        rest = [int(b[0]) for b in iterator]
    assert rest == list(range(1, 20))


def test_an_error_of_the_source_is_raised_in_the_consumer_after_the_batches_before_it():
    def source():
        yield np.zeros(1)
        raise OSError("cannot read batch 1")

    prefetcher = DevicePrefetcher("/CPU:0")
    got = []
    with pytest.raises(OSError, match="cannot read batch 1") as info:
        for batch in prefetcher.iterate(source()):
            got.append(batch)
    assert len(got) == 1
    assert "source" in {frame.name for frame in info.traceback}  # the source's own frame, from its thread
    prefetcher.close(timeout=WAIT)
    assert not copy_threads()


def test_a_batch_that_cannot_be_a_tensor_is_a_clear_error():
    prefetcher = DevicePrefetcher("/CPU:0")
    with pytest.raises((TypeError, ValueError)) as info:
        list(prefetcher.iterate([np.array([object()])]))
    assert any("copying a batch to /device:CPU:0" in note for note in info.value.__notes__)
    prefetcher.close(timeout=WAIT)


def test_leaving_early_stops_the_copy_thread_and_closes_the_source():
    closed = threading.Event()

    def source():
        try:
            for i in range(1000):
                yield np.array([i])
        finally:
            closed.set()

    prefetcher = DevicePrefetcher("/CPU:0", buffer=2)
    for batch in prefetcher.iterate(source()):
        if int(batch[0]) == 3:
            break
    prefetcher.close(timeout=WAIT)
    assert closed.is_set()
    assert not copy_threads()


def test_a_missing_device_is_a_no_op_with_one_log_line(caplog):
    source = batches(3)
    with caplog.at_level(logging.WARNING, logger="parallel_loader.tensorflow._device_prefetch"):
        prefetcher = DevicePrefetcher(MISSING)
    assert not prefetcher.active
    assert [r.getMessage() for r in caplog.records if MISSING in r.getMessage()] == [
        f"no device {MISSING} in this process (it has /device:CPU:0): batches are not prefetched to a device"
    ]
    got = list(prefetcher.iterate(source))
    assert all(a is b for a, b in zip(got, source, strict=True))  # the very same objects, no copy
    assert not copy_threads()
    prefetcher.close()


def test_bad_buffer():
    with pytest.raises(ValueError, match="device_buffer must be at least 1"):
        DevicePrefetcher("/CPU:0", buffer=0)


def test_a_dataset_prefetched_to_the_cpu_keeps_its_elements_and_a_missing_device_leaves_it_alone(caplog):
    dataset = tf.data.Dataset.range(5)
    on_cpu = prefetch_dataset(dataset, "/CPU:0", buffer=2)
    assert on_cpu is not dataset
    got = list(on_cpu)
    assert [int(x) for x in got] == [0, 1, 2, 3, 4] and all(x.device.endswith("CPU:0") for x in got)
    with caplog.at_level(logging.WARNING, logger="parallel_loader.tensorflow._device_prefetch"):
        assert prefetch_dataset(dataset, MISSING) is dataset
    assert len([r for r in caplog.records if MISSING in r.getMessage()]) == 1


class Indices(YieldFunction):
    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n = n
        self.fail_at = fail_at

    def __len__(self) -> int:
        return self.n

    def __call__(self, index: int):
        if index == self.fail_at:
            raise OSError(f"cannot read sample {index}")
        return np.full(2, index, np.int64), np.float32(index)


def train_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.split("-")[0] in ("train", "val")]


def test_train_hands_every_task_tensors_already_on_the_device():
    seen = {"train": [], "val": []}

    def record(name):
        def task(batch):
            x, y = batch
            assert isinstance(x, tf.Tensor) and x.device.endswith("CPU:0")
            assert isinstance(y, tf.Tensor) and y.device.endswith("CPU:0")
            seen[name].append(int(y))
            assert threading.current_thread() is threading.main_thread()

        return task

    trainer = Train(
        record("train"), Indices(12), val_yield=Indices(5), val_task=record("val"),
        max_nthread=3, seed=1, prefetch_to_device="/CPU:0", device_buffer=2,
    )  # fmt: skip
    history = trainer.run(2)
    assert sorted(seen["train"]) == sorted(list(range(12)) * 2)
    assert sorted(seen["val"]) == sorted(list(range(5)) * 2)
    assert [e.batches for e in history] == [12, 12]
    assert not train_threads()


def test_train_with_device_prefetch_stops_every_thread_on_a_task_error_and_a_loader_error():
    def task(batch):
        if int(batch[1]) == 3:
            raise ValueError("bad step")

    with pytest.raises(ValueError, match="bad step"):
        Train(task, Indices(100), max_nthread=3, shuffle=False, ordered=True, prefetch_to_device="/CPU:0").run(1)
    join_all(train_threads())
    with pytest.raises(OSError, match="cannot read sample 4"):
        Train(lambda b: None, Indices(10, fail_at=4), max_nthread=2, prefetch_to_device="/CPU:0").run(1)
    join_all(train_threads())


def test_train_on_a_missing_device_gives_the_loaders_batches_unchanged():
    got = []
    Train(lambda b: got.append(b), Indices(4), max_nthread=2, prefetch_to_device=MISSING).run(1)
    assert all(isinstance(x, np.ndarray) for x, _ in got)


def test_train_shards_its_training_data_only():
    seen = {"train": [], "val": []}
    Train(
        lambda b: seen["train"].append(int(b[1])), Indices(9), val_yield=Indices(4),
        val_task=lambda b: seen["val"].append(int(b[1])),
        max_nthread=2, seed=3, num_shards=2, shard_index=1, shard_remainder="drop",
    ).run(1)  # fmt: skip
    assert len(seen["train"]) == 4 and sorted(seen["val"]) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="shard_index must be in range"):
        Train(lambda b: None, Indices(4), num_shards=2, shard_index=5)


def test_train_imports_no_tensorflow_without_device_prefetch():
    code = (
        "import sys; from parallel_loader import Train\n"
        "Train(print, lambda: 0, batches_per_epoch=1, max_nthread=1).run(1)\n"
        "assert 'tensorflow' not in sys.modules, 'TensorFlow was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, capture_output=True)
