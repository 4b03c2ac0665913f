"""A Keras callback that puts the loader's figures in each epoch's ``logs``.

Training with ``model.fit(as_tf_dataset(...))``, Keras shows its own progress
bar and keeps ``History``. ``LoaderStats`` adds to each epoch's ``logs``, and so
to both: how input-bound the epoch was, and how fast the loader delivered.
Keras is imported here only: ``import parallel_loader`` stays free of it.
"""

from __future__ import annotations

import time
from typing import Any

import keras

from .._core.telemetry import LoaderStats as LoaderSnapshot
from .._loader.data_loader import DataLoader
from ._tf_data import loader_of

__all__ = ["LoaderStats"]


class LoaderStats(keras.callbacks.Callback):
    """Adds the loader's figures of each epoch to its ``logs``.

    Keys added (``prefix`` before each):

    * ``input_bound_pct``: the share of the epoch (in %) that the dataset's
      consumer waited for the loader's batches. That consumer is TensorFlow's
      input thread. Near 0 the model is the bottleneck, near 100 the input is;
    * ``loader_batches_per_s``: batches the loader delivered per second of the epoch;
    * ``loader_threads``: its thread count at the epoch's end (it changes with
      ``num_threads="auto"``);
    * ``first_step_wait_ms``: how long the consumer waited for the loader during
      the epoch's first training step. It is the stall at the epoch's boundary.
      It is near 0 when the loader made the epoch's first batches ahead (epochs
      overlap). It describes training data, so a callback with any ``prefix``
      leaves it out.

    Put it before Keras's own callbacks (any place in ``callbacks=[...]`` is
    before them), so that the progress bar and ``History`` see the keys.
    See :doc:`/guide/telemetry`.

    Args:
        source: the ``DataLoader`` given to ``as_tf_dataset``, or the dataset
            ``as_tf_dataset`` returned (the one loader it keeps for all its epochs).
        prefix: put before each key, e.g. ``"val_"`` for a second callback on
            validation data.

    Attributes:
        loader: the ``DataLoader`` whose figures it reads.
        last: the last epoch's figures (a ``telemetry.LoaderStats``), ``None`` before.

    Raises:
        TypeError: ``source`` is neither (see ``tf_data.loader_of``).
    """

    def __init__(self, source: Any, prefix: str = "") -> None:
        super().__init__()
        self.source = source
        self.prefix = prefix
        self.last: LoaderSnapshot | None = None  # the last epoch's figures
        self.loader: DataLoader = source if isinstance(source, DataLoader) else loader_of(source)
        self._begin: tuple[LoaderSnapshot | None, float] = (None, 0.0)
        self._first_step_wait: float | None = None  # seconds, once the epoch's first step ended

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._begin = (self.loader.stats(), time.perf_counter())
        self._first_step_wait = None

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        before = self._begin[0]
        if self._first_step_wait is None and before is not None and not self.prefix:
            self._first_step_wait = self.loader.stats().since(before).wait_seconds

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        before, began = self._begin
        seconds = time.perf_counter() - began
        if logs is None:
            return
        stats = self.loader.stats()
        if before is not None:
            stats = stats.since(before)
        self.last = stats
        logs[f"{self.prefix}input_bound_pct"] = 100 * stats.wait_seconds / seconds if seconds > 0 else 0.0
        logs[f"{self.prefix}loader_batches_per_s"] = stats.batches / seconds if seconds > 0 else 0.0
        logs[f"{self.prefix}loader_threads"] = float(self.loader.num_threads)
        if self._first_step_wait is not None:
            logs["first_step_wait_ms"] = 1000 * self._first_step_wait
