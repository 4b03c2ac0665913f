"""The error budget: which failed calls a loader may skip, and the manifest of those it skipped.

With ``on_error="skip"`` a failed call of the yield function costs one batch,
not the run: the failure is recorded (``ErrorRecord``), written at once as one
JSON line to the manifest file when there is one, and counted against
``max_errors``. The budget knows nothing of threads beyond being safe to call
from any of them.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._checks import check_int
from .errors import ErrorBudgetExceeded

__all__ = ["ErrorBudget", "ErrorRecord", "error_context"]

# How many records the ErrorBudgetExceeded message quotes.
_QUOTED = 3


@dataclass(frozen=True)
class ErrorRecord:
    """One failed call of the yield function.

    Attributes:
        epoch: the loader epoch of the call.
        index: the index it was called with (``None`` for a stream).
        type: the exception's class name.
        message: ``str()`` of the exception.
        context: what the yield function or the exception says of the data
            (for a video, its path), or ``None``.
        thread: the loader thread that made the call.
        time: when it was recorded, as a Unix timestamp.
        traceback: the last lines of the exception's traceback.
    """

    epoch: int
    index: int | None
    type: str
    message: str
    context: dict[str, Any] | None
    thread: str
    time: float
    traceback: str = ""

    def to_json(self) -> str:
        """The record as one line of JSON (the manifest's format)."""
        return json.dumps(asdict(self), default=str)


def error_context(yield_fn: Any, index: int | None, exc: BaseException) -> dict[str, Any] | None:
    """What is known of the data behind a failed call.

    Taken, in this order, from the exception's ``context`` attribute (a dict), its
    ``path`` attribute (``VideoDecodeError`` has one), and the yield function's
    ``error_context(index)`` method when it has one. Never raises.
    """
    context: dict[str, Any] = {}
    try:
        if isinstance(getattr(exc, "context", None), dict):
            context.update(exc.context)  # type: ignore[attr-defined]
        if getattr(exc, "path", None) is not None:
            context.setdefault("path", os.fspath(exc.path))  # type: ignore[attr-defined]
        describe = getattr(yield_fn, "error_context", None)
        if describe is not None and index is not None:
            context.update(describe(index) or {})
    except Exception as failure:  # a context that fails must not hide the error itself
        context["context_error"] = repr(failure)
    return context or None


class ErrorBudget:
    """Counts failed calls against ``max_errors`` and keeps their records.

    Args:
        max_errors: ``None`` (no limit), a count (int >= 0), or a fraction in
            (0, 1) of the calls made so far: up to ``ceil(max_errors * calls)``
            failures are allowed, so early in a run the fraction is strict.
        error_log: a file to append each record to, as one JSON line, flushed at once.

    Raises:
        TypeError, ValueError: ``max_errors`` is neither None, an int >= 0 nor a float in (0, 1).
    """

    def __init__(self, max_errors: int | float | None = None, error_log: str | os.PathLike[str] | None = None) -> None:
        if isinstance(max_errors, float):
            if not 0 < max_errors < 1:
                raise ValueError(
                    f"max_errors as a float is a fraction of the calls and must be in (0, 1), got {max_errors}; "
                    "pass an int for a count"
                )
        elif max_errors is not None:
            max_errors = check_int("max_errors", max_errors, minimum=0)
        if error_log is not None and not isinstance(error_log, str | os.PathLike):
            raise TypeError(f"error_log must be a file path or None, got {type(error_log).__name__} {error_log!r}")
        self.max_errors = max_errors
        self.error_log = None if error_log is None else Path(error_log)
        if self.error_log is not None and not self.error_log.parent.is_dir():
            raise FileNotFoundError(f"error_log {str(self.error_log)!r}: its folder does not exist")
        self.records: list[ErrorRecord] = []
        self._lock = threading.Lock()  # guards records and the file

    def record(
        self,
        epoch: int,
        index: int | None,
        exc: BaseException,
        context: dict[str, Any] | None,
        thread: str | None = None,
    ) -> ErrorRecord:
        """Keep a record of ``exc`` and append it to the manifest. Safe from any thread.

        ``thread`` names the thread the failure happened in; by default the calling one.
        """
        record = ErrorRecord(
            epoch=epoch,
            index=index,
            type=type(exc).__name__,
            message=str(exc),
            context=context,
            thread=thread or threading.current_thread().name,
            time=time.time(),
            traceback="".join(traceback.format_exception(exc, limit=-3)),
        )
        with self._lock:
            self.records.append(record)
            if self.error_log is not None:
                with self.error_log.open("a", encoding="utf-8") as manifest:
                    manifest.write(record.to_json() + "\n")
                    manifest.flush()
        return record

    def allowed(self, calls: int) -> float:
        """How many failures the budget allows after ``calls`` calls."""
        if self.max_errors is None:
            return math.inf
        if isinstance(self.max_errors, float):
            return math.ceil(self.max_errors * calls)
        return self.max_errors

    def check(self, errors: int, calls: int) -> None:
        """Raise ``ErrorBudgetExceeded`` if ``errors`` failures in ``calls`` calls are over budget."""
        allowed = self.allowed(calls)
        if errors <= allowed:
            return
        with self._lock:
            records = list(self.records)
        quoted = "; ".join(
            f"epoch {r.epoch} index {r.index}: {r.type}: {r.message}"
            + (f" ({', '.join(f'{k}={v}' for k, v in r.context.items())})" if r.context else "")
            for r in records[:_QUOTED]
        )
        budget = (
            f"{self.max_errors:.2%} of calls ({allowed} of {calls})"
            if isinstance(self.max_errors, float)
            else (f"{self.max_errors}")
        )
        where = f"; every record is in {self.error_log}" if self.error_log is not None else "; see loader.errors"
        raise ErrorBudgetExceeded(
            f"{errors} failed calls of the yield function, over the budget of max_errors={budget}. "
            f"First: {quoted}{where}",
            errors=records,
            budget=self.max_errors,
        )
