"""The error sink: how a yield function that replaces bad samples itself reports them to the loader.

A yield function takes part by defining ``set_error_sink(sink)``; a
``DataLoader`` calls it once with an ``ErrorSink``. The contract, from the
yield function's side:

* ``sink.skip`` is True when the loader was given ``on_error="skip"``. A sample
  that fails is then replaced by another and reported, rather than raised. This
  holds whatever the yield function's own setting. A yield function used without
  a loader follows its own ``on_error``.
* ``sink(index, exc, context)`` reports one draw of a bad item replaced. ``index``
  is the call (the batch), ``exc`` why the item is bad, ``context`` what is known
  of it. When ``context`` names the item (``"key"``, else ``"path"``), every draw
  of it is one record with a count (see ``error_budget``). Call it for every draw
  replaced: the first failure, and each later draw replaced at once from the
  quarantine alike.
* a yield function that replaces samples says how many samples one call makes,
  through a ``batch_size`` attribute. The error budget then counts a replaced
  sample as that share of a call.

The sink knows nothing of video; the yield function knows nothing of the loader
beyond this.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .error_budget import ErrorBudget, ErrorRecord, error_context

__all__ = ["ErrorSink", "samples_per_call"]


class ErrorSink:
    """What a ``DataLoader`` hands ``set_error_sink``: the budget's door for replaced samples. Any thread.

    Args:
        budget: the loader's error budget.
        skip: whether the loader skips failures (``on_error="skip"``).
        epoch: returns the loader's current epoch, for the records.
        yield_fn: asked for a report's context when it comes without one (``error_context``).

    Attributes:
        skip: see above.
        reported: how many records the reports made (bad items, each once), for ``state_dict``'s error count.
    """

    def __init__(self, budget: ErrorBudget, skip: bool, epoch: Callable[[], int], yield_fn: Any = None) -> None:
        self.skip = skip
        self._yield_fn = yield_fn
        self.reported = 0
        self._budget = budget
        self._epoch = epoch
        self._lock = threading.Lock()  # guards reported: += from several threads can lose counts

    def __call__(self, index: int | None, exc: BaseException, context: dict[str, Any] | None = None) -> ErrorRecord:
        """Report one draw of a bad item replaced (see the module docstring); return the item's record."""
        context = context or error_context(self._yield_fn, index, exc)
        key = None if context is None else context.get("key", context.get("path"))
        # Nothing names the item: a record of its own, still one sample lost.
        record = self._budget.replaced(self._epoch(), index, exc, context, key=None if key is None else str(key))
        if record.replaced <= 1:  # a new record
            with self._lock:
                self.reported += 1
        return record

    def __repr__(self) -> str:
        return f"<ErrorSink skip={self.skip}>"


def samples_per_call(yield_fn: Any) -> int:
    """How many samples one call of ``yield_fn`` makes, for the error budget.

    Returns:
        The ``batch_size`` of a yield function that takes a sink and replaces samples, else 1.
    """
    if getattr(yield_fn, "set_error_sink", None) is not None:
        batch_size = getattr(yield_fn, "batch_size", None)
        if isinstance(batch_size, int) and batch_size > 0:
            return batch_size
    return 1
