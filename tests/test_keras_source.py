"""A Keras PyDataset (or Sequence) as the loader's data: DataLoader, Train, as_tf_dataset and model.fit."""

from __future__ import annotations

import logging
import math
import subprocess
import sys

import keras
import numpy as np
import pytest
from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

from parallel_loader import DataLoader, Train, as_tf_dataset
from parallel_loader._data.keras_source import KerasSource, as_yield_function


class Points(keras.utils.PyDataset):
    """Written as the Keras docs show a PyDataset, with an ``on_epoch_end`` that reshuffles the samples."""

    def __init__(self, samples, batch_size, seed=0, **kwargs):
        super().__init__(**kwargs)
        rng = np.random.default_rng(seed)
        self.x = rng.normal(size=(samples, 2)).astype(np.float32)
        self.y = (self.x[:, 0] > 0).astype(np.int64)
        self.batch_size = batch_size
        self.order = np.arange(samples)
        self.rng = np.random.default_rng(seed + 1)
        self.epochs_ended = 0

    def __len__(self):
        return math.ceil(len(self.x) / self.batch_size)

    def __getitem__(self, idx):
        rows = self.order[idx * self.batch_size : (idx + 1) * self.batch_size]
        return self.x[rows], self.y[rows]

    def on_epoch_end(self):
        self.epochs_ended += 1
        self.order = self.rng.permutation(len(self.x))


def keras_epochs(dataset, epochs):
    """The batches of each epoch as Keras's own fit iterates a PyDataset (without shuffle)."""
    adapter = PyDatasetAdapter(dataset, shuffle=False)
    got = []
    for _ in range(epochs):
        adapter.on_epoch_begin()
        got.append([tuple(np.asarray(part) for part in batch) for batch in adapter.get_numpy_iterator()])
        adapter.on_epoch_end()
    return got


def assert_same_epochs(got, expected):
    assert len(got) == len(expected)
    for epoch, (ours, theirs) in enumerate(zip(got, expected, strict=True)):
        assert len(ours) == len(theirs), epoch
        for a, b in zip(ours, theirs, strict=True):
            assert all(np.array_equal(np.asarray(p), q) for p, q in zip(a, b, strict=True)), epoch


def test_a_data_loader_gives_the_batches_keras_gives_and_calls_on_epoch_end_once_per_epoch():
    expected = keras_epochs(Points(50, 8), 3)
    assert len({epoch[0][0].tobytes() for epoch in expected}) == 3  # reshuffled every epoch
    data = Points(50, 8)
    with DataLoader(data, num_threads=3, ordered=True, name="keras") as loader:
        assert isinstance(loader.yield_fn, KerasSource) and not loader.overlap_epochs  # on_epoch_end keeps them apart
        got = []
        for _ in range(3):
            got.append(list(loader))
            assert data.epochs_ended == len(got)
    assert_same_epochs(got, expected)


def test_fit_through_as_tf_dataset_trains_on_keras_batches_with_on_epoch_end_once_per_epoch():
    data = Points(256, 32)
    with as_tf_dataset(data, num_threads=2, ordered=True, name="fit-keras") as dataset:
        assert_same_epochs([list(dataset) for _ in range(2)], keras_epochs(Points(256, 32), 2))
        assert data.epochs_ended == 2
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
        model.compile(keras.optimizers.Adam(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(dataset, epochs=3, verbose=0, shuffle=False)
    assert data.epochs_ended == 2 + 3
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_train_trains_on_a_keras_dataset_with_the_batches_keras_gives():
    data, seen = Points(64, 8), []
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.Adam(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    def step(batch):
        seen[-1].append(batch)
        return model.train_on_batch(*batch, return_dict=True)

    trainer = Train(
        step,
        data,
        Points(16, 8, seed=5),
        val_task=lambda batch: None,
        num_threads=2,
        shuffle=False,
        ordered=True,
        on_epoch_end=lambda stats: seen.append([]),
    )
    seen.append([])
    history = trainer.run(3, progress=False)
    assert [stats.val.batches for stats in history] == [2, 2, 2]
    assert data.epochs_ended == 3
    assert_same_epochs(seen[:3], keras_epochs(Points(64, 8), 3))
    assert history[-1].train.metrics["loss"] < history[0].train.metrics["loss"]


def test_a_keras_dataset_without_hooks_lets_epochs_overlap():
    class Plain(keras.utils.PyDataset):
        def __len__(self):
            return 3

        def __getitem__(self, idx):
            return np.full((2, 1), idx, np.float32)

    with DataLoader(Plain(), num_threads=2, ordered=True, name="plain") as loader:
        assert loader.overlap_epochs
        assert [[int(b[0, 0]) for b in loader] for _ in range(2)] == [[0, 1, 2]] * 2


def test_keras_parallelism_settings_are_ignored_with_one_log_line(caplog):
    with caplog.at_level(logging.INFO, logger="parallel_loader._data.keras_source"):
        as_yield_function(Points(8, 4))
        assert not caplog.records  # nothing asked for, nothing to say
        as_yield_function(Points(8, 4, workers=4, use_multiprocessing=True))
    (record,) = caplog.records
    assert "workers=4, use_multiprocessing=True are ignored: the loader's threads" in record.getMessage()


def test_an_endless_keras_dataset_is_a_clear_error():
    class Endless(keras.utils.PyDataset):
        @property
        def num_batches(self):
            return None

        def __getitem__(self, idx):
            return np.zeros(2)

    with pytest.raises(ValueError, match="Endless is endless"):
        DataLoader(Endless())


def test_other_yield_functions_pass_through_and_keras_is_not_imported_for_them():
    code = (
        "import sys\n"
        "from parallel_loader import DataLoader\n"
        "class Data:\n"
        "    def __len__(self): return 2\n"
        "    def __call__(self, i): return i\n"
        "data = Data()\n"
        "with DataLoader(data, num_threads=1) as loader:\n"
        "    assert loader.yield_fn is data and list(loader) in ([0, 1], [1, 0])\n"
        "assert 'keras' not in sys.modules, 'keras was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_batch_size_with_a_keras_dataset_is_refused():
    # Its items are batches already: batching them again would make batches of batches.
    with pytest.raises(ValueError, match="leave batch_size out"):
        DataLoader(Points(20, 4), batch_size=4)
