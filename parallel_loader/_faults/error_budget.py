"""The error budget: which failed calls a loader may skip, and the manifest of those it skipped.

With ``on_error="skip"``, a failed call of the yield function costs one batch,
not the run. The failure is recorded (``ErrorRecord``) and counted against
``max_errors``. When there is a manifest file, the record is written to it at
once as one JSON line.

A yield function that replaces a bad sample itself (see ``error_sink``) costs
one sample, not a batch. Its bad items (files) have one record each per run,
however often they are drawn. The record is appended when the item first fails,
with ``replaced: 1``. Each later draw replaced raises that count, in ``errors``
and in the manifest's line too. The count is the line's last field, written at a
fixed width, so that it is rewritten in place. The line keeps its length and its
place, so a manifest that others append to meanwhile stays whole.
So the manifest holds one line per bad file, and is up to date after every draw.

Against an int ``max_errors``, the budget counts an item once: a bad file is one
error, however many epochs draw it. Against a fractional one, each sample
replaced counts as a share of a call (``1 / samples_per_call``). So 1% of bad
samples is 1% whatever the batch size. A replaced draw is recorded when its
batch is made. It is counted against a fraction only when that batch is delivered
(``take_replaced``, ``count_replaced``). So the fraction's numerator and its
denominator, the calls delivered, count the same batches. A batch made
ahead, or made for an epoch that was abandoned, costs nothing until it is
delivered. The budget knows nothing of threads beyond being safe to call from
any of them. See :doc:`/guide/long_runs`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .._core.checks import check_int
from .errors import ErrorBudgetExceeded

__all__ = ["ErrorBudget", "ErrorRecord", "error_context", "quote"]

log = logging.getLogger(__name__)

# How many records the ErrorBudgetExceeded message quotes.
_QUOTED = 3
# The width of a manifest line's ``replaced`` count, padded with spaces so that it is rewritten in place.
_COUNT_WIDTH = 12


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
        replaced: for a yield function that replaces samples, how many draws of
            a bad item (a file) were replaced in this run. It is 0 for a skipped call.
    """

    epoch: int
    index: int | None
    type: str
    message: str
    context: dict[str, Any] | None
    thread: str
    time: float
    traceback: str = ""
    replaced: int = 0

    def to_json(self) -> str:
        """The record as one line of JSON (the manifest's format), ``replaced`` last and space-padded."""
        fields = asdict(self)
        count = fields.pop("replaced")
        return json.dumps(fields, default=str)[:-1] + f', "replaced": {count:>{_COUNT_WIDTH}}}}'


def quote(record: ErrorRecord) -> str:
    """A record in one line, as ``ErrorBudgetExceeded`` quotes it: where, what, and its context."""
    context = f" ({', '.join(f'{k}={v}' for k, v in record.context.items())})" if record.context else ""
    return f"epoch {record.epoch} index {record.index}: {record.type}: {record.message}{context}"


