"""Keras callbacks: ``LoaderStats`` puts the loader's figures in each epoch's ``logs``; ``BackupAndRestore`` resumes.

Training with ``model.fit(as_tf_dataset(...))``, Keras shows its own progress
bar and keeps ``History``. ``LoaderStats`` adds to each epoch's ``logs``, and so
to both: how input-bound the epoch was, and how fast the loader delivered.
``BackupAndRestore`` saves the model and the loader's position together, as
the batches the model finished, so a rerun of ``fit`` goes on mid-epoch.
Keras is imported here only: ``import parallel_loader`` stays free of it.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

import keras

from .._core.telemetry import LoaderStats as LoaderSnapshot
from .._loader.data_loader import DataLoader
from ._loader_dataset import resume_handled
from ._tf_data import loader_of

__all__ = ["BackupAndRestore", "LoaderStats"]

METADATA = "training_metadata.json"  # names the weights file of the last whole backup
RAN_OUT = "Your input ran out of data"  # Keras's warning at an epoch that ends early
WEIGHTS = ("backup-0.weights.h5", "backup-1.weights.h5")  # written in turn


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


class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """Keras's ``BackupAndRestore`` that also saves and restores the loader's position, and resumes mid-epoch.

    The position saved is the batches the model finished, counted at
    ``on_train_batch_end``. Batches made or prefetched by tf.data are not counted.
    Each backup holds the weights (with the optimizer's state and step count),
    the epoch, the batches of it trained, and ``loader.state_dict`` for them.
    A small metadata file names the weights file it goes with. It is replaced in
    one step, so a kill at any moment leaves a whole backup.

    Run the same ``fit`` command again after a kill. It restores the backup in
    ``on_train_begin``, and the loader goes on with the batches not trained on.
    The interrupted epoch ends after its remaining batches. The dataset keeps its
    declared length, so the later epochs are whole. No batch is trained twice or skipped.

    Limits: one ``train_function`` call per step (``steps_per_execution=1``) when
    ``save_freq`` is a number, and no distribution strategy.
    See :doc:`/guide/training`.

    Args:
        backup_dir: where the backups go. Keep it for this training run only.
        dataset: the dataset ``as_tf_dataset`` returned, given to ``fit``, or its ``DataLoader``.
        save_freq: ``"epoch"`` backs up at each epoch's end; a number, every that many batches too.
        delete_checkpoint: remove ``backup_dir`` once ``fit`` has finished.

    Attributes:
        loader: the ``DataLoader`` whose position it saves.
    """

    def __init__(
        self, backup_dir: str | os.PathLike[str], dataset: Any, save_freq: str | int = "epoch",
        delete_checkpoint: bool = True,
    ) -> None:  # fmt: skip
        super().__init__(os.fspath(backup_dir), save_freq, delete_checkpoint=delete_checkpoint)
        if isinstance(save_freq, int) and save_freq < 1:
            raise ValueError(f"save_freq must be 'epoch' or a number of batches of at least 1, not {save_freq}")
        self.loader: DataLoader = dataset if isinstance(dataset, DataLoader) else loader_of(dataset)
        resume_handled(self.loader)  # the resumed epoch ends after its remaining batches (``_wrap``)
        self._metadata = Path(self.backup_dir) / METADATA
        self._run = 0  # batches trained in this run of the epoch
        self._before = 0  # batches of the epoch trained before this run (a resumed epoch)
        self._left: int | None = None  # batches the resumed epoch still has, while it runs
        self._unsaved = 0  # batches trained since the last backup
        self._epoch_state: dict[str, Any] | None = None  # the loader's state once the epoch's last batch is trained
        self._filter: Any = None  # the warnings filter put in while the resumed epoch ends

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        _unwrap(self.model)
        if self.save_freq != "epoch" and self.model.steps_per_execution != 1:
            raise ValueError("BackupAndRestore with a numeric save_freq needs steps_per_execution=1")
        self._current_epoch = self._run = self._before = self._unsaved = 0
        self._left = None
        backup = read_backup(self._metadata)
        if backup is None:
            return
        if not self.model.built:
            raise ValueError("BackupAndRestore needs a built model: build it before calling fit()")
        if self.model.optimizer is not None and not self.model.optimizer.built:
            self.model.optimizer.build(self.model.trainable_variables)  # its variables exist before the load
        self.model.load_weights(Path(self.backup_dir) / backup["weights"])
        self.loader.load_state_dict(backup["loader"])
        self.model._initial_epoch = self._current_epoch = backup["epoch"]
        if backup["batch"]:
            steps = self.params.get("steps")
            if steps is None:
                raise ValueError("BackupAndRestore resumes mid-epoch only over a dataset of known length")
            self._before, self._left = backup["batch"], steps - backup["batch"]
            _wrap(self.model, self)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._current_epoch = epoch  # Keras's own leaves it at 0 in a rerun's first epoch
        self._run = 0
        self._epoch_state = None

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._run += 1
        self._unsaved += 1
        if self._left is not None:
            self._left -= 1
        if self._before + self._run == self.params.get("steps"):
            # The epoch's last batch: later, the loader may have begun the next epoch.
            self._epoch_state = self.loader.state_dict(batches=self._run)
        if self.save_freq != "epoch" and self._unsaved >= self.save_freq:
            self._save(self._current_epoch, self._before + self._run, self.loader.state_dict(batches=self._run))

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self._left is not None:  # the resumed epoch ended after its remaining batches
            _unwrap(self.model)
            self._left = None
        if self._filter is not None and self._filter in warnings.filters:
            warnings.filters.remove(self._filter)
        self._filter = None
        if self.save_freq == "epoch" or self._unsaved:
            if self._epoch_state is not None:
                self._save(epoch + 1, 0, self._epoch_state)
            else:  # stopped early (``stop_training``): the batches trained so far
                self._save(epoch, self._before + self._run, self.loader.state_dict(batches=self._run))
        self._before = 0

    def _save(self, epoch: int, batch: int, state: dict[str, Any]) -> None:
        """Write the weights to the file the metadata does not name, then replace the metadata."""
        self._unsaved = 0
        directory = Path(self.backup_dir)
        directory.mkdir(parents=True, exist_ok=True)
        backup = read_backup(self._metadata)
        weights = WEIGHTS[1] if backup is not None and backup["weights"] == WEIGHTS[0] else WEIGHTS[0]
        self.model.save_weights(directory / weights, overwrite=True)
        _sync(directory / weights)
        write_atomically(self._metadata, {"epoch": epoch, "batch": batch, "weights": weights, "loader": state})


def read_backup(path: Path) -> dict[str, Any] | None:
    """The backup that the metadata file at ``path`` describes, or ``None`` if there is none yet."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def write_atomically(path: Path, content: dict[str, Any]) -> None:
    """Write ``content`` as JSON to ``path`` in one step: a reader sees the old file or the new one, whole."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(content), encoding="utf-8")
    _sync(partial)
    os.replace(partial, path)


def _sync(path: Path) -> None:
    """Flush ``path`` to the disk, so that a file named by the metadata is whole after a crash."""
    with open(path, "rb") as file:
        os.fsync(file.fileno())


def _wrap(model: keras.Model, callback: BackupAndRestore) -> None:
    """End the resumed epoch once its remaining batches are trained, as a dataset that runs out does.

    Keras catches the ``StopIteration`` and ends the epoch; the iterator never reads past them.
    """
    train_function = model.train_function

    def limited(iterator: Any) -> Any:
        if callback._left is not None and callback._left <= 0:
            # Keras warns that the input ran out; here the epoch ends as planned.
            warnings.filterwarnings("ignore", message=RAN_OUT, category=UserWarning)
            callback._filter = warnings.filters[0]
            raise StopIteration
        return train_function(iterator)

    limited.unlimited = train_function  # type: ignore[attr-defined]
    model.train_function = limited


def _unwrap(model: keras.Model) -> None:
    """Give ``model`` back the train function ``_wrap`` replaced, if it did."""
    while hasattr(model.train_function, "unlimited"):
        model.train_function = model.train_function.unlimited
