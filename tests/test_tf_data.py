"""as_tf_dataset: signatures, repeated iteration, thread ownership, and a tiny model.fit."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from parallel_loader import DataLoader, YieldFunction, as_tf_dataset


class Batches(YieldFunction):
    """Batch i: x of shape (2, 3) filled with i, y = [i, i]; counts its calls."""

    def __init__(self, n: int = 5, as_dict: bool = False) -> None:
        self.n = n
        self.as_dict = as_dict
        self.calls = 0
        self._calls_lock = threading.Lock()  # loader threads call at once, and += is not atomic

    def __len__(self) -> int:
        return self.n

    def __call__(self, index: int):
        with self._calls_lock:
            self.calls += 1
        x = np.full((2, 3), index, dtype=np.float32)
        y = np.array([index, index], dtype=np.int64)
        return {"x": x, "y": y} if self.as_dict else (x, y)


def loader_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(name + "-")]


def wait_for_no_threads(name: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while loader_threads(name) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not loader_threads(name), f"loader threads still alive: {loader_threads(name)}"


def test_signature_is_inferred_from_the_first_batch():
    dataset = as_tf_dataset(Batches(), num_threads=2)
    assert dataset.element_spec == (
        tf.TensorSpec((None, 3), tf.float32),
        tf.TensorSpec((None,), tf.int64),
    )
    assert dataset.cardinality().numpy() == 5


def test_dict_batches_keep_their_keys():
    dataset = as_tf_dataset(Batches(as_dict=True), num_threads=2)
    assert set(dataset.element_spec) == {"x", "y"}
    values = sorted(int(b["y"][0]) for b in dataset)
    assert values == [0, 1, 2, 3, 4]


def test_each_iteration_is_a_full_epoch_and_its_threads_end_with_it():
    batches = Batches()
    dataset = as_tf_dataset(batches, num_threads=3, name="own")
    for _ in range(3):
        got = [(x.numpy(), y.numpy()) for x, y in dataset]
        assert sorted(int(y[0]) for _, y in got) == [0, 1, 2, 3, 4]
        for x, y in got:
            assert x.shape == (2, 3) and (x == y[0]).all()
        wait_for_no_threads("own")
    assert batches.calls == 1 + 3 * 5  # one call to infer the signature


class Epochs(Batches):
    """Records the epochs the loader reports as finished."""

    def __init__(self) -> None:
        super().__init__()
        self.ended: list[int] = []

    def on_epoch_end(self, epoch: int) -> None:
        self.ended.append(epoch)


@pytest.mark.parametrize("given_loader", [False, True])
def test_an_epoch_ends_when_its_last_batch_is_taken(given_loader):
    batches = Epochs()
    with DataLoader(batches, num_threads=2, name="epochs") as loader:
        dataset = as_tf_dataset(loader if given_loader else batches, num_threads=2, name="epochs")
        for expected in ([0], [0, 1]):
            assert len(list(dataset.take(5))) == 5  # never asks for a sixth batch
            assert batches.ended == expected


def test_an_iterator_dropped_part_way_closes_its_threads():
    dataset = as_tf_dataset(Batches(n=50), num_threads=2, max_len=2, name="dropped")
    iterator = iter(dataset)
    next(iterator)
    assert loader_threads("dropped")
    del iterator
    wait_for_no_threads("dropped")


def test_a_given_data_loader_is_iterated_but_not_closed():
    with DataLoader(Batches(), num_threads=2, shuffle=True, seed=1, name="given") as loader:
        dataset = as_tf_dataset(loader)
        first = [int(y[0]) for _, y in dataset]
        second = [int(y[0]) for _, y in dataset]
        assert sorted(first) == sorted(second) == [0, 1, 2, 3, 4]
        assert loader.epoch == 1
        assert not loader.closed
    assert loader.closed


def test_a_stream_needs_an_output_signature():
    def stream():
        return np.zeros(2, np.float32)

    with pytest.raises(TypeError, match="output_signature"):
        as_tf_dataset(stream)

    count = iter(range(3))

    def finite_stream():
        return np.full(2, next(count), np.float32)  # StopIteration after 3 batches ends the stream

    dataset = as_tf_dataset(finite_stream, tf.TensorSpec((2,), tf.float32), num_threads=1)
    assert sorted(float(b[0]) for b in dataset) == [0.0, 1.0, 2.0]


def test_an_unconvertible_batch_is_a_clear_error():
    class Objects(Batches):
        def __call__(self, index):
            return np.array([object()])

    with pytest.raises(TypeError, match="cannot make a tensor"):
        as_tf_dataset(Objects())


class Pairs:
    """A sample dataset: sample i is (x filled with i, label i)."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, index: int):
        return np.full(3, index, dtype=np.float32), np.int64(index)


