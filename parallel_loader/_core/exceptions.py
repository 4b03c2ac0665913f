"""``PicklesAsItself``: an exception whose ``__init__`` takes its fields still crosses a pickle as itself.

An exception pickles as ``type(*args)``, and ``args`` holds only what
``super().__init__`` was given (the message). An ``__init__`` that takes more
arguments then fails at unpickling. A worker process sends its exceptions
pickled, so each of the package's exceptions must survive that. See
:doc:`/guide/threads_and_processes`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PicklesAsItself"]


class PicklesAsItself:
    """Mix in first: the exception unpickles with its type, ``args`` and attributes, without calling ``__init__``."""

    args: tuple[Any, ...]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as the type, ``args`` and attributes (notes included)."""
        return _unpickled, (type(self), self.args, self.__dict__)


def _unpickled(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    """An exception of ``cls`` with ``args`` and attributes ``state``, made without its ``__init__``."""
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc
