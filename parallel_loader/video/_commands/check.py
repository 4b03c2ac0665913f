"""A pre-flight check of a video set: which files are broken, and why, before training meets them.

``python -m parallel_loader.video.check ROOT_OR_LIST_OR_CSV`` makes every
video's index once (see ``_indexes.cache``). The index comes from the file's
packets where they tell, else from decoding every frame. The command lists each
broken file with its reason:

* missing, or not a file;
* not a video, or no frame decodes;
* truncated or damaged: not every packet reads to the end of the file (and, for
  an index made by decoding, decodes);
* fewer frames than ``--min-frames``.

``--out FILE`` writes them as JSON lines, ``{"path": ..., "reason": ...}``. The
annotation readers and ``VideoDataset``/``VideoFolder`` take that file as
``exclude=FILE`` to leave those files out. It exits 1 when any file is broken,
0 when the set is intact, 2 on a usage error.

What to check:

* a folder: every file under it whose name ends in a video extension
  (``VIDEO_EXTENSIONS``), names starting with ``.`` left out;
* a URL prefix: every video object under it;
* a ``.csv`` file: its ``path`` column, or, with the Kinetics columns
  (``label,youtube_id,time_start,time_end``), the files ``kinetics_samples`` names;
* any other file: a list, the first field of each non-blank line (UCF101's
  ``trainlist01.txt`` is one).

Relative paths of a list or CSV are relative to ``--root`` (default: the
list's folder). The files are checked by ``--threads`` loader threads. Progress
shows as a bar on a terminal, and as a log line every few percent otherwise.
This command composes the loader (``DataLoader``) and the video code, as
``Train`` composes the loader and TensorFlow. ``check_file`` itself knows
nothing of threads. See :doc:`/video/checks`.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ..._data.yield_function import YieldFunction
from ..._loader.data_loader import DataLoader
from .._base.errors import VideoDecodeError
from .._base.file_pass import FileProgress, log_progress_to_stderr
from .._base.keys import is_url
from .._indexes.cache import default_index_cache
from .._read.clips import probe
from .._samples.annotations import VIDEO_EXTENSIONS, kinetics_samples
from .index import video_files

__all__ = ["check_file", "check_videos", "find_videos", "main"]

log = logging.getLogger(__name__)

_KINETICS_COLUMNS = {"label", "youtube_id", "time_start", "time_end"}


def find_videos(source: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> list[str]:
    """The video files that ``source`` (a folder, a CSV, or a list) names; see the module docstring.

    Raises:
        FileNotFoundError: ``source`` does not exist.
        ValueError: a CSV has neither a ``path`` column nor the Kinetics columns.
    """
    if is_url(source):  # a URL's prefix: every video object under it
        return [p for p in video_files(source) if not any(part.startswith(".") for part in p.split("/")[3:])]
    source = Path(source)
    if not source.exists():
        raise FileNotFoundError(2, "no folder, list or CSV of videos here", str(source))
    if source.is_dir():
        return sorted(
            str(Path(folder, name))
            for folder, dirs, files in os.walk(source)
            for name in files
            if not name.startswith(".")
            and Path(name).suffix.lower() in VIDEO_EXTENSIONS
            and not any(part.startswith(".") for part in Path(folder).relative_to(source).parts)
        )
    base = Path(root) if root is not None else source.parent
    if source.suffix.lower() == ".csv":
        with open(source, newline="", encoding="utf-8") as f:
            columns = set(csv.DictReader(f).fieldnames or ())
            if "path" in columns:
                f.seek(0)
                return [str(base / row["path"]) for row in csv.DictReader(f) if row.get("path")]
        if columns >= _KINETICS_COLUMNS:
            return sorted(set(kinetics_samples(source, base).paths()))
        raise ValueError(
            f"{source}: a CSV needs a 'path' column or the Kinetics columns {sorted(_KINETICS_COLUMNS)}; "
            f"it has {sorted(columns)}"
        )
    with open(source, encoding="utf-8") as f:
        return [str(base / line.split()[0]) for line in f if line.strip()]


def check_file(path: str | os.PathLike[str], min_frames: int = 1) -> str | None:
    """Why ``path`` is a broken video, or ``None`` when its index finds nothing wrong.

    It reads the file's index from ``default_index_cache``, which makes it when
    needed: from the packets where they tell, else by decoding every frame once.
    So a run in the same process, or one sharing an on-disk index cache, does
    not index the file again.

    Args:
        path: the video file, or its URL.
        min_frames: fewer frames than this make the file broken.

    Returns:
        The reason the file is broken, or ``None``.
    """
    try:
        index = default_index_cache().get(path)
    except FileNotFoundError:
        return "missing: no such file"
    except VideoDecodeError as exc:
        return exc.reason
    except OSError as exc:
        return f"cannot be read: {exc}"
    if not index.intact:
        try:
            claimed = f"; its header claims {probe(path).frames}"
        except (VideoDecodeError, OSError):
            claimed = ""
        return f"truncated or damaged: {index.frames} frames decode, then the file ends or fails{claimed}"
    if index.frames < min_frames:
        return f"has {index.frames} frames, fewer than the {min_frames} asked for (--min-frames)"
    return None


class _Checks(YieldFunction):
    """One file checked per call: ``(path, reason or None)``."""

    def __init__(self, paths: Sequence[str], min_frames: int) -> None:
        self.paths = paths
        self.min_frames = min_frames

    def __len__(self) -> int:
        return len(self.paths)

    def __call__(self, index: int) -> tuple[str, str | None]:
        return self.paths[index], check_file(self.paths[index], self.min_frames)


def check_videos(paths: Sequence[str], threads: int = 4, min_frames: int = 1, progress: bool = True) -> dict[str, str]:
    """Check ``paths`` with ``threads`` loader threads; return ``{path: reason}`` of the broken ones, sorted.

    Args:
        paths: the files to check.
        threads: how many files are decoded at once.
        min_frames: fewer frames than this make a file broken.
        progress: show the progress: a bar when stderr is a terminal, else a
            log line every few percent (see ``_base.file_pass.FileProgress``).
    """
    broken: dict[str, str] = {}
    if not paths:
        return broken
    with (
        DataLoader(_Checks(paths, min_frames), num_threads=threads, max_len=2 * threads, name="check") as loader,
        FileProgress(len(paths), "checking videos", show=progress) as shown,
    ):
        for path, reason in loader:
            if reason is not None:
                broken[path] = reason
            shown.update({"broken": len(broken)})
    return dict(sorted(broken.items()))


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status: 1 when a file is broken, 0 when none is."""
    parser = argparse.ArgumentParser(
        prog="python -m parallel_loader.video.check",
        description="List the broken videos of a folder, list or CSV, with the reason; exit 1 if any.",
    )
    parser.add_argument("source", help="a folder of videos, a list of paths (one a line), or a CSV")
    parser.add_argument("--root", help="the folder relative paths of a list or CSV are relative to")
    parser.add_argument("--threads", type=int, default=4, help="files checked at once (default 4)")
    parser.add_argument("--min-frames", type=int, default=1, help="fewer frames than this count as broken")
    parser.add_argument("--out", help="write the broken files here as JSON lines (path, reason)")
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress (a bar on a terminal, a line every 5%% otherwise)"
    )
    args = parser.parse_args(argv)
    if not args.no_progress:
        log_progress_to_stderr()
    if args.threads < 1 or args.min_frames < 1:
        parser.error("--threads and --min-frames must be at least 1")
    try:
        paths = find_videos(args.source, args.root)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    # The index's warnings (a file's seeks are not exact) name files this command lists itself.
    index_log = logging.getLogger("parallel_loader.video._indexes.cache")
    level = index_log.level
    index_log.setLevel(logging.ERROR)
    try:
        broken = check_videos(paths, args.threads, args.min_frames, progress=not args.no_progress)
    finally:
        index_log.setLevel(level)
    for path, reason in broken.items():
        print(f"{path}: {reason}")
    if args.out is not None:
        with open(args.out, "w", encoding="utf-8") as out:
            for path, reason in broken.items():
                out.write(json.dumps({"path": path, "reason": reason}) + "\n")
    print(f"{len(broken)} of {len(paths)} files broken", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
