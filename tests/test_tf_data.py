"""as_tf_dataset: signatures, one loader for the dataset's lifetime, thread ownership, model.fit and tf.distribute."""

from __future__ import annotations

import gc
import json
import math
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf

from parallel_loader import DataLoader, YieldFunction, as_tf_dataset
from parallel_loader.tensorflow._tf_data import loader_of


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


def test_signature_is_inferred_from_the_first_batch():
    dataset = as_tf_dataset(Batches(), num_threads=2)
    assert dataset.element_spec == (
        tf.TensorSpec((None, 3), tf.float32),
        tf.TensorSpec((None,), tf.int64),
    )
    assert dataset.cardinality().numpy() == 5


def test_dict_batches_keep_their_keys():
    with as_tf_dataset(Batches(as_dict=True), num_threads=2) as dataset:
        assert set(dataset.element_spec) == {"x", "y"}
        values = sorted(int(b["y"][0]) for b in dataset)
    assert values == [0, 1, 2, 3, 4]


def test_each_iteration_is_an_epoch_of_one_loader_whose_threads_end_with_the_with_block():
    batches = Batches()
    with as_tf_dataset(batches, num_threads=3, name="own") as dataset:
        loader = loader_of(dataset)
        assert not loader_threads("own")  # nothing starts before the first iteration
        for epoch in range(3):
            got = [(x.numpy(), y.numpy()) for x, y in dataset]
            assert sorted(int(y[0]) for _, y in got) == [0, 1, 2, 3, 4]
            for x, y in got:
                assert x.shape == (2, 3) and (x == y[0]).all()
            assert loader_of(dataset) is loader and loader.epoch == epoch
            assert len(loader_threads("own")) == 3  # the same threads go on to the next epoch
    assert loader.closed and not loader_threads("own")  # close() joined them
    # One call to infer the signature, 3 epochs, and at most one epoch's worth made ahead.
    assert 1 + 3 * 5 <= batches.calls <= 1 + 4 * 5


def test_threads_end_when_the_dataset_is_no_longer_referenced():
    dataset = as_tf_dataset(Batches(), num_threads=2, name="dropped")
    repeated = dataset.repeat(2)
    loader = loader_of(dataset)
    del dataset
    gc.collect()
    assert len(list(repeated)) == 10  # a dataset derived from it keeps it alive
    assert len(loader_threads("dropped")) == 2
    del repeated
    gc.collect()  # the finaliser closes the loader and joins its threads
    assert loader.closed and not loader_threads("dropped")


def test_a_dataset_iterated_without_a_name_lives_as_long_as_its_iterator():
    got = 0
    for _ in as_tf_dataset(Batches(n=20), num_threads=2, max_len=2, name="anon"):
        got += 1
        gc.collect()  # TensorFlow's iterator keeps the dataset, and so its loader, alive
    assert got == 20
    gc.collect()
    assert not loader_threads("anon")


AT_EXIT = """
import atexit, threading
# Registered first, so it runs last: after the dataset's finaliser, which runs at exit.
atexit.register(lambda: print("at exit:", [t.name for t in threading.enumerate() if t.name.startswith("kept-")]))
import numpy as np
from parallel_loader import as_tf_dataset
class Batches:
    def __len__(self): return 4
    def __call__(self, index): return np.full(2, index, np.float32)
dataset = as_tf_dataset(Batches(), num_threads=2, name="kept")
print(len(list(dataset)), "batches;", len([t for t in threading.enumerate() if t.name.startswith("kept-")]), "threads")
"""


