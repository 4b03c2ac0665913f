"""What a pass over a loader shows while it runs: a tqdm bar on a terminal, one plain line elsewhere.

``Train.run`` shows one per epoch, ``Train.test`` one for the test pass, and the
benchmark sweep one per run. The bar shows:

* batches done / total, the time left, and batches per second;
* how much of the time the consuming thread waited for data (*input-bound*).
  Near 0% means the loader keeps up, near 100% means the accelerator waits for it;
* the loader's thread count, read again at each refresh so that a change shows;
* the means of the numbers the task returned.

Where the output is not a terminal (a CI log, a file), a bar redrawn in place
would fill it with partial lines. So the same figures come as one line when the
pass ends. See :doc:`/guide/training`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO

from tqdm import tqdm

from .._core.checks import check_bool

if TYPE_CHECKING:
    from ._pass_stats import PassStats

__all__ = ["BAR", "LINE", "PassProgress", "progress_mode"]

BAR = "bar"
LINE = "line"


def progress_mode(progress: bool | None, file: TextIO | None = None) -> str | None:
    """What to show for a ``progress`` argument: ``BAR``, ``LINE``, or ``None`` for nothing.

    Args:
        progress: ``None`` for a bar when ``file`` is a terminal and a line per pass
            otherwise; ``True`` for a bar wherever; ``False`` for nothing.
        file: where the display goes; ``sys.stderr`` by default.

    Raises:
        TypeError: ``progress`` is neither ``None`` nor a bool.
    """
    if progress is None:
        return BAR if _is_terminal(file if file is not None else sys.stderr) else LINE
    return BAR if check_bool("progress", progress) else None


class PassProgress:
    """The display of one pass over a loader, from the thread that consumes it.

    Call ``update`` after each batch, then ``finish`` at the end of the pass, or
    ``close`` when it ends with an error.

    Args:
        description: what the pass is, e.g. ``"epoch 3/10"``; it starts the bar and the line.
        mode: ``BAR``, ``LINE``, or ``None`` for nothing (see ``progress_mode``).
        loader: the loader the pass takes its batches from: its length is the
            bar's total, and its ``num_threads`` is shown. ``None`` for none.
        total: the number of batches expected, when the loader does not say (a stream).
        file: where to write; ``sys.stderr`` by default.
    """

    def __init__(
        self,
        description: str,
        mode: str | None,
        loader: Any = None,
        total: int | None = None,
        file: TextIO | None = None,
    ) -> None:
        self.description = description
        self.loader = loader
        self._file = file if file is not None else sys.stderr
        self._line = mode == LINE
        self._start = time.perf_counter()
        self._figures = ""
        self._paused: float | None = None
        self._bar: tqdm | None = None
        if mode == BAR:
            self._bar = _Bar(
                total=total if total is not None else _length(loader),
                desc=description,
                unit="batch",
                file=self._file,
                dynamic_ncols=True,
            )

    def update(self, wait_seconds: float, metrics: Mapping[str, float] | None = None) -> None:
        """Count one more batch done.

        Args:
            wait_seconds: the time the consuming thread waited for data in this pass so far.
            metrics: the means so far of the numbers the task returned, to show next to the figures.
        """
        if self._bar is None:
            return
        elapsed = time.perf_counter() - self._start
        self._figures = self._describe(wait_seconds / elapsed if elapsed > 0 else 0.0, metrics)
        self._bar.set_postfix_str(self._figures, refresh=False)
        self._bar.update()

    def pause(self, text: str) -> None:
        """The pass's batches are done: show ``text`` after the figures (e.g. ``"validating"``) until ``finish``.

        The time until ``finish`` is left out of the bar's elapsed time and rate.
        A line shows nothing.
        """
        if self._bar is not None:
            self._paused = time.perf_counter()
            self._bar.set_postfix_str(f"{self._figures} | {text}")

    def finish(self, stats: PassStats, val: PassStats | None = None) -> None:
        """End the pass: the bar stays with the final figures, or the line is written.

        Args:
            stats: the pass's figures.
            val: the validation pass that followed it, if any, to show after them.
        """
        figures = self._describe(stats.wait_fraction, stats.metrics)
        if val is not None:
            figures += f" | val {val.batches} batches in {val.seconds:.1f} s{_metrics(val.metrics)}"
        if self._bar is not None:
            if self._paused is not None:  # as tqdm's unpause() does, from the moment of pause()
                paused = time.perf_counter() - self._paused
                self._bar.start_t += paused
                self._bar.last_print_t += paused
            self._bar.set_postfix_str(figures, refresh=False)
            self.close()
        elif self._line:
            self._file.write(
                f"{self.description}: {stats.batches} batches in {stats.seconds:.1f} s "
                f"({stats.batches_per_second:.1f} batches/s), {figures}\n"
            )
            self._file.flush()
            self._line = False

    def close(self) -> None:
        """Close the bar as it stands, without a line; idempotent."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        self._line = False

    def _describe(self, input_bound: float, metrics: Mapping[str, float] | None) -> str:
        threads = getattr(self.loader, "num_threads", None)  # read each time: the loader may change it
        text = f"input-bound {100 * input_bound:.0f}%"
        if threads is not None:
            text += f", {threads} thread{'s' if threads != 1 else ''}"
        return text + _metrics(metrics)


class _Bar(tqdm):
    # tqdm's monitor thread, started with the first bar, would outlive it; the bar
    # is redrawn from update() alone, at most every mininterval (0.1 s).
    monitor_interval = 0


def _metrics(metrics: Mapping[str, float] | None) -> str:
    return "".join(f", {name} {value:.4g}" for name, value in (metrics or {}).items())


def _length(loader: Any) -> int | None:
    if loader is None:
        return None
    try:
        return len(loader)
    except TypeError:  # a stream: its epoch is batches_per_epoch calls, or open-ended
        return getattr(loader, "batches_per_epoch", None)


def _is_terminal(file: TextIO) -> bool:
    """A terminal that a bar can be drawn on: one that says how wide it is (some pseudo-terminals say 0)."""
    try:
        if not file.isatty():
            return False
        return os.get_terminal_size(file.fileno()).columns > 0
    except (AttributeError, ValueError, OSError):  # no isatty or fileno, a closed file, no size
        return False
