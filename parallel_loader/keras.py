"""A Keras callback that puts the loader's figures in each epoch's ``logs``.

Training with ``model.fit(as_tf_dataset(...))``, Keras shows its own progress
bar and keeps ``History``; ``LoaderStats`` adds to each epoch's ``logs``, and so
to both, how input-bound the epoch was and how fast the loader delivered.
Keras is imported here only: ``import parallel_loader`` stays free of it.
"""

from __future__ import annotations

import time
from typing import Any

import keras

from .data_loader import DataLoader
from .telemetry import LoaderStats as LoaderSnapshot
from .tf_data import loader_of

__all__ = ["LoaderStats"]


class LoaderStats(keras.callbacks.Callback):
    """Adds the loader's figures of each epoch to its ``logs``.

    Keys added (``prefix`` before each):

    * ``input_bound_pct``: the share of the epoch (in %) that the dataset's
      consumer, TensorFlow's input thread, waited for the loader's batches:
      near 0 the model is the bottleneck, near 100 the input is;
    * ``loader_batches_per_s``: batches the loader delivered per second of the epoch;
    * ``loader_threads``: its thread count at the epoch's end (it changes with
      ``num_threads="auto"``).

    Put it before Keras's own callbacks (any place in ``callbacks=[...]`` is
    before them) so that the progress bar and ``History`` see the keys.

    Args:
        source: the ``DataLoader`` given to ``as_tf_dataset``, or the dataset
            ``as_tf_dataset`` returned (which also finds the loader that each
            epoch of a dataset over a yield function makes).
        prefix: put before each key, e.g. ``"val_"`` for a second callback on
            validation data.

    Raises:
        TypeError: ``source`` is neither (see ``tf_data.loader_of``).
    """

    def __init__(self, source: Any, prefix: str = "") -> None:
        super().__init__()
        if not isinstance(source, DataLoader):
            loader_of(source)  # checks it now, not at the first epoch's end
        self.source = source
        self.prefix = prefix
        self.last: LoaderSnapshot | None = None  # the last epoch's figures
        self._begin: tuple[DataLoader | None, LoaderSnapshot | None, float] = (None, None, 0.0)

    def _loader(self) -> DataLoader | None:
        return self.source if isinstance(self.source, DataLoader) else loader_of(self.source)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        loader = self._loader()
        self._begin = (loader, loader.stats() if loader is not None else None, time.perf_counter())

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        seconds = time.perf_counter() - self._begin[2]
        loader = self._loader()
        if loader is None or logs is None:
            return
        began, before = self._begin[:2]
        stats = loader.stats()
        # A dataset over a yield function makes a new loader for each epoch after on_epoch_begin.
        if began is loader and before is not None:
            stats = stats.since(before)
        self.last = stats
        logs[f"{self.prefix}input_bound_pct"] = 100 * stats.wait_seconds / seconds if seconds > 0 else 0.0
        logs[f"{self.prefix}loader_batches_per_s"] = stats.batches / seconds if seconds > 0 else 0.0
        logs[f"{self.prefix}loader_threads"] = float(loader.num_threads)