def test_threads_of_a_dataset_still_referenced_end_at_interpreter_exit():
    done = subprocess.run([sys.executable, "-c", AT_EXIT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-2:] == ["4 batches; 2 threads", "at exit: []"]


def test_close_ends_the_threads_and_a_later_iteration_says_the_loader_is_closed():
    dataset = as_tf_dataset(Batches(), num_threads=2, name="closed")
    assert len(list(dataset)) == 5
    dataset.close()
    assert not loader_threads("closed")
    dataset.close()  # twice is fine
    with pytest.raises(tf.errors.OpError, match="closed is closed"):
        list(dataset)


def test_two_iterations_at_once_are_refused_and_the_first_goes_on_intact():
    with as_tf_dataset(Batches(n=6), num_threads=2, ordered=True, name="twice") as dataset:
        first = iter(dataset)
        got = [int(next(first)[1][0])]
        second = iter(dataset)
        with pytest.raises(tf.errors.OpError, match="being iterated already"):
            next(second)
        got += [int(next(first)[1][0]) for _ in range(5)]
        assert got == list(range(6))
        # The first has had every batch of its epoch, and the epoch is complete: a new iteration may start.
        assert [int(y[0]) for _, y in dataset] == list(range(6))
        assert loader_of(dataset).epoch == 1
        assert not list(first)


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
    with (
        DataLoader(batches, num_threads=2, name="epochs") as loader,
        as_tf_dataset(loader if given_loader else batches, num_threads=2, name="epochs") as dataset,
    ):
        for expected in ([0], [0, 1]):
            assert len(list(dataset.take(5))) == 5  # never asks for a sixth batch
            assert batches.ended == expected


def test_an_iterator_dropped_part_way_ends_its_epoch_and_the_next_iteration_is_a_whole_one():
    with as_tf_dataset(Batches(n=50), num_threads=2, max_len=2, ordered=True, name="dropped") as dataset:
        iterator = iter(dataset)
        next(iterator)
        del iterator  # TensorFlow releases it, and its epoch ends
        assert [int(y[0]) for _, y in dataset] == list(range(50))
        assert loader_of(dataset).epoch == 1


def test_an_iterator_dropped_in_a_reference_cycle_does_not_block_the_next_iteration():
    with as_tf_dataset(Batches(n=8), num_threads=2, max_len=2, ordered=True, name="cycle") as dataset:
        iterator = iter(dataset)
        next(iterator)
        cycle = [iterator]
        cycle.append(cycle)  # only the garbage collector can release it, and with it the epoch
        del iterator, cycle
        gc.disable()  # so that only the dataset's own collection can release it
        try:
            assert [int(y[0]) for _, y in dataset] == list(range(8))
        finally:
            gc.enable()
        assert loader_of(dataset).epoch == 1


def test_a_given_data_loader_is_iterated_but_not_closed():
    with DataLoader(Batches(), num_threads=2, shuffle=True, seed=1, name="given") as loader:
        with as_tf_dataset(loader) as dataset:
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

    with as_tf_dataset(finite_stream, tf.TensorSpec((2,), tf.float32), num_threads=1) as dataset:
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
    kwargs = dict(num_threads=2, batch_size=4, drop_last=True, shuffle=True, seed=0, ordered=True)
    with as_tf_dataset(Pairs(), **kwargs) as dataset:
        assert dataset.element_spec == (tf.TensorSpec((None, 3), tf.float32), tf.TensorSpec((None,), tf.int64))
        assert dataset.cardinality().numpy() == 2
        epochs = [[y.numpy().tolist() for _, y in dataset] for _ in range(3)]
    for batches in epochs:
        assert [len(b) for b in batches] == [4, 4] and len({i for b in batches for i in b}) == 8
    assert epochs[0] != epochs[1] != epochs[2]


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
    with as_tf_dataset(Separable(), num_threads=2, shuffle=True, seed=0, name="fit") as dataset:
        history = model.fit(dataset, epochs=4, verbose=0, shuffle=False)  # the loader shuffles
    assert len(history.history["loss"]) == 4
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert history.history["accuracy"][-1] > 0.9


def test_keras_fit_with_auto_threads_and_validation_data_keeps_one_loader_for_all_epochs():
    import keras

    from parallel_loader.tensorflow._keras import LoaderStats

    class Loaders(keras.callbacks.Callback):
        """The loaders each epoch of fit read, and their epochs, seen at the end of each epoch."""

        def __init__(self, *datasets) -> None:
            super().__init__()
            self.datasets = datasets
            self.seen: list[tuple[int, ...]] = []

        def on_epoch_end(self, epoch, logs=None):
            self.seen.append(tuple(x for d in self.datasets for x in (id(loader_of(d)), loader_of(d).epoch)))

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    dataset = as_tf_dataset(Separable(), num_threads="auto", name="fit5")
    validation = as_tf_dataset(Separable(), num_threads=1, name="val5")
    loaders, stats = Loaders(dataset, validation), LoaderStats(dataset)
    history = model.fit(
        dataset, epochs=5, validation_data=validation, verbose=0, shuffle=False, callbacks=[stats, loaders]
    )
    train, val = loader_of(dataset), loader_of(validation)
    assert loaders.seen == [(id(train), epoch, id(val), epoch) for epoch in range(5)]
    assert stats.loader is train and len(history.history["loader_threads"]) == 5
    assert stats.last.batches == 8  # the last epoch's own figures
    assert loader_threads("fit5") and loader_threads("val5")  # alive between fits, for the next one
    del dataset, validation, stats, loaders
    gc.collect()
    assert train.closed and val.closed
    assert not loader_threads("fit5") and not loader_threads("val5")


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
    with (
        DataLoader(source, num_threads=2, name="steps") as loader,
        as_tf_dataset(loader if given_loader else source, num_threads=2, name="steps") as dataset,
    ):
        counter = CountSteps()
        history = model.fit(
            dataset.repeat(), epochs=4, steps_per_epoch=5, verbose=0, shuffle=False, callbacks=[counter]
        )
    assert len(history.history["loss"]) == 4
    assert counter.steps == 4 * 5  # 20 steps from loader epochs of 8 batches; without .repeat(), 16
    assert source.begun[:3] == [0, 1, 2]


def test_distribute_datasets_from_function_reads_each_pipelines_dataset_through_one_loader():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    made = []

    def dataset_fn(context):
        made.append(as_tf_dataset(Batches(n=4), num_threads=2, ordered=True, input_context=context, name="dist"))
        return made[-1]

    distributed = strategy.distribute_datasets_from_function(dataset_fn)
    for _ in range(2):
        assert [int(y[0]) for _, y in distributed] == [0, 1, 2, 3]
    assert len(made) == 1 and loader_of(made[0]).epoch == 1
    made.clear()
    del distributed
    gc.collect()
    assert not loader_threads("dist")


def shard_indices(dataset) -> list[int]:
    return [int(y[0]) for _, y in dataset]


def test_input_context_shards_the_epoch_among_the_input_pipelines():
    """What distribute_datasets_from_function gives each worker: disjoint, equal shards that cover the epoch."""
    source = Batches(n=10)
    shards = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=2)
        with as_tf_dataset(source, num_threads=2, shuffle=True, seed=4, input_context=context) as dataset:
            assert dataset.cardinality().numpy() == 5
            shards.append([shard_indices(dataset) for _ in range(2)])  # two epochs
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
        with as_tf_dataset(
            PerReplica(context), num_threads=1, input_context=context, shard_remainder="drop"
        ) as dataset:
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
    with as_tf_dataset(Batches(n=6), num_threads=2, ordered=True, prefetch_to_device="/CPU:0") as dataset:
        for _ in range(2):  # each iteration is still one loader epoch
            got = list(dataset)
            assert [int(y[0]) for _, y in got] == list(range(6))
            assert all(x.device.endswith("CPU:0") and y.device.endswith("CPU:0") for x, y in got)
    with caplog.at_level("WARNING", logger="parallel_loader.tensorflow._device_prefetch"):
        unmoved = as_tf_dataset(Batches(n=6), prefetch_to_device="/GPU:7")
    assert unmoved.cardinality().numpy() == 6  # left as it was: the copy would make it unknown
    assert len([r for r in caplog.records if "/GPU:7" in r.getMessage()]) == 1


