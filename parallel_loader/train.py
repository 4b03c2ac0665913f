"""The orchestrator: loader threads feed batches, the calling thread trains on them.

``Train`` composes the pieces of the original design: a ``DataLoader`` (threads
plus a bounded queue) for each of the training, validation and test data, and
the user's task callables, which run in the thread that called ``run``. That is
the main thread in a training script, where TensorFlow steps belong. ``Train``
knows nothing of TensorFlow either: a task is any callable taking a batch. Only
``prefetch_to_device`` brings TensorFlow in, through ``DevicePrefetcher``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ._checks import check_int
from .data_loader import STOP_TIMEOUT, DataLoader
from .device_prefetch import DevicePrefetcher
from .sharding import Remainder
from .yield_function import epoch_length

__all__ = ["EpochStats", "PassStats", "Train"]

log = logging.getLogger(__name__)


@dataclass
class PassStats:
    """One pass over one data set.

    Attributes:
        batches: batches the task was called with.
        seconds: wall time of the pass.
        wait_seconds: time the calling thread spent waiting for the next batch.
        outputs: what the task returned for each batch, when ``keep_outputs`` is set.
    """

    batches: int = 0
    seconds: float = 0.0
    wait_seconds: float = 0.0
    outputs: list[Any] = field(default_factory=list)

    @property
    def wait_fraction(self) -> float:
        """The fraction of the pass spent waiting for data: 0 means the loader kept up."""
        return self.wait_seconds / self.seconds if self.seconds > 0 else 0.0

    @property
    def batches_per_second(self) -> float:
        return self.batches / self.seconds if self.seconds > 0 else 0.0


@dataclass
class EpochStats:
    """The record of one epoch: its training pass, and its validation pass if any."""

    epoch: int
    train: PassStats
    val: PassStats | None = None

    # The training pass's figures, the ones asked for most, at the top level.
    @property
    def batches(self) -> int:
        return self.train.batches

    @property
    def seconds(self) -> float:
        return self.train.seconds

    @property
    def wait_fraction(self) -> float:
        return self.train.wait_fraction


class Train:
    """Train on batches made by loader threads, in the calling thread.

    Args:
        main_task: called with each training batch, in the thread that calls ``run``.
        train_yield: the training data: a ``YieldFunction`` or a zero-argument callable.
        val_yield: validation data, run through ``val_task`` after every epoch.
        test_yield: test data, run through ``test_task`` by ``test()``.
        max_nthread: loader threads for the training data.
        max_len: capacity of each batch queue.
        val_task: called with each validation batch; required with ``val_yield``.
        test_task: called with each test batch; required with ``test_yield``.
        eval_nthread: loader threads for validation and test data (default ``max_nthread``).
        shuffle: shuffle the training indices every epoch.
        seed: makes the shuffling reproducible.
        ordered: deliver training batches in index order (see ``DataLoader``).
        keep_outputs: keep what the tasks return in ``PassStats.outputs``.
        on_epoch_end: called with each ``EpochStats`` once its epoch is done.
        batches_per_epoch: the number of batches that make an epoch of a stream
            (a ``train_yield`` without ``__len__``); a ``train_yield`` with
            ``__len__`` gives its own. ``shuffle`` and ``ordered`` apply only to the latter.
            Without it, a stream's epoch lasts until it raises ``StopIteration``.
        num_shards, shard_index, shard_remainder: read only shard ``shard_index`` of
            ``num_shards`` of each training epoch, for multi-worker training (see
            ``DataLoader``); validation and test data are not sharded.
        prefetch_to_device: a device such as ``"/GPU:0"``: a ``DevicePrefetcher``
            thread copies the next batches there while the task runs, and every
            task gets its batch as tensors already on that device. Imports
            TensorFlow. A device this process does not have is logged once and
            ignored (the tasks then get the batches as the loaders made them).
        device_buffer: with ``prefetch_to_device``, the most batches copied ahead
            of the one the task is running on.

    Raises:
        TypeError, ValueError: an argument is wrong; checked here, before any thread starts.
    """

    def __init__(
        self,
        main_task: Callable[[Any], Any],
        train_yield: Callable[..., Any],
        val_yield: Callable[..., Any] | None = None,
        test_yield: Callable[..., Any] | None = None,
        max_nthread: int = 4,
        max_len: int = 8,
        *,
        val_task: Callable[[Any], Any] | None = None,
        test_task: Callable[[Any], Any] | None = None,
        eval_nthread: int | None = None,
        shuffle: bool = True,
        seed: int | None = None,
        ordered: bool = False,
        keep_outputs: bool = False,
        on_epoch_end: Callable[[EpochStats], Any] | None = None,
        batches_per_epoch: int | None = None,
        num_shards: int = 1,
        shard_index: int = 0,
        shard_remainder: Remainder = "pad",
        prefetch_to_device: str | None = None,
        device_buffer: int = 2,
    ) -> None:
        for name, task in (("main_task", main_task), ("val_task", val_task), ("test_task", test_task)):
            if task is not None and not callable(task):
                raise TypeError(f"{name} must be callable, got {type(task).__name__}")
        if main_task is None:
            raise TypeError("main_task must be callable, got None")
        counts = (("max_nthread", max_nthread), ("max_len", max_len), ("eval_nthread", eval_nthread))
        for name, count in (*counts, ("device_buffer", device_buffer)):
            if count is not None:
                check_int(name, count, minimum=1)
        if val_yield is not None and val_task is None:
            raise TypeError("val_yield was given without val_task: pass the callable to run on validation batches")
        if test_yield is not None and test_task is None:
            raise TypeError("test_yield was given without test_task: pass the callable to run on test batches")
        self.main_task = main_task
        self.val_task = val_task
        self.test_task = test_task
        self.keep_outputs = keep_outputs
        self.on_epoch_end = on_epoch_end
        eval_nthread = max_nthread if eval_nthread is None else eval_nthread
        indexed = epoch_length(train_yield) is not None
        train_kwargs = dict(shuffle=shuffle and indexed, seed=seed, ordered=ordered and indexed)
        train_kwargs.update(num_shards=num_shards, shard_index=shard_index, shard_remainder=shard_remainder)
        if indexed and batches_per_epoch is not None:
            raise ValueError("batches_per_epoch is for a stream; a train_yield with __len__ gives its own epoch length")
        if not indexed:
            train_kwargs["batches_per_epoch"] = batches_per_epoch
        self._specs: dict[str, tuple[Any, int, dict[str, Any]]] = {"train": (train_yield, max_nthread, train_kwargs)}
        if val_yield is not None:
            self._specs["val"] = (val_yield, eval_nthread, {})
        if test_yield is not None:
            self._specs["test"] = (test_yield, eval_nthread, {})
        self.max_len = max_len
        self.history: list[EpochStats] = []
        # Built now so that bad arguments fail here, before any thread starts;
        # their threads start when first iterated. Each run() closes the loaders it
        # used, and the next one builds new ones.
        self._loaders: dict[str, DataLoader] | None = self._make_loaders()
        self._prefetcher = None
        if prefetch_to_device is not None:
            self._prefetcher = DevicePrefetcher(prefetch_to_device, device_buffer, name="train-to-device")

    def run(self, epochs: int = 1) -> list[EpochStats]:
        """Train for ``epochs`` epochs, validating after each one when there is validation data.

        Loader threads run only during the call: they stop when it returns, raises,
        or is interrupted with Ctrl-C. A later call goes on from the next epoch.

        Returns:
            ``self.history``: one ``EpochStats`` per epoch, of this call and earlier ones.
        """
        epochs = check_int("epochs", epochs, minimum=1)
        with self._open_loaders() as loaders:
            for _ in range(epochs):
                stats = EpochStats(len(self.history), self._pass(loaders["train"], self.main_task))
                if "val" in loaders:
                    stats.val = self._pass(loaders["val"], self.val_task)
                self.history.append(stats)
                log.info(
                    "epoch %d: %d batches in %.2f s (%.1f batches/s), waited for data %.0f%% of the time",
                    stats.epoch,
                    stats.batches,
                    stats.seconds,
                    stats.train.batches_per_second,
                    100 * stats.wait_fraction,
                )
                if self.on_epoch_end is not None:
                    self.on_epoch_end(stats)
        return self.history

    def test(self) -> PassStats:
        """Run ``test_task`` over the test data once, in the calling thread."""
        if "test" not in self._specs:
            raise ValueError("Train was built without test_yield; nothing to test on")
        with self._open_loaders() as loaders:
            return self._pass(loaders["test"], self.test_task)

    @contextmanager
    def _open_loaders(self) -> Iterator[dict[str, DataLoader]]:
        loaders = self._loaders or self._make_loaders()
        self._loaders = None
        try:
            yield loaders
        except BaseException:
            # An error or Ctrl-C: stop every loader before waiting for any, and wait
            # only a moment, so that a slow yield function cannot hold the error back.
            for loader in loaders.values():
                loader.stop()
            deadline = time.monotonic() + STOP_TIMEOUT
            for loader in loaders.values():
                loader.close(timeout=max(0.0, deadline - time.monotonic()))
            if self._prefetcher is not None:
                self._prefetcher.close(timeout=max(0.0, deadline - time.monotonic()))
            raise
        for loader in loaders.values():
            loader.close()
        if self._prefetcher is not None:
            self._prefetcher.close()

    def _make_loaders(self) -> dict[str, DataLoader]:
        return {
            name: DataLoader(
                yield_fn, nthread, self.max_len, name=f"{name}-loader", first_epoch=len(self.history), **kwargs
            )
            for name, (yield_fn, nthread, kwargs) in self._specs.items()
        }

    def _pass(self, loader: DataLoader, task: Callable[[Any], Any]) -> PassStats:
        stats = PassStats()
        start = ready = time.perf_counter()
        for batch in loader if self._prefetcher is None else self._prefetcher.iterate(loader):
            stats.wait_seconds += time.perf_counter() - ready  # waiting for this batch
            output = task(batch)
            stats.batches += 1
            if self.keep_outputs:
                stats.outputs.append(output)
            ready = time.perf_counter()
        stats.wait_seconds += time.perf_counter() - ready  # waiting for the end of the epoch
        stats.seconds = time.perf_counter() - start
        return stats
