"""What a user writes to feed the loader: a yield function.

Subclass ``YieldFunction`` for data with a known length (an epoch is every index
once, so the loader can shuffle, order and count). A plain zero-argument callable
is accepted too, as an endless stream. Each call returns one batch, and raising
``StopIteration`` ends the stream. Loader
threads call it concurrently, so it must be thread-safe.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["YieldFunction", "call_of", "check_instance", "checked_len", "epoch_hook", "epoch_length", "has_epoch_hooks"]


class YieldFunction:
    """Base class for indexed data: ``len()`` batches per epoch, ``self(index)`` makes one.

    ``__call__`` runs in loader threads, several at once, so it must be safe to
    call concurrently: keep per-call state in local variables, and derive any
    randomness from the index (and the epoch) rather than from a shared generator.

    Epochs overlap when they can: a ``DataLoader`` makes the next epoch's first
    batches while the current epoch's last ones are used. It can in two cases:

    * the batches do not depend on the epoch (the subclass overrides neither epoch hook);
    * the subclass defines ``get_batch(index, epoch)``, which makes batch ``index``
      of ``epoch`` whatever the current epoch. The loader then calls it instead of
      ``__call__``, for two epochs at once near their boundary. It still calls the
      hooks, though calls of the neighbouring epoch may run meanwhile.

    A subclass whose ``on_epoch_begin`` sets state that ``__call__`` reads, and
    that has no ``get_batch``, keeps epochs apart. See :doc:`/guarantees`.

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

        No loader thread is running the yield function at that moment (unless the
        subclass has ``get_batch``, see the class docstring). Randomness
        that should differ per epoch can be keyed on the epoch given here; the
        first epoch's number is the loader's ``first_epoch``. The default does nothing.
        """

    def on_epoch_end(self, epoch: int) -> None:
        """Called in the consuming thread after every batch of ``epoch`` was delivered.

        No loader thread is running the yield function at that moment, unless the
        subclass has ``get_batch``. So this is the place to change state that
        ``__call__`` reads. The default does nothing.
        """


def has_epoch_hooks(obj: Any) -> bool:
    """Whether ``obj`` has an ``on_epoch_begin`` or ``on_epoch_end`` of its own (not ``YieldFunction``'s no-ops)."""
    return any(epoch_hook(obj, hook) is not None for hook in ("on_epoch_begin", "on_epoch_end"))


def epoch_hook(obj: Any, name: str) -> Callable[[int], Any] | None:
    """``obj``'s epoch hook ``name`` (``on_epoch_begin`` or ``on_epoch_end``); None if it has none of its own.

    ``YieldFunction``'s no-ops are none of its own.
    """
    if name in getattr(obj, "__dict__", {}):
        return getattr(obj, name)
    if getattr(type(obj), name, None) in (None, getattr(YieldFunction, name)):
        return None
    return getattr(obj, name)


def check_instance(obj: Any, what: str = "the yield function") -> None:
    """Refuse a class passed where an instance of it is expected (``DataLoader(MyData)``).

    A class is callable, so without this check it would pass for a stream. It
    would fail only at the first call, with a message about missing arguments.

    Raises:
        TypeError: ``obj`` is a class; the message shows how to make the instance.
    """
    if inspect.isclass(obj):
        raise TypeError(
            f"{what} must be an instance, got the class {obj.__name__} itself: pass an instance: {_call_hint(obj)}"
        )


def checked_len(obj: Any, what: str) -> int:
    """Return ``len(obj)`` if it is an int >= 0; the messages name ``what`` was measured.

    Raises:
        TypeError: ``len()`` failed or did not return an int.
        ValueError: it is negative, or larger than ``sys.maxsize``.
    """
    try:
        return len(obj)
    except TypeError as exc:
        raise TypeError(
            f"len() of {type(obj).__name__} failed: {exc}; __len__ must return the number of {what} as an int"
        ) from exc
    except OverflowError as exc:  # CPython's own message for a length past sys.maxsize
        raise ValueError(
            f"len() of {type(obj).__name__} is too large ({exc}): __len__ must return the number of {what}, "
            f"at most {sys.maxsize}"
        ) from exc
    except ValueError as exc:  # CPython's own message for a negative __len__
        raise ValueError(f"len() of {type(obj).__name__} must be >= 0: {exc}") from exc


def epoch_length(yield_fn: Any) -> int | None:
    """Return ``len(yield_fn)`` checked, or ``None`` for a stream (a callable without ``__len__``).

    Raises:
        TypeError: ``yield_fn`` is a class rather than an instance, is not
            callable, is a generator function, or its length is not an int.
        ValueError: its length is negative, or larger than ``sys.maxsize``.
    """
    check_instance(yield_fn)
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
    return checked_len(yield_fn, "batches per epoch")


def call_of(yield_fn: Any, stream: bool) -> Callable[[int, int], Any]:
    """How a loader thread makes batch ``index`` of ``epoch``: the one call, chosen once.

    A stream is called with no argument. A yield function with
    ``get_batch(index, epoch)`` is called through it, and two epochs' calls may
    then run at once. Any other is called with the index alone.
    """
    if stream:
        return lambda index, epoch: yield_fn()
    get_batch = getattr(yield_fn, "get_batch", None)
    if get_batch is not None:
        return get_batch
    return lambda index, epoch: yield_fn(index)


def _call_hint(cls: type) -> str:
    """``Name()`` when the class can be made without arguments, else ``Name(...)``."""
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # some built-in classes have no signature
        return f"{cls.__name__}(...)"
    required = any(p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters)
    return f"{cls.__name__}({'...' if required else ''})"
