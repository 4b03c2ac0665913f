"""The orchestrator: loader threads feed batches, the calling thread trains on them.

``Train`` composes the pieces of the original design: a ``DataLoader`` (threads
plus a bounded queue) for each of the training, validation and test data, and
the user's task callables, which run in the thread that called ``run``. That is
the main thread in a training script, where TensorFlow steps belong. ``Train``
knows nothing of TensorFlow either: a task is any callable taking a batch.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from ._checks import check_bool, check_callable, check_int
from .data_loader import STOP_TIMEOUT, DataLoader
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
        on_error, max_errors, error_log, call_timeout, thread_init: passed to every
            loader (see ``DataLoader``); the loaders share one error budget count
            each, and append to the same ``error_log``.

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
        on_error: str = "raise",
        max_errors: int | float | None = None,
        error_log: str | os.PathLike[str] | None = None,
        call_timeout: float | None = None,
        thread_init: Callable[[int], Any] | None = None,
    ) -> None:
        check_callable("main_task", main_task, optional=False)
        for name, task in (("val_task", val_task), ("test_task", test_task), ("on_epoch_end", on_epoch_end)):
            check_callable(name, task)
        keep_outputs = check_bool("keep_outputs", keep_outputs)
        for name, count in (("max_nthread", max_nthread), ("max_len", max_len), ("eval_nthread", eval_nthread)):
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
        train_kwargs = dict(
            shuffle=check_bool("shuffle", shuffle) and indexed,
            seed=seed,
            ordered=check_bool("ordered", ordered) and indexed,
        )
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
        self._loader_options = dict(
            on_error=on_error,
            max_errors=max_errors,
            error_log=error_log,
            call_timeout=call_timeout,
            thread_init=thread_init,
        )
        self.history: list[EpochStats] = []
        self._states: dict[str, dict[str, Any]] = {}  # from load_state_dict, for the next loaders made
        self._last: dict[str, DataLoader] = {}  # the loaders of the current or last run, for state_dict
        # Built now so that bad arguments fail here, before any thread starts;
        # their threads start when first iterated. Each run() closes the loaders it
        # used, and the next one builds new ones.
        self._loaders: dict[str, DataLoader] | None = self._make_loaders()

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
                epoch = loaders["train"].epoch + 1
                stats = EpochStats(epoch, self._pass(loaders["train"], self.main_task))
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
        self._last = loaders
        try:
            yield loaders
        except BaseException:
            # An error or Ctrl-C: wait only a moment, so that a slow yield function
            # cannot hold the error back.
            _close_all(list(loaders.values()), STOP_TIMEOUT)
            raise
        _close_all(list(loaders.values()), None)

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

        Taken between epochs, or mid-epoch (from a task, a callback, or an
        ``except KeyboardInterrupt`` around ``run``), it lets ``load_state_dict`` on
        a new ``Train`` go on from the next batch not yet trained on: the rest of
        the epoch, then the later epochs, as if never interrupted. Save it with the
        model's weights and the optimizer's state, taken at the same moment.
        """
        loader = self._last.get("train") or (self._loaders or {}).get("train")
        train_state = self._states.get("train") or (loader.state_dict() if loader is not None else None)
        return {
            "history": [_stats_dict(stats) for stats in self.history],
            "train": train_state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from ``state`` (from ``state_dict``). Call before ``run``.

        Raises:
            ValueError: the state is malformed or does not fit this training data.
        """
        if not isinstance(state, dict) or "history" not in state or "train" not in state:
            raise ValueError(f"not a Train state (a dict with 'history' and 'train'): {state!r:.200}")
        history = [_stats_from_dict(item) for item in state["history"]]
        if self._loaders is not None:
            _close_all(list(self._loaders.values()), 0)
        self.history = history
        self._states = {"train": state["train"]} if state["train"] is not None else {}
        self._loaders = self._make_loaders()  # checks the state against the data now

    def _pass(self, loader: DataLoader, task: Callable[[Any], Any]) -> PassStats:
        stats = PassStats()
        start = ready = time.perf_counter()
        for batch in loader:
            stats.wait_seconds += time.perf_counter() - ready  # waiting for this batch
            output = task(batch)
            stats.batches += 1
            if self.keep_outputs:
                stats.outputs.append(output)
            ready = time.perf_counter()
        stats.wait_seconds += time.perf_counter() - ready  # waiting for the end of the epoch
        stats.seconds = time.perf_counter() - start
        return stats


def _close_all(loaders: list[DataLoader], timeout: float | None) -> None:
    """Stop every loader before waiting for any, so that an interrupt while waiting
    for one (a second Ctrl-C) cannot leave another's threads running unstopped."""
    try:
        for loader in loaders:
            loader.stop()
    finally:
        deadline = None if timeout is None else time.monotonic() + timeout
        for loader in loaders:
            try:
                loader.close(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            except BaseException:
                for rest in loaders:
                    rest.stop()
                raise


def _stats_dict(stats: EpochStats) -> dict[str, Any]:
    record = asdict(stats)
    for pass_record in (record["train"], record["val"]):
        if pass_record is not None:
            pass_record["outputs"] = []  # what tasks return is not JSON; it is not part of the state
    return record


def _stats_from_dict(record: Any) -> EpochStats:
    try:
        val = record.get("val")
        return EpochStats(
            epoch=int(record["epoch"]),
            train=PassStats(**record["train"]),
            val=PassStats(**val) if val is not None else None,
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed EpochStats in a Train state ({exc}): {record!r:.200}") from None