def test_a_sample_dataset_is_batched_and_shuffled_per_epoch():
    dataset = as_tf_dataset(Pairs(), num_threads=2, batch_size=4, drop_last=True, shuffle=True, seed=0, ordered=True)
    assert dataset.element_spec == (tf.TensorSpec((None, 3), tf.float32), tf.TensorSpec((None,), tf.int64))
    assert dataset.cardinality().numpy() == 2
    epochs = [[y.numpy().tolist() for _, y in dataset] for _ in range(3)]
    for batches in epochs:
        assert [len(b) for b in batches] == [4, 4] and len({i for b in batches for i in b}) == 8
    assert epochs[0] != epochs[1] != epochs[2]
    wait_for_no_threads("tf-loader")


@pytest.mark.parametrize(
    ("source", "kwargs", "error", "message"),
    [
        (Batches, {}, TypeError, r"pass an instance: Batches\(\)"),
        (Pairs, {"batch_size": 2}, TypeError, r"pass an instance: Pairs\(\)"),
        (Batches(), {"shuffle": "no"}, TypeError, "shuffle must be True or False"),
        (Batches(), {"ordered": "False"}, TypeError, "ordered must be True or False"),
    ],
)
def test_bad_sources_and_flags_fail_at_once(source, kwargs, error, message):
    with pytest.raises(error, match=message):
        as_tf_dataset(source, **kwargs)


def test_batch_size_with_a_given_loader_is_refused():
    with DataLoader(Batches(), num_threads=1) as loader, pytest.raises(ValueError, match="give it to the DataLoader"):
        as_tf_dataset(loader, batch_size=2)


class Separable(YieldFunction):
    """A linearly separable problem: the label is whether x[0] > 0; batches are seeded by index."""

    def __len__(self) -> int:
        return 8

    def __call__(self, index: int):
        x = np.random.default_rng(index).normal(size=(16, 4)).astype(np.float32)
        return x, (x[:, 0] > 0).astype(np.int64)


