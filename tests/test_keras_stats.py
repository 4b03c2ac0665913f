"""parallel_loader.tensorflow._keras.LoaderStats: the loader's figures in each epoch's logs of model.fit."""

from __future__ import annotations

import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from parallel_loader import DataLoader, YieldFunction, as_tf_dataset
from parallel_loader.tensorflow._keras import LoaderStats

KEYS = ("input_bound_pct", "loader_batches_per_s", "loader_threads")


class Points(YieldFunction):
    """Batches of 8 points of a line, y = 2x."""

    def __len__(self):
        return 6

    def __call__(self, index):
        x = np.linspace(0, 1, 8, dtype=np.float32)[:, None] + index
        return x, 2 * x


def fit(dataset, callback):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    callbacks = callback if isinstance(callback, list) else [callback]
    return model.fit(dataset, epochs=2, callbacks=callbacks, verbose=0, shuffle=False)


@pytest.mark.parametrize("given", ["dataset", "loader"])
def test_each_epochs_logs_get_the_input_bound_share_and_the_loaders_rate(given):
    if given == "loader":
        with DataLoader(Points(), num_threads=2) as loader:
            callback = LoaderStats(loader)
            history = fit(as_tf_dataset(loader), callback)
    else:
        with as_tf_dataset(Points(), num_threads=2) as dataset:
            callback = LoaderStats(dataset)
            history = fit(dataset, callback)
    for key in KEYS:
        assert len(history.history[key]) == 2, key
    for bound, rate, threads in zip(*(history.history[k] for k in KEYS), strict=True):
        assert 0 <= bound <= 100
        assert rate > 0
        assert threads == 2
    assert callback.last.batches == 6  # the last epoch's, not the run's
    assert all(wait >= 0 for wait in history.history["first_step_wait_ms"])


class SlowStart(Points):
    """Epochs kept apart (an epoch hook), and each batch takes a while: every epoch's first step waits."""

    def __call__(self, index):
        time.sleep(0.02)
        return super().__call__(index)

    def on_epoch_begin(self, epoch):
        pass


def test_the_first_steps_wait_is_the_stall_at_each_epochs_start_for_training_data_only():
    with as_tf_dataset(SlowStart(), num_threads=2) as dataset:
        training, other = LoaderStats(dataset), LoaderStats(dataset, prefix="val_")
        history = fit(dataset, [training, other])
    assert len(history.history["first_step_wait_ms"]) == 2
    assert all(wait > 0 for wait in history.history["first_step_wait_ms"])  # nothing was made ahead
    assert "val_first_step_wait_ms" not in history.history and "val_loader_threads" in history.history


def test_a_dataset_not_made_by_as_tf_dataset_is_refused_with_what_to_pass():
    with pytest.raises(TypeError, match="pass the DataLoader"):
        LoaderStats(tf.data.Dataset.range(3))
