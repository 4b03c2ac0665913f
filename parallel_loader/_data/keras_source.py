"""Keras's own datasets (``keras.utils.PyDataset``, ``keras.utils.Sequence``) as yield functions.

A Keras ``PyDataset`` (``Sequence`` in older Keras, and an alias of it in Keras
3) is already batch-level data: ``len()`` batches, ``dataset[i]`` batch ``i``,
and ``on_epoch_end()`` (Keras 3 also ``on_epoch_begin()``) between epochs.
``as_yield_function`` wraps one as a ``KerasSource``, a yield function the loader
calls like any other. So ``DataLoader``, ``Train`` and ``as_tf_dataset`` take a
``PyDataset`` as it is.

What carries over from Keras's own iteration:

* epoch ``e`` is ``dataset[0], ..., dataset[len - 1]``, in that order with
  ``ordered=True``. ``shuffle=True`` reorders them, as Keras's ``fit(shuffle=True)`` does;
* the hooks run between epochs, with no ``__getitem__`` running.
  ``on_epoch_begin()`` runs before an epoch's first batch, ``on_epoch_end()`` after its last.

What does not: the dataset's ``workers``, ``use_multiprocessing`` and
``max_queue_size``. They are Keras's way of running ``__getitem__`` in parallel.
The loader's threads do that instead, and one log line says so when a dataset
asks for more workers or for processes. So ``__getitem__`` must be safe to call
from several threads at once, as Keras's own ``workers > 1`` requires.

A dataset that overrides neither hook lets the loader's epochs overlap: the next
epoch's first batches are made while this one ends. A dataset that overrides a
hook keeps epochs apart, since its batches depend on state the hook changes. The
usual such hook is ``on_epoch_end``, to reshuffle.

Keras is never imported here: a Keras dataset is recognised by its base class's
name and module, so other yield functions cost nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from .._core.checks import check_int
from .yield_function import checked_len

__all__ = ["KerasSource", "as_yield_function", "keras_dataset_base"]

log = logging.getLogger(__name__)

# Base classes of Keras's batch-level datasets: (top-level package, class name).
_KERAS_BASES = frozenset(
    (package, name) for package in ("keras", "tf_keras", "tensorflow") for name in ("PyDataset", "Sequence")
)
_HOOKS = ("on_epoch_begin", "on_epoch_end")


class KerasSource:
    """A Keras ``PyDataset``/``Sequence`` as a batch-level yield function.

    ``len()`` is the dataset's number of batches and ``self(i)`` is
    ``dataset[i]``. Made by ``as_yield_function``, which gives a subclass with
    epoch hooks when the dataset has hooks of its own (see the module docstring).

    Args:
        dataset: the ``PyDataset`` (or ``Sequence``) instance.

    Raises:
        ValueError: the dataset is endless (``num_batches`` is ``None``): the
            loader needs to know each epoch's batches.
    """

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        len(self)  # checks the length now

    def __len__(self) -> int:
        if not hasattr(type(self.dataset), "num_batches"):  # a Sequence of Keras 2
            return checked_len(self.dataset, "batches per epoch")
        num_batches = self.dataset.num_batches  # Keras 3: by default len(); None means endless
        if num_batches is None:
            raise ValueError(
                f"{type(self.dataset).__name__} is endless (num_batches is None): the loader needs the number of "
                "batches per epoch; give it a num_batches (or __len__), or wrap it in a zero-argument callable "
                "(a stream) with batches_per_epoch"
            )
        return check_int(f"{type(self.dataset).__name__}.num_batches", num_batches, minimum=0)

    def __call__(self, index: int) -> Any:
        return self.dataset[index]

    def __repr__(self) -> str:
        return f"KerasSource({self.dataset!r})"


def keras_dataset_base(obj: Any) -> type | None:
    """The Keras base class (``PyDataset`` or ``Sequence``) of ``obj``'s class, or ``None``.

    Found by name and module in the class's MRO, so Keras is not imported.
    """
    if isinstance(obj, type):
        return None
    for cls in type(obj).__mro__:
        if (cls.__module__.split(".")[0], cls.__name__) in _KERAS_BASES:
            return cls
    return None


def as_yield_function(source: Any) -> Any:
    """``source`` as the loader calls it: a Keras dataset wrapped in a ``KerasSource``, anything else as it is.

    Logs once, at INFO, when a Keras dataset asks for ``workers`` or
    ``use_multiprocessing``: the loader's threads are used instead.

    Raises:
        ValueError: an endless Keras dataset (see ``KerasSource``).
    """
    base = keras_dataset_base(source)
    if base is None:
        return source
    overridden = any(getattr(type(source), hook, None) is not getattr(base, hook, None) for hook in _HOOKS)
    wrapped = (_HookedKerasSource if overridden else KerasSource)(source)
    workers = getattr(source, "workers", 1)
    processes = getattr(source, "use_multiprocessing", False)
    if workers != 1 or processes:
        log.info(
            "%s: workers=%s, use_multiprocessing=%s are ignored: the loader's threads call __getitem__ "
            "(set their number with num_threads)",
            type(source).__name__,
            workers,
            processes,
        )
    return wrapped


class _HookedKerasSource(KerasSource):
    """A ``KerasSource`` over a dataset with hooks of its own: calls them between epochs."""

    def on_epoch_begin(self, epoch: int) -> None:
        hook = getattr(self.dataset, "on_epoch_begin", None)
        if hook is not None:
            hook()

    def on_epoch_end(self, epoch: int) -> None:
        hook = getattr(self.dataset, "on_epoch_end", None)
        if hook is not None:
            hook()
