"""``Train``: loader threads make batches, and the calling thread trains on them.

``Train`` composes a ``DataLoader`` for each of the training, validation and test
data with the user's tasks, which run in the thread that called ``run``. A task is
any callable taking a batch. Only ``prefetch_to_device`` brings TensorFlow in.
See :doc:`/guide/training`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from typing import Any

import numpy as np

from .._calls.ray_workers import RayWorkers
from .._core.checks import check_bool, check_int, check_threads
from .._data.keras_source import as_yield_function
from .._data.yield_function import epoch_length
from .._loader.data_loader import STOP_TIMEOUT, DataLoader
from .._loader.placement import training_placement
from .._loader.sharding import Remainder
from ..tensorflow._device_prefetch import DevicePrefetcher
from ._pass_stats import EpochStats, Means, PassStats, epoch_record, epoch_stats
from ._progress import PassProgress, progress_mode

__all__ = ["EpochStats", "PassStats", "Train"]

log = logging.getLogger(__name__)


class Train:
    """Train on batches made by loader threads, in the calling thread.

    Each epoch shows its progress on stderr and ends with a record in ``history``.
    Stop early by returning True from ``on_epoch_end``, or by calling ``stop()``.

    Args:
        main_task: called with each training batch, in the thread that calls ``run``.
            The means of the numbers it returns in a dict are kept in ``PassStats.metrics``.
        train_yield: the training data: a ``YieldFunction``, a zero-argument callable,
            or with ``batch_size`` a sample dataset.
        val_yield: validation data, run through ``val_task`` after every epoch.
        test_yield: test data, run through ``test_task`` by ``test()``.
        num_threads: loader threads for the training data, or ``"auto"``. Given without
            ``processes``, they run in this process. With neither given, each loader
            decodes in worker processes sized from the cores (see :doc:`/guide/host_scale`).
        max_len: the capacity of each batch queue.
        val_task: called with each validation batch; required with ``val_yield``.
        test_task: called with each test batch; required with ``test_yield``.
        eval_num_threads: loader threads for validation and test data (default ``num_threads``).
        shuffle: shuffle the training data every epoch; on by default, as in Keras's ``fit``.
        seed: makes the shuffling reproducible.
        ordered: deliver the training batches in index order.
        keep_outputs: keep what the tasks return in ``PassStats.outputs``.
        on_epoch_end: called with each epoch's ``EpochStats``; returning True stops the run.
        batches_per_epoch: for a stream only: the number of batches that make an epoch.
        batch_size: the data sets are sample datasets, batched this many samples per batch.
        drop_last: with ``batch_size``: leave out each training epoch's last, short batch.
        collate: with ``batch_size``: makes a batch from a list of samples.
        max_nthread: an alias of ``num_threads``.
        eval_nthread: an alias of ``eval_num_threads``.
        on_error: passed to every loader (see ``DataLoader``).
        max_errors: passed to every loader; each loader keeps its own error budget.
        error_log: passed to every loader; all append to the same file.
        call_timeout: passed to every loader.
        thread_init: passed to every loader.
        num_shards: read one shard of each training epoch; validation and test data are not sharded.
        shard_index: the training data's shard, ``0 <= shard_index < num_shards``.
        shard_remainder: ``"pad"`` or ``"drop"``, as for ``DataLoader``.
        prefetch_to_device: a device such as ``"/GPU:0"``: the tasks get their batches
            as tensors already copied there. Imports TensorFlow.
        device_buffer: with ``prefetch_to_device``: the most batches copied ahead.
        overlap_epochs: passed to every loader; the next epoch starts during validation.
        processes: passed to every loader: an int, or ``"auto"`` (see ``num_threads`` for the default).
        workers: passed to every loader: each makes its own Ray actors (see :doc:`/guide/ray_cluster`).

    Raises:
        TypeError, ValueError: an argument is wrong; checked here, before any thread starts.

    See :doc:`/guide/training`.
    """

    def __init__(
        self,
        main_task: Callable[[Any], Any],
        train_yield: Any,
        val_yield: Any = None,
        test_yield: Any = None,
        num_threads: int | str | None = None,
        max_len: int = 8,
        *,
        val_task: Callable[[Any], Any] | None = None,
        test_task: Callable[[Any], Any] | None = None,
        eval_num_threads: int | str | None = None,
        shuffle: bool = True,
        seed: int | None = None,
        ordered: bool = False,
        keep_outputs: bool = False,
        on_epoch_end: Callable[[EpochStats], Any] | None = None,
        batches_per_epoch: int | None = None,
        batch_size: int | None = None,
        drop_last: bool = False,
        collate: Callable[[list[Any]], Any] | None = None,
        max_nthread: int | str | None = None,
        eval_nthread: int | str | None = None,
        on_error: str = "raise",
        max_errors: int | float | None = None,
        error_log: str | os.PathLike[str] | None = None,
        call_timeout: float | None = None,
        thread_init: Callable[[int], Any] | None = None,
        num_shards: int = 1,
        shard_index: int = 0,
        shard_remainder: Remainder = "pad",
        prefetch_to_device: str | None = None,
        device_buffer: int = 2,
        overlap_epochs: bool = True,
        processes: int | str | None = None,
        workers: RayWorkers | None = None,
    ) -> None:
        if main_task is None:
            raise TypeError("main_task must be callable, got None")
        tasks = (("main_task", main_task), ("val_task", val_task), ("test_task", test_task))
        for name, task in (*tasks, ("on_epoch_end", on_epoch_end)):
            if task is not None and not callable(task):
                raise TypeError(f"{name} must be callable, got {type(task).__name__}")
        for data, task, data_set in (("val", val_task, val_yield), ("test", test_task, test_yield)):
            if data_set is not None and task is None:
                raise TypeError(f"{data}_yield was given without {data}_task: pass the callable to run on its batches")
            if task is not None and data_set is None:
                raise TypeError(f"{data}_task was given without {data}_yield: pass the data to run it on")
        # None: not given, so the training default settles where the calls run (placement).
        given = _alias("num_threads", num_threads, "max_nthread", max_nthread, None)
        threads = None if given[1] is None else check_threads(*given)
        given = _alias("eval_num_threads", eval_num_threads, "eval_nthread", eval_nthread, None)
        eval_threads = threads if given[1] is None else check_threads(*given)
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.keep_outputs = check_bool("keep_outputs", keep_outputs)
        check_int("device_buffer", device_buffer, minimum=1)
        self.main_task = main_task
        self.val_task = val_task
        self.test_task = test_task
        self.on_epoch_end = on_epoch_end
        shuffle, ordered = check_bool("shuffle", shuffle), check_bool("ordered", ordered)
        train_yield, val_yield, test_yield = map(as_yield_function, (train_yield, val_yield, test_yield))
        # A sample dataset (batch_size) is indexed; the loader checks it.
        indexed = batch_size is not None or epoch_length(train_yield) is not None
        batching = dict(batch_size=batch_size, collate=collate)
        train_kwargs = dict(shuffle=shuffle and indexed, seed=seed, ordered=ordered and indexed, drop_last=drop_last)
        train_kwargs.update(num_shards=num_shards, shard_index=shard_index, shard_remainder=shard_remainder)
        if indexed and batches_per_epoch is not None:
            raise ValueError("batches_per_epoch is for a stream; a train_yield with __len__ gives its own epoch length")
        if not indexed:
            train_kwargs["batches_per_epoch"] = batches_per_epoch
        if workers is not None:
            processes = processes or 0  # the calls run in Ray actors
        self._specs: dict[str, tuple[Any, int | str, dict[str, Any]]] = {}
        # Each loader may get every decode core: they take turns (a validation pass between epochs, the test
        # data in test() alone), and between passes one only makes its next pass's first batches.
        for name, data_set, nthread, kwargs in (
            ("train", train_yield, threads, {**train_kwargs, **batching}),
            ("val", val_yield, eval_threads, batching),
            ("test", test_yield, eval_threads, batching),
        ):
            if data_set is not None:
                also = (thread_init, collate)  # what crosses to the workers with the data
                nthread, place = training_placement(data_set, nthread, processes, name=f"{name}-loader", also=also)
                self._specs[name] = (data_set, nthread, {**kwargs, "processes": place})
        self.num_threads = self._specs["train"][1]
        self.eval_num_threads = next((spec[1] for name, spec in self._specs.items() if name != "train"), eval_threads)
        self._loader_options = dict(
            on_error=on_error,
            max_errors=max_errors,
            error_log=error_log,
            call_timeout=call_timeout,
            thread_init=thread_init,
            overlap_epochs=overlap_epochs,
            workers=workers,
        )
        self.history: list[EpochStats] = []
        # A plain flag, not a threading.Event: nobody waits on it, and Event.set() takes a lock
        # through Condition.__enter__, which a Ctrl-C can leave held (see interrupt_safe).
        self._stop_requested = False
        self._states: dict[str, dict[str, Any]] = {}  # from load_state_dict, for the next loaders made
        self._last: dict[str, DataLoader] = {}  # the loaders of the current or last run, for state_dict
        # Training batches of the epoch's run whose main_task returned, and whether one is in progress.
        self._trained: int | None = None
        self._in_task = False
        # Built now so that bad arguments fail here, before any thread starts;
        # their threads start when first iterated. Each run() closes the loaders it
        # used, and the next one builds new ones.
        self._loaders: dict[str, DataLoader] | None = self._make_loaders()
        self._prefetcher = None
        if prefetch_to_device is not None:
            self._prefetcher = DevicePrefetcher(prefetch_to_device, device_buffer, name="train-to-device")

    def run(self, epochs: int = 1, progress: bool | None = None) -> list[EpochStats]:
        """Train for ``epochs`` epochs, validating after each one when there is validation data.

        Loader threads run only during the call: they stop when it returns, raises,
        or is interrupted with Ctrl-C. A later call goes on from the next epoch.

        Args:
            epochs: the most epochs to run; fewer if stopped early.
            progress: ``None`` (the default) shows a bar per epoch on a terminal, and a
                line per epoch elsewhere. ``True`` always shows a bar; ``False`` nothing.

        Returns:
            ``self.history``, one ``EpochStats`` per epoch, of this call and earlier ones.
        """
        epochs = check_int("epochs", epochs, minimum=1)
        mode = progress_mode(progress)
        self._stop_requested = False
        last = len(self.history) + epochs
        with self._open_loaders() as loaders:
            for _ in range(epochs):
                epoch = loaders["train"].epoch + 1
                display = PassProgress(f"epoch {epoch + 1}/{last}", mode, loaders["train"])
                with closing(display):
                    stats = EpochStats(epoch, self._pass(loaders["train"], self.main_task, display, stoppable=True))
                    if "val" in loaders:
                        display.pause("validating")
                        stats.val = self._pass(loaders["val"], self.val_task)
                    display.finish(stats.train, stats.val)
                self.history.append(stats)
                log.log(
                    logging.INFO if mode is None else logging.DEBUG,  # shown already when progress is on
                    "epoch %d: %d batches in %.2f s (%.1f batches/s), waited for data %.0f%% of the time",
                    stats.epoch,
                    stats.batches,
                    stats.seconds,
                    stats.train.batches_per_second,
                    100 * stats.wait_fraction,
                )
                if self.on_epoch_end is not None and _is_true(self.on_epoch_end(stats)):
                    self._stop_requested = True
                if self._stop_requested:
                    log.info("training stopped after epoch %d", stats.epoch)
                    break
        return self.history

    def stop(self) -> None:
        """Ask the ``run`` in progress to stop, as Keras's ``model.stop_training = True`` does.

        Call it from ``main_task``, ``on_epoch_end``, or any other thread. The
        training pass ends after the batch in progress. The epoch then ends as
        usual, and ``run`` returns with the loader threads closed.
        """
        self._stop_requested = True

    def test(self, progress: bool | None = None) -> PassStats:
        """Run ``test_task`` over the test data once, in the calling thread.

        Args:
            progress: as for ``run``: a bar, a line at the end, or nothing.
        """
        mode = progress_mode(progress)
        if "test" not in self._specs:
            raise ValueError("Train was built without test_yield; nothing to test on")
        with self._open_loaders() as loaders, closing(PassProgress("test", mode, loaders["test"])) as display:
            stats = self._pass(loaders["test"], self.test_task, display)
            display.finish(stats)
            return stats

    @contextmanager
    def _open_loaders(self) -> Iterator[dict[str, DataLoader]]:
        loaders = self._loaders or self._make_loaders()
        self._loaders = None
        self._last = loaders
        try:
            yield loaders
        except BaseException:
            # An error or Ctrl-C: wait only a moment, so that a slow yield function
            # cannot hold the error back.
            _close_all(list(loaders.values()), STOP_TIMEOUT, self._prefetcher)
            raise
        _close_all(list(loaders.values()), None, self._prefetcher)

    def _make_loaders(self) -> dict[str, DataLoader]:
        loaders = {}
        try:
            for name, (yield_fn, nthread, kwargs) in self._specs.items():
                loaders[name] = loader = DataLoader(
                    yield_fn,
                    nthread,
                    self.max_len,
                    name=f"{name}-loader",
                    first_epoch=len(self.history),
                    **kwargs,
                    **self._loader_options,
                )
                if name in self._states:
                    loader.load_state_dict(self._states.pop(name))
        except BaseException:
            _close_all(list(loaders.values()), 0)
            raise
        return loaders

    def state_dict(self) -> dict[str, Any]:
        """The training's position: its history and the training loader's state (JSON-serialisable).

        Take it between epochs, or mid-epoch. ``load_state_dict`` on a new ``Train``
        then goes on from the next batch not yet trained on. Save it with the
        model's weights and the optimizer's state, taken at the same moment.
        It counts the batches ``main_task`` finished, not those delivered or
        copied ahead to a device. Taken inside ``main_task``, after its step, it
        counts that batch too. See :doc:`/guide/long_runs`.
        """
        loader = self._last.get("train") or (self._loaders or {}).get("train")
        train_state = self._states.get("train")
        if train_state is None and loader is not None:
            trained = None if self._trained is None else self._trained + self._in_task
            train_state = loader.state_dict(batches=trained)
        return {
            "history": [epoch_record(stats) for stats in self.history],
            "train": train_state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from ``state`` (from ``state_dict``). Call before ``run``.

        Raises:
            ValueError: the state is malformed or does not fit this training data.
        """
        if not isinstance(state, dict) or "history" not in state or "train" not in state:
            raise ValueError(f"not a Train state (a dict with 'history' and 'train'): {state!r:.200}")
        history = [epoch_stats(item) for item in state["history"]]
        if self._loaders is not None:
            _close_all(list(self._loaders.values()), 0)
        self.history = history
        self._trained = None
        self._states = {"train": state["train"]} if state["train"] is not None else {}
        self._loaders = self._make_loaders()  # checks the state against the data now

    def _pass(
        self,
        loader: DataLoader,
        task: Callable[[Any], Any],
        display: PassProgress | None = None,
        stoppable: bool = False,
    ) -> PassStats:
        stats = PassStats()
        means = Means()
        before = loader.stats()
        start = ready = time.perf_counter()
        source = loader if self._prefetcher is None else self._prefetcher.iterate(loader)
        if stoppable:  # the training pass: state_dict counts the batches its task finished
            self._trained = 0
        with closing(iter(source)) as batches:  # closed at once on a stop, an error, or Ctrl-C
            for batch in batches:
                stats.wait_seconds += time.perf_counter() - ready  # waiting for this batch
                self._in_task = stoppable
                try:
                    output = task(batch)
                finally:
                    self._in_task = False
                if stoppable:
                    self._trained = stats.batches + 1
                stats.batches += 1
                if self.keep_outputs:
                    stats.outputs.append(output)
                means.add(output)
                if display is not None:
                    display.update(stats.wait_seconds, means.values)
                if stoppable and self._stop_requested:
                    break
                ready = time.perf_counter()
            else:
                stats.wait_seconds += time.perf_counter() - ready  # waiting for the end of the epoch
        stats.seconds = time.perf_counter() - start
        stats.metrics = means.values
        stats.loader = loader.stats().since(before)
        return stats


def _is_true(value: Any) -> bool:
    """Whether a callback asked to stop: True (numpy's too), not merely something truthy it returned."""
    return isinstance(value, bool | np.bool_) and bool(value)


def _alias(name: str, value: Any, alias: str, alias_value: Any, default: Any) -> tuple[str, Any]:
    """The argument given, by its name or its alias, as ``(name used, value)``; ``default`` if neither."""
    if alias_value is None:
        return name, default if value is None else value
    if value is not None:
        raise TypeError(f"pass {name} or its alias {alias}, not both")
    return alias, alias_value


def _close_all(loaders: list[DataLoader], timeout: float | None, prefetcher: DevicePrefetcher | None = None) -> None:
    """Stop every loader, then wait for each, then close the device prefetcher's copy thread.

    Every loader is stopped before any is waited for. So a second Ctrl-C while
    waiting cannot leave another loader's threads running.
    """
    try:
        for loader in loaders:
            loader.stop()
    finally:
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for loader in loaders:
                try:
                    loader.close(timeout=_left(deadline))
                except BaseException:
                    for rest in loaders:
                        rest.stop()
                    raise
        finally:
            if prefetcher is not None:
                prefetcher.close(timeout=_left(deadline))


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
