"""Files to leave out of a sample list, such as the broken ones the check command lists.

``excluded_paths`` reads what to leave out; ``excluding`` leaves it out, and
``kept_mask`` says which samples it keeps. Every reader of sample lists, and
``VideoDataset``, takes such an ``exclude``.
See :doc:`/video/datasets`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from .parsing import AnnotationError, text_lines
from .sample_list import SampleList

__all__ = ["Exclude", "excluded_paths", "excluding", "kept_mask"]

log = logging.getLogger(__name__)

# Files to leave out: the check command's JSON-lines output (or a text file of paths), or the paths themselves.
Exclude = str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | None


def excluded_paths(exclude: Exclude) -> frozenset[str]:
    """Return the files ``exclude`` names, as absolute normalised paths.

    The file is what ``python -m parallel_loader.video.check --out`` writes. A
    line that is not JSON is taken as a path, so a plain list of paths works too.
    Relative paths in the file are relative to the working directory.

    Args:
        exclude: ``None`` (no file), the path of such a file, or the paths themselves.

    Returns:
        The paths, made absolute and normalised.

    Raises:
        FileNotFoundError: ``exclude`` names a file that does not exist.
        AnnotationError: a JSON line has no ``"path"``.
    """
    if exclude is None:
        return frozenset()
    if isinstance(exclude, str | os.PathLike):
        paths = []
        for origin, line in text_lines(Path(exclude)):
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                paths.append(line)
                continue
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
                raise AnnotationError(origin, f'expected a JSON object with a "path", or a path, got {line!r}')
            paths.append(entry["path"])
    else:
        paths = [os.fspath(p) for p in exclude]
    return frozenset(_normal(p) for p in paths)


def excluding(samples: SampleList, exclude: Exclude) -> SampleList:
    """Return ``samples`` without those whose file ``exclude`` names; the classes stay.

    Args:
        samples: the sample list.
        exclude: the files to leave out, as ``excluded_paths`` takes them.

    Raises:
        ValueError: every sample is excluded.
    """
    mask = kept_mask(samples, exclude)
    return samples if mask is None else samples.keep(mask)


def kept_mask(samples: SampleList, exclude: Exclude) -> np.ndarray | None:
    """Return which samples ``excluding`` keeps, one bool each; ``None`` when it keeps them all.

    Raises:
        ValueError: every sample is excluded.
    """
    left_out = excluded_paths(exclude)
    if not left_out:
        return None
    mask = np.fromiter((_normal(p) not in left_out for p in samples.paths()), bool, len(samples))
    if not mask.any():
        raise ValueError(f"every one of the {len(samples)} samples is in the excluded files: none left")
    if mask.all():
        return None
    log.info("left out %d of %d samples whose files are excluded", len(samples) - mask.sum(), len(samples))
    return mask


def _normal(path: str) -> str:
    return os.path.normpath(os.path.abspath(path))