MIRRORED = """
import json, math
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from parallel_loader import as_tf_dataset

class Batches:
    def __len__(self): return 27
    def __call__(self, i): return np.full((4, 3), i / 27, np.float32), np.ones((4, 1), np.float32)

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
report = {}
for remainder in ("pad", "drop"):
    made = []
    def dataset_fn(context):
        made.append(as_tf_dataset(Batches(), num_threads=2, ordered=True, input_context=context,
                                  shard_remainder=remainder, name="mirrored"))
        return made[-1]
    distributed = strategy.distribute_datasets_from_function(dataset_fn)
    steps = [[int(tf.shape(x)[0]) for x in strategy.experimental_local_results(x)] for x, _ in distributed]
    report[remainder] = {"steps": steps, "length": len(made[0].loader)}
    if remainder == "pad":
        with strategy.scope():
            model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
            model.compile(optimizer="sgd", loss="mse")
        losses = []
        logged = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: losses.append(float(logs["loss"])))
        model.fit(distributed, epochs=2, verbose=0, callbacks=[logged])
        report["losses"] = losses
    made[0].close()
print(json.dumps(report))
"""


def test_mirrored_strategy_over_two_replicas_gets_full_global_batches_from_an_odd_epoch():
    # Two logical CPU devices must be set before TensorFlow starts its devices: a fresh interpreter.
    done = subprocess.run([sys.executable, "-c", MIRRORED], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    # 27 batches for 2 replicas: "pad" tops the epoch up to 28 (14 steps), "drop" leaves one out (13).
    assert report["pad"] == {"steps": [[4, 4]] * 14, "length": 28}
    assert report["drop"] == {"steps": [[4, 4]] * 13, "length": 26}
    assert len(report["losses"]) == 2 * 14 and all(math.isfinite(loss) for loss in report["losses"])


def test_replicas_keep_the_epoch_a_multiple_of_them_and_must_agree_with_the_context_and_the_loader():
    with as_tf_dataset(Batches(n=5), ordered=True, replicas=2, shard_remainder="drop", name="reps") as dataset:
        assert int(dataset.cardinality()) == 4 and shard_indices(dataset) == [0, 1, 2, 3]
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2)
    with pytest.raises(ValueError, match="the input context feeds 2 replicas per input pipeline"):
        as_tf_dataset(Batches(), input_context=context, replicas=3)
    with DataLoader(Batches(), replicas=2) as loader, pytest.raises(ValueError, match="but 3 was asked for"):
        as_tf_dataset(loader, replicas=3)


