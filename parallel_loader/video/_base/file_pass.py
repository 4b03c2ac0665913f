"""A pass over every file of a data set: on threads, with a progress bar on a terminal and log lines elsewhere.

Few things read every file: ``exact_counts=True``, the check command and the
index command. They show their progress the same way (``FileProgress``). That is
a tqdm bar when stderr is a terminal. Otherwise it is a log line (``logging``,
level INFO) every few percent, so that a job's log says how far a long pass has come.
``each_file`` runs a function over the files with a few threads (decoding
releases the GIL) and reports each outcome as it comes.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, TypeVar

from tqdm import tqdm

__all__ = ["FileProgress", "each_file", "log_progress_to_stderr"]

log = logging.getLogger(__name__)

T = TypeVar("T")
LOG_EVERY_PERCENT = 5  # a log line each time this much more of the files is done (without a terminal)


class FileProgress:
    """Progress of a pass over ``total`` files: a bar on a terminal, else a log line every few percent.

    Args:
        total: how many files the pass covers.
        what: what the pass does, e.g. ``"checking videos"``; starts the bar and each line.
        bar: ``None`` for a bar when stderr is a terminal, ``True``/``False`` to choose.
        show: ``False`` shows nothing at all.
    """

    def __init__(self, total: int, what: str, bar: bool | None = None, show: bool = True) -> None:
        self.total, self.what, self.done = total, what, 0
        if bar is None:
            bar = _is_terminal(sys.stderr)
        self._bar = _Bar(total=total, desc=what, unit="file", dynamic_ncols=True) if show and bar else None
        self._lines = show and not bar
        self._next_percent = LOG_EVERY_PERCENT
        self._began = time.monotonic()

    def update(self, postfix: dict[str, Any] | None = None) -> None:
        """One more file done; ``postfix``: counts to show beside the bar and in the lines."""
        self.done += 1
        if self._bar is not None:
            self._bar.update(1)
            if postfix:
                self._bar.set_postfix(postfix, refresh=False)
        elif self._lines and self.total:
            percent = 100 * self.done // self.total
            if percent >= self._next_percent or self.done == self.total:
                self._next_percent = (percent // LOG_EVERY_PERCENT + 1) * LOG_EVERY_PERCENT
                elapsed = time.monotonic() - self._began
                extra = "".join(f", {v} {k}" for k, v in (postfix or {}).items())
                log.info(
                    "%s: %d of %d files (%d%%) in %.0f s%s", self.what, self.done, self.total, percent, elapsed, extra
                )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> FileProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def each_file(
    paths: Sequence[str],
    work: Callable[[str], T],
    what: str,
    threads: int | None = None,
    progress: bool | None = None,
) -> Iterator[tuple[str, T | None, Exception | None]]:
    """``(path, work(path), None)`` or ``(path, None, the exception)`` for each file, as they finish.

    Args:
        paths: the files.
        work: what to do with one file; called from ``threads`` threads at once.
        what: what the pass does, for the progress display.
        threads: how many files at once; default: the CPU count (at most 8).
        progress: ``None`` for a bar on a terminal and log lines elsewhere; ``False`` for neither.
    """
    threads = threads or min(8, os.cpu_count() or 1)
    with (
        FileProgress(len(paths), what, show=progress is not False) as shown,
        ThreadPoolExecutor(threads, thread_name_prefix="file-pass") as pool,
    ):
        futures = {pool.submit(work, path): path for path in paths}
        try:
            for future in as_completed(futures):
                shown.update()
                exc = future.exception()
                if exc is not None and not isinstance(exc, Exception):
                    raise exc
                yield futures[future], None if exc is not None else future.result(), exc  # type: ignore[misc]
        finally:
            for future in futures:
                future.cancel()


def log_progress_to_stderr() -> None:
    """For a command line: show this module's progress lines on stderr unless logging is set up already."""
    if not logging.getLogger().handlers and not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)


class _Bar(tqdm):
    monitor_interval = 0  # tqdm's monitor thread would outlive the bar (as in ``parallel_loader.progress``)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
