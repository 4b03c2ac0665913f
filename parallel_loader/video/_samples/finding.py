"""Finding a listed video whatever its extension: each folder listed once, locally or in a store.

A data set downloaded by scripts comes with several extensions (``.mp4``,
``.mkv``, ``.webm``), while its annotations name one. ``VideoFinder`` takes
the name a row gives and returns the file that is there, by its stem. Each
folder is listed once: ``os.scandir`` locally, one listing request at a URL.
``missing_summary`` says in one line which rows had no file, and
``report_missing`` logs that line, or raises it when no row had a file.
``missing_files`` names the listed paths that are not there. See :doc:`/video/datasets`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from .._base.keys import is_url
from .._bytes.listing import RemotePath

__all__ = ["VideoFinder", "folder_files", "missing_files", "missing_summary", "report_missing"]

log = logging.getLogger(__name__)

# How many rows without a file the summary names.
_NAMED = 5


def folder_files(folder: Path | RemotePath) -> list[str]:
    """The names of the files in ``folder``, less hidden ones (``.name``), from one listing.

    Raises:
        FileNotFoundError: there is no ``folder``.
        NotADirectoryError: ``folder`` is a file.
    """
    entries = folder.iterdir() if isinstance(folder, RemotePath) else os.scandir(folder)
    return [entry.name for entry in entries if entry.is_file() and not entry.name.startswith(".")]


class VideoFinder:
    """Finds each named file under ``root``, or a file of the same stem with another of ``extensions``.

    Args:
        root: the folder the names are relative to (a ``RemotePath`` for a URL).
        extensions: the video extensions a file may have instead (any case).
    """

    def __init__(self, root: Path | RemotePath, extensions: Iterable[str]) -> None:
        self._root = root
        self._extensions = sorted({e.lower() for e in extensions})
        self._folders: dict[str, tuple[frozenset[str], dict[str, str]]] = {}  # folder -> (names, stem -> name)

    def find(self, relative: str) -> str | None:
        """Return ``relative``, or the same stem with the extension found, or ``None`` when no file is there."""
        folder, sep, name = relative.rpartition(os.sep)
        listed = self._folders.get(folder)
        if listed is None:
            listed = self._folders[folder] = self._list(folder)
        names, by_stem = listed
        if name in names:
            return relative
        stem, extension = os.path.splitext(name)
        found = by_stem.get(stem if extension.lower() in self._extensions else name)
        return None if found is None else folder + sep + found

    def _list(self, folder: str) -> tuple[frozenset[str], dict[str, str]]:
        """One listing of ``folder``: its names, and the first video name (by extension order) of each stem."""
        try:
            names = folder_files(self._root / folder if folder else self._root)
        except (FileNotFoundError, NotADirectoryError):
            return frozenset(), {}
        by_stem: dict[str, str] = {}
        rank = {e: k for k, e in enumerate(self._extensions)}
        for name in sorted(names, key=lambda n: rank.get(os.path.splitext(n)[1].lower(), len(rank))):
            stem, extension = os.path.splitext(name)
            if extension.lower() in rank:
                by_stem.setdefault(stem, name)
        return frozenset(names), by_stem


def missing_summary(where: str, missing: Sequence[tuple[int, str]], rows: int, root: object, unit: str = "line") -> str:
    """One line on the rows whose file is not there: how many, and the first few as ``line N (name)``.

    ``unit`` names where a row is, such as ``"entry"`` for a JSON list's.
    """
    named = ", ".join(f"{unit} {line} ({name})" for line, name in missing[:_NAMED])
    more = f" and {len(missing) - _NAMED} more" if len(missing) > _NAMED else ""
    return f"{where}: {len(missing)} of {rows} rows have no video file under {root}, left out: {named}{more}"


def report_missing(
    where: str, missing: Sequence[tuple[int, str]], rows: int, found: int, root: object, unit: str = "line"
) -> None:
    """Warn once about the rows without a file (``missing_summary``), or raise when no row has one.

    Args:
        where: the annotation file.
        missing: ``(line, name)`` of each row without a file.
        rows: the rows read.
        found: the rows with a file.
        root: the folder looked in.
        unit: what a row's number counts, as in ``missing_summary``.

    Raises:
        ValueError: there are rows without a file, and none with one.
    """
    if not missing:
        return
    summary = missing_summary(where, missing, rows, root, unit)
    if not found:
        raise ValueError(summary)
    log.warning("%s", summary)


def missing_files(paths: Iterable[str]) -> list[int]:
    """Return the positions of the paths that name nothing, found by listing each folder once (no file is opened).

    A folder that cannot be listed (missing, not a folder, no permission) makes
    every path in it missing. A broken link counts as there (its read fails).
    A URL is left to its first read: asking the store would cost a request per video.
    """
    listings: dict[str, frozenset[str] | None] = {}
    missing = []
    for i, path in enumerate(paths):
        if is_url(path):
            continue
        folder, _, name = path.rpartition(os.sep)
        names = listings.get(folder, False)
        if names is False:
            try:
                names = listings[folder] = frozenset(os.listdir(folder or "."))
            except OSError:
                names = listings[folder] = None
        if names is None or name not in names:
            missing.append(i)
    return missing