def error_context(yield_fn: Any, index: int | None, exc: BaseException) -> dict[str, Any] | None:
    """What is known of the data behind a failed call.

    Taken, in this order, from:

    * the exception's ``context`` attribute (a dict);
    * its ``path`` attribute (``VideoDecodeError`` has one), or its ``filename``
      (an ``OSError`` about a file);
    * the yield function's ``error_context(index)`` method, when it has one.

    Never raises.
    """
    context: dict[str, Any] = {}
    try:
        if isinstance(getattr(exc, "context", None), dict):
            context.update(exc.context)  # type: ignore[attr-defined]
        path = getattr(exc, "path", None)
        if path is None and isinstance(exc, OSError):
            path = exc.filename
        if path is not None:
            context.setdefault("path", os.fspath(path))
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
            (0, 1) of the calls made so far. A fraction allows up to
            ``ceil(max_errors * calls)`` failures, so early in a run it is strict.
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
        # Samples one call makes, for a fractional budget: set by the loader from the yield function's batch_size.
        self.samples_per_call = 1
        self.failures = 0  # failed calls and replaced draws recorded: changes at each one
        # Failed calls, plus each replaced draw of a delivered batch as 1 / samples_per_call of a call.
        self.lost = 0.0
        self.replaced_draws = 0  # samples replaced in the batches delivered in this run (count_replaced)
        self._made = threading.local()  # .count: draws replaced in the call this thread is making
        # What a resumed run's message quotes first: the first records of the runs before it (``quote``).
        self.earlier: list[str] = []
        # A bad item's key -> (its place in records, the end of its manifest line, or None).
        self._items: dict[str, tuple[int, int | None]] = {}
        self._lock = threading.Lock()  # guards records, the counts and the file

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
        record = self._new_record(epoch, index, exc, context, thread)
        with self._lock:
            self.records.append(record)
            self.failures += 1
            self.lost += 1
            self._append(record)
        return record

    def replaced(
        self,
        epoch: int,
        index: int | None,
        exc: BaseException,
        context: dict[str, Any] | None,
        key: str | None,
        thread: str | None = None,
    ) -> ErrorRecord:
        """Count one draw of the bad item ``key`` replaced by another sample. Safe from any thread.

        The first draw of ``key`` makes its record (appended to the manifest at
        once); each later one raises its ``replaced`` count, in place. A draw
        without a key has a record of its own. Either way it costs one sample,
        counted against a fraction when its batch is delivered: the draw is kept
        for the calling thread's ``take_replaced``.
        """
        self._made.count = getattr(self._made, "count", 0) + 1
        with self._lock:
            self.failures += 1
            known = None if key is None else self._items.get(key)
            if known is not None:
                place, end = known
                record = self.records[place] = dataclasses.replace(
                    self.records[place], replaced=self.records[place].replaced + 1
                )
                if end is not None:
                    self._rewrite_count(end, record.replaced)
                return record
            record = self._new_record(epoch, index, exc, context, thread, replaced=1)
            self.records.append(record)
            end = self._append(record)
            if key is not None:
                self._items[key] = (len(self.records) - 1, end)
        return record

    def take_replaced(self) -> int:
        """The draws replaced in the calling thread since its last ``take_replaced``; starts it again at 0.

        A loader thread takes them after each call, and its result carries them to
        the consumer, which counts them (``count_replaced``) when it delivers the batch.
        """
        count = getattr(self._made, "count", 0)
        self._made.count = 0
        return count

    def count_replaced(self, draws: int) -> None:
        """Count ``draws`` samples replaced in a batch delivered, each ``1 / samples_per_call`` of a call."""
        with self._lock:
            self.replaced_draws += draws
            self.lost += draws / self.samples_per_call

    @property
    def count(self) -> int:
        """Errors as an int ``max_errors`` counts them (failed calls, and each bad item once)."""
        return len(self.records)

    def _new_record(
        self,
        epoch: int,
        index: int | None,
        exc: BaseException,
        context: dict[str, Any] | None,
        thread: str | None,
        replaced: int = 0,
    ) -> ErrorRecord:
        return ErrorRecord(
            epoch=epoch,
            index=index,
            type=type(exc).__name__,
            message=str(exc),
            context=context,
            thread=thread or threading.current_thread().name,
            time=time.time(),
            traceback="".join(traceback.format_exception(exc, limit=-3)),
            replaced=replaced,
        )

    def _append(self, record: ErrorRecord) -> int | None:
        """Append ``record`` to the manifest as one line; return where the line ends in the file. Lock held."""
        if self.error_log is None:
            return None
        # One write on a file opened for appending: the offset after it is our line's end,
        # whatever other writers append meanwhile.
        fd = os.open(self.error_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (record.to_json() + "\n").encode("utf-8"))
            return os.lseek(fd, 0, os.SEEK_CUR)
        finally:
            os.close(fd)

    def _rewrite_count(self, end: int, count: int) -> None:
        """Write ``count`` over the ``replaced`` field of the manifest line ending at ``end``. Lock held."""
        field = f"{count:>{_COUNT_WIDTH}}}}\n".encode()
        start = end - len(field)
        try:
            with open(self.error_log, "r+b") as manifest:  # type: ignore[arg-type]
                manifest.seek(start)
                if manifest.read(len(field)).rstrip(b"}\n").strip().isdigit():  # the line is still where it was
                    manifest.seek(start)
                    manifest.write(field)
                    return
        except OSError:
            pass
        log.warning(
            "%s: the manifest changed under the loader; its count of replaced draws stays at an older value",
            self.error_log,
        )

    def first_quoted(self) -> list[str]:
        """The first records of the run, as the message quotes them: those of earlier runs first (``earlier``)."""
        with self._lock:
            records = self.records[: max(0, _QUOTED - len(self.earlier))]
        return self.earlier[:_QUOTED] + [quote(r) for r in records]

    def allowed(self, calls: int) -> float:
        """How many failures the budget allows after ``calls`` calls (samples, with a fraction of samples)."""
        if self.max_errors is None:
            return math.inf
        if isinstance(self.max_errors, float):
            return math.ceil(self.max_errors * calls * self.samples_per_call - 1e-9)
        return self.max_errors

    def check(self, errors: int, calls: int, lost: float | None = None) -> None:
        """Raise ``ErrorBudgetExceeded`` if the failures in ``calls`` calls are over budget.

        Args:
            errors: the failures an int ``max_errors`` counts (failed calls, bad items once each).
            calls: the calls made so far.
            lost: what a fractional ``max_errors`` counts: failed calls, plus each
                replaced sample as ``1 / samples_per_call`` of one; ``errors`` by default.
        """
        allowed = self.allowed(calls)
        fraction = isinstance(self.max_errors, float)
        if fraction:
            errors = round((errors if lost is None else lost) * self.samples_per_call)  # type: ignore[assignment]
        if errors <= allowed:
            return
        with self._lock:
            records = list(self.records)
        quoted = "; ".join(self.first_quoted())
        unit = "samples" if self.samples_per_call > 1 else "calls"
        of = f" ({allowed} of {calls * self.samples_per_call})" if unit == "samples" else f" ({allowed} of {calls})"
        budget = f"{self.max_errors:.2%} of {unit}{of}" if fraction else f"{self.max_errors}"
        what = f"{errors} {unit} lost to failures" if fraction and unit == "samples" else f"{errors} failed calls"
        where = f"; every record is in {self.error_log}" if self.error_log is not None else "; see loader.errors"
        raise ErrorBudgetExceeded(
            f"{what} of the yield function, over the budget of max_errors={budget}."
            + (f" First: {quoted}" if quoted else "")
            + where,
            errors=records,
            budget=self.max_errors,
        )