def test_fit_over_a_loader_restored_mid_epoch_fails_before_its_first_step_naming_backup_and_restore():
    import keras

    with DataLoader(Separable(), num_threads=2, name="first") as first:
        batches = iter(first)
        for _ in range(3):
            next(batches)
        mid_epoch = first.state_dict()
        batches.close()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    steps = []
    record = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: steps.append(batch))
    refused = "restored mid-epoch by load_state_dict.*BackupAndRestore"
    # Restored, then given to as_tf_dataset: refused there.
    with DataLoader(Separable(), num_threads=2, name="restored") as restored:
        restored.load_state_dict(mid_epoch)
        with pytest.raises(ValueError, match=refused):
            model.fit(as_tf_dataset(restored), epochs=2, verbose=0, shuffle=False, callbacks=[record])
    # Restored after as_tf_dataset: the dataset refuses the part epoch at its first element.
    with as_tf_dataset(Separable(), num_threads=2, name="after") as dataset:
        loader_of(dataset).load_state_dict(mid_epoch)
        with pytest.raises((ValueError, tf.errors.OpError), match=refused):
            model.fit(dataset, epochs=2, verbose=0, shuffle=False, callbacks=[record])
    assert steps == []  # not one step trained
    # A state saved at an epoch's end resumes with whole epochs: fit takes it.
    with DataLoader(Separable(), num_threads=2, name="whole") as whole:
        list(whole)
        at_epoch_end = whole.state_dict()
    with DataLoader(Separable(), num_threads=2, name="next") as restored:
        restored.load_state_dict(at_epoch_end)
        model.fit(as_tf_dataset(restored), epochs=2, verbose=0, shuffle=False, callbacks=[record])
    assert len(steps) == 2 * len(Separable())
    # A loader left part way through an epoch begins its next iteration with a whole epoch: fit takes it too.
    steps.clear()
    with DataLoader(Separable(), num_threads=2, name="left") as left:
        batches = iter(left)
        next(batches)
        batches.close()
        model.fit(as_tf_dataset(left), epochs=1, verbose=0, shuffle=False, callbacks=[record])
    assert len(steps) == len(Separable())