def test_keras_fit_trains_for_several_epochs_from_loader_threads():
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(
        keras.optimizers.Adam(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"]
    )
    dataset = as_tf_dataset(Separable(), num_threads=2, shuffle=True, seed=0, name="fit")
    history = model.fit(dataset, epochs=4, verbose=0, shuffle=False)  # the loader shuffles
    assert len(history.history["loss"]) == 4
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert history.history["accuracy"][-1] > 0.9
    wait_for_no_threads("fit")


class Begun(Separable):
    """Records the epochs the loader begins."""

    def __init__(self) -> None:
        self.begun: list[int] = []

    def on_epoch_begin(self, epoch: int) -> None:
        self.begun.append(epoch)


@pytest.mark.parametrize("given_loader", [False, True])
def test_keras_steps_per_epoch_with_repeat_gets_every_step_and_new_loader_epochs(given_loader):
    """The docstring's advice: with steps_per_epoch, .repeat() feeds every step, one loader epoch per pass."""
    import keras

    class CountSteps(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.steps = 0

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    source = Begun()
    with DataLoader(source, num_threads=2, name="steps") as loader:
        dataset = as_tf_dataset(loader if given_loader else source, num_threads=2, name="steps")
        counter = CountSteps()
        history = model.fit(
            dataset.repeat(), epochs=4, steps_per_epoch=5, verbose=0, shuffle=False, callbacks=[counter]
        )
    assert len(history.history["loss"]) == 4
    assert counter.steps == 4 * 5  # 20 steps from loader epochs of 8 batches; without .repeat(), 16
    assert source.begun[:3] == [0, 1, 2]
    wait_for_no_threads("steps")


def shard_indices(dataset) -> list[int]:
    return [int(y[0]) for _, y in dataset]


def test_input_context_shards_the_epoch_among_the_input_pipelines():
    """What distribute_datasets_from_function gives each worker: disjoint, equal shards that cover the epoch."""
    source = Batches(n=10)
    shards = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=2)
        dataset = as_tf_dataset(source, num_threads=2, shuffle=True, seed=4, input_context=context, name="ctx")
        assert dataset.cardinality().numpy() == 5
        shards.append([shard_indices(dataset) for _ in range(2)])  # two epochs
        wait_for_no_threads("ctx")
    for epoch in range(2):
        first, second = shards[0][epoch], shards[1][epoch]
        assert len(first) == len(second) == 5
        assert sorted(first + second) == list(range(10))
    assert shards[0][0] != shards[0][1]  # a new global permutation each epoch


def test_input_context_with_a_remainder_and_the_per_replica_batch_size():
    class PerReplica(Batches):
        def __init__(self, context):
            super().__init__(n=5)
            self.batch_size = context.get_per_replica_batch_size(8)

        def __call__(self, index):
            return np.full((self.batch_size, 3), index, np.float32), np.full(self.batch_size, index)

    got = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=2)
        dataset = as_tf_dataset(PerReplica(context), num_threads=1, input_context=context, shard_remainder="drop")
        batches = list(dataset)
        assert all(x.shape == (4, 3) for x, _ in batches)
        got.append([int(y[0]) for _, y in batches])
    assert got == [[0, 2], [1, 3]]  # 5 batches for 2 pipelines: the last one dropped


def test_a_data_loader_given_must_be_the_shard_asked_for():
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2)
    with DataLoader(Batches(n=6), num_threads=2, num_shards=2, shard_index=1, ordered=True, name="given") as loader:
        dataset = as_tf_dataset(loader, input_context=context)
        assert dataset.cardinality().numpy() == 3
        assert shard_indices(dataset) == [1, 3, 5]
        with pytest.raises(ValueError, match="reads shard 1 of 2, but shard 0 of 2 was asked for"):
            as_tf_dataset(loader, num_shards=2, shard_index=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_shards": 2}, "either input_context or num_shards/shard_index"),
        ({"prefetch_to_device": "/CPU:0"}, "prefetch_to_device does not go with input_context"),
    ],
)
def test_input_context_conflicts_are_clear_errors(kwargs, message):
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=0, num_replicas_in_sync=2)
    with pytest.raises(ValueError, match=message):
        as_tf_dataset(Batches(), input_context=context, **kwargs)


def test_sharding_arguments_are_checked_at_once():
    with pytest.raises(ValueError, match=r"shard_index must be in range\(num_shards\)"):
        as_tf_dataset(Batches(), num_shards=2, shard_index=2)
    with pytest.raises(ValueError, match="needs a seed, the same on every shard"):
        as_tf_dataset(Batches(), num_shards=2, shuffle=True)
    with pytest.raises(ValueError, match="device_buffer must be at least 1"):
        as_tf_dataset(Batches(), prefetch_to_device="/CPU:0", device_buffer=0)


def test_prefetch_to_device_delivers_the_batches_on_the_device(caplog):
    dataset = as_tf_dataset(Batches(n=6), num_threads=2, ordered=True, prefetch_to_device="/CPU:0", name="dev")
    for _ in range(2):  # each iteration is still one loader epoch
        got = list(dataset)
        assert [int(y[0]) for _, y in got] == list(range(6))
        assert all(x.device.endswith("CPU:0") and y.device.endswith("CPU:0") for x, y in got)
    wait_for_no_threads("dev")
    with caplog.at_level("WARNING", logger="parallel_loader.device_prefetch"):
        unmoved = as_tf_dataset(Batches(n=6), prefetch_to_device="/GPU:7")
    assert unmoved.cardinality().numpy() == 6  # left as it was: the copy would make it unknown
    assert len([r for r in caplog.records if "/GPU:7" in r.getMessage()]) == 1
