"""A ``tf.data.Dataset`` with one ``DataLoader`` behind it for its whole lifetime.

Each iteration of the dataset is one epoch of the same loader: each ``model.fit``
epoch, and each pass of a ``.repeat()``. So epochs overlap as they do for
``Train``, ``num_threads="auto"`` keeps what it learnt, and the loader's
statistics cover the whole run.

The loader's threads start at the first iteration. They end at ``close()`` on
the dataset, or when its ``with`` block ends. They also end when the dataset is
no longer referenced, or at interpreter exit (a ``weakref.finalize``). A dataset
derived from it, with ``.repeat()``, ``.map()`` or ``tf.distribute``, keeps it
alive. A ``DataLoader`` given by the caller is the caller's: the dataset
iterates it but never closes it.

One iteration runs at a time. An iteration that starts while another is in
progress raises ``RuntimeError``, rather than share the epoch. An iterator
dropped part way ends its epoch when TensorFlow releases it.

A dataset of declared length refuses to start with an epoch that
``load_state_dict`` left part done, since it would end short of that length.
``BackupAndRestore`` ends such an epoch itself: it marks its loader (``resume_handled``).

TensorFlow is imported when the first dataset is made (``loader_dataset``), so
importing this module stays light. See :doc:`/guide/training`.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .._loader.data_loader import DataLoader

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = [
    "FINALIZE_TIMEOUT",
    "LoaderFeed",
    "check_whole_epoch",
    "is_loader_dataset",
    "loader_dataset",
    "resume_handled",
]

# When a dataset is collected, or at interpreter exit: the most seconds to wait for
# loader threads still inside a call of the yield function. Those still running then
# take no more work and end when their call returns (they are daemon threads).
FINALIZE_TIMEOUT = 5.0

# The LoaderDataset class once made: a subclass of tf.data.Dataset, so made after TensorFlow's import.
_made: list[type] = []
_made_lock = threading.Lock()
# Loaders whose part-done first epoch a Keras callback ends itself (BackupAndRestore).
_resumes_handled: weakref.WeakSet[DataLoader] = weakref.WeakSet()


def resume_handled(loader: DataLoader) -> None:
    """Let datasets of declared length over ``loader`` start with an epoch part done: the caller ends it."""
    _resumes_handled.add(loader)


def check_whole_epoch(loader: DataLoader) -> None:
    """Raise unless ``loader``'s next iteration is a whole epoch, or a callback ends its part epoch.

    Raises:
        ValueError: ``load_state_dict`` left the next epoch part done (the message names ``BackupAndRestore``).
    """
    state = loader.state_dict()
    # A state loaded and not yet iterated names the next epoch, with what of it was done. A loader
    # left part way through an epoch names that epoch instead, and its next iteration is a whole one.
    if state["epoch"] == loader.epoch + 1 and state["done"] and loader not in _resumes_handled:
        raise ValueError(
            f"{loader.name!r} was restored mid-epoch by load_state_dict, so its next epoch is shorter than the "
            "dataset declares, and fit would fail at that epoch's end. To resume fit "
            "mid-epoch, give the fresh loader's dataset and parallel_loader.keras.BackupAndRestore to fit: it saves "
            "and restores the loader with the model. Or restore from a state saved at an epoch's end"
        )


class LoaderFeed:
    """The loader behind a dataset, iterated one epoch per dataset iteration, one iteration at a time.

    Args:
        loader: the loader the dataset's iterations read.
        owned: whether the dataset made the loader (and so closes it).
        declared: whether the dataset declares the epoch's length (then each iteration must be a whole epoch).
    """

    def __init__(self, loader: DataLoader, owned: bool, declared: bool = False) -> None:
        self.loader = loader
        self.owned = owned
        self.declared = declared
        self._lock = threading.Lock()  # guards _iterating
        self._iterating = False

    def epoch(self) -> Iterator[Any]:
        """Yield one epoch of the loader (the generator ``from_generator`` calls per iteration).

        The last batch is held back until the loader's epoch is complete, and the
        yield function's ``on_epoch_end`` called. So a consumer that stops after
        exactly the epoch's batches still moves the epoch on: ``dataset.take(n)``,
        or a ``fit`` that counts its steps. From then on, another iteration may start.

        Raises:
            RuntimeError: another iteration of the dataset is in progress.
            LoaderClosed: the dataset, or its loader, was closed.
            ValueError: the dataset declares its length and the loader was restored mid-epoch.
        """
        if not self._claim():
            # An iterator dropped in a reference cycle holds its epoch until the garbage
            # collector releases it: release such iterators before refusing.
            gc.collect()
            if not self._claim():
                raise RuntimeError(
                    f"the dataset over {self.loader.name!r} is being iterated already: a dataset made by "
                    "as_tf_dataset gives one iteration at a time (each is an epoch of its one loader). "
                    "Finish or drop the other iterator first, or make a second dataset for a second consumer"
                )
        try:
            if self.declared:
                check_whole_epoch(self.loader)
            batches = iter(self.loader)
            try:
                held = next(batches)
            except StopIteration:
                return
            for batch in batches:
                yield held
                held = batch
        finally:
            with self._lock:
                self._iterating = False
        yield held

    def _claim(self) -> bool:
        with self._lock:
            if self._iterating:
                return False
            self._iterating = True
            return True


def loader_dataset(dataset: tf.data.Dataset, feed: LoaderFeed) -> tf.data.Dataset:
    """A ``LoaderDataset``: ``dataset``'s elements, with ``feed``'s loader kept and closed with it.

    Imports TensorFlow.

    Args:
        dataset: the dataset made from ``feed.epoch``, with any steps after it.
        feed: the loader behind it.
    """
    return _dataset_class()(dataset, feed)


def is_loader_dataset(obj: Any) -> bool:
    """Whether ``loader_dataset`` made ``obj``; never imports TensorFlow."""
    return bool(_made) and isinstance(obj, _made[0])


def __getattr__(name: str) -> Any:
    """``LoaderDataset``, the class, made (and TensorFlow imported) on first use."""
    if name == "LoaderDataset":
        return _dataset_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _dataset_class() -> type:
    """The ``LoaderDataset`` class, made once; imports TensorFlow."""
    with _made_lock:
        if not _made:
            _made.append(_make_dataset_class())
        return _made[0]


def _make_dataset_class() -> type:
    import tensorflow as tf

    class LoaderDataset(tf.data.Dataset):
        """A dataset that passes ``dataset``'s elements on and keeps the loader that feeds them (closing one it made).

        ``as_tf_dataset`` returns one; it is a ``tf.data.Dataset`` in every other way
        (``model.fit``, ``.repeat()``, ``tf.distribute``). See the module docstring
        for when its threads end.

        Args:
            dataset: the dataset made from ``feed.epoch``, with any steps after it.
            feed: the loader behind it.
        """

        def __init__(self, dataset: tf.data.Dataset, feed: LoaderFeed) -> None:
            self._dataset = dataset
            self._feed = feed
            self._finalizer = weakref.finalize(self, _close_owned, feed, FINALIZE_TIMEOUT)
            super().__init__(dataset._variant_tensor)  # the same elements, no new step

        def _inputs(self) -> list[tf.data.Dataset]:
            return [self._dataset]

        @property
        def element_spec(self) -> Any:
            return self._dataset.element_spec

        @property
        def loader(self) -> DataLoader:
            """The loader the dataset iterates."""
            return self._feed.loader

        def close(self, timeout: float | None = None) -> None:
            """End the loader's threads now (a ``DataLoader`` given by the caller is left open). Idempotent.

            An iteration after it raises ``LoaderClosed``.

            Args:
                timeout: the most seconds to wait for threads still in a call (see ``DataLoader.close``).
            """
            if self._finalizer.detach() is not None:
                _close_owned(self._feed, timeout)

        def __enter__(self) -> LoaderDataset:
            return self

        def __exit__(self, *exc_info: object) -> None:
            self.close()

    LoaderDataset.__qualname__ = "LoaderDataset"  # as if defined at the top: the module's __getattr__ gives it
    return LoaderDataset


def _close_owned(feed: LoaderFeed, timeout: float | None) -> None:
    """Close the loader if the dataset made it. Must not refer to the dataset (it is the finaliser)."""
    if feed.owned:
        feed.loader.close(timeout)
