"""What a user writes to feed the loader: a yield function.

Subclass ``YieldFunction`` for data with a known length (an epoch is every index
once, so the loader can shuffle, order and count). A plain zero-argument callable
is accepted too, as an endless stream in the style of the original design: each
call returns one batch, and raising ``StopIteration`` ends the stream. Loader
threads call it concurrently, so it must be thread-safe.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

__all__ = ["YieldFunction", "epoch_length"]


class YieldFunction:
    """Base class for indexed data: ``len()`` batches per epoch, ``self(index)`` makes one.

    ``__call__`` runs in loader threads, several at once, so it must be safe to
    call concurrently: keep per-call state in local variables, and derive any
    randomness from the index (and the epoch) rather than from a shared generator.

    Example:
        >>> class Squares(YieldFunction):
        ...     def __len__(self):
        ...         return 10
        ...     def __call__(self, index):
        ...         return index * index
    """

    def __len__(self) -> int:
        """The number of batches in one epoch."""
        raise TypeError(f"{type(self).__name__} must define __len__ (batches per epoch)")

    def __call__(self, index: int) -> Any:
        """Return the batch with this index, 0 <= index < len(self). Any object will do."""
        raise TypeError(f"{type(self).__name__} must define __call__(index) returning a batch")

    def on_epoch_begin(self, epoch: int) -> None:
        """Called in the consuming thread before the first call of ``epoch``.

        No loader thread is running the yield function at that moment. Randomness
        that should differ per epoch can be keyed on the epoch given here; the
        first epoch's number is the loader's ``first_epoch``. The default does nothing.
        """

    def on_epoch_end(self, epoch: int) -> None:
        """Called in the consuming thread after every batch of ``epoch`` was delivered.

        No loader thread is running the yield function at that moment, so this is
        the place to change state that ``__call__`` reads. The default does nothing.
        """


def epoch_length(yield_fn: Any) -> int | None:
    """Return ``len(yield_fn)`` checked, or ``None`` for a stream (a callable without ``__len__``).

    Raises:
        TypeError: ``yield_fn`` is not callable, is a generator function, or its
            length is not an int.
        ValueError: its length is negative, or too large for ``len()``.
    """
    if inspect.isgeneratorfunction(yield_fn) or inspect.isgenerator(yield_fn) or isinstance(yield_fn, Iterator):
        raise TypeError(
            "the yield function must return one batch per call, not be a generator or an iterator; "
            "to load from an iterator, pass a function that calls next() on it under a lock"
        )
    if not callable(yield_fn):
        raise TypeError(
            f"the yield function must be callable: a YieldFunction subclass or a "
            f"zero-argument function, got {type(yield_fn).__name__}"
        )
    if not hasattr(type(yield_fn), "__len__"):
        return None
    try:
        n = len(yield_fn)
    except TypeError as exc:
        raise TypeError(
            f"len() of the yield function {type(yield_fn).__name__} failed: {exc}; "
            "__len__ must return the number of batches per epoch as an int"
        ) from exc
    except ValueError as exc:  # CPython's own message for a negative __len__
        raise ValueError(f"len() of the yield function {type(yield_fn).__name__} must be >= 0: {exc}") from exc
    except OverflowError as exc:  # CPython's "cannot fit 'int' into an index-sized integer"
        raise ValueError(
            f"len() of the yield function {type(yield_fn).__name__} is too large ({exc}); "
            "__len__ must return the number of batches per epoch"
        ) from exc
    return n
