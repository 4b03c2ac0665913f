"""Index a data set's videos ahead of time: ``python -m parallel_loader.video.index ROOT_OR_LIST [--threads N]``.

``ROOT_OR_LIST`` is a directory or a URL prefix (every video file under it, at
any depth), or a text file listing videos, one a line. A list gives each video
as the first field of its line, so split files such as UCF101's
``trainlist01.txt`` work. Relative paths are taken from the list's directory,
and ``#`` starts a comment.

Indexes go to the store every ``IndexCache`` reads by default (``--cache`` for
another directory), so a training run then finds them all made. A run is
resumable. An index already in the store is found, not made again. Every index
is written as soon as it is made, so an interrupted run loses none. Progress
shows as a bar on a terminal and as a log line every few percent otherwise.
At the end it lists the files whose seeks are not exact, and why: their clips
are decoded from the first frame. It also lists the files that cannot be read
as videos. See :doc:`/video/indexes`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from .._base.errors import VideoDecodeError
from .._base.file_pass import FileProgress, log_progress_to_stderr
from .._base.keys import is_url, local_key
from .._bytes.listing import RemotePath
from .._indexes.cache import IndexCache
from .._samples.annotations import VIDEO_EXTENSIONS

__all__ = ["main", "video_files"]


def video_files(root_or_list: str | os.PathLike[str], extensions: Sequence[str] = tuple(VIDEO_EXTENSIONS)) -> list[str]:
    """The videos under a directory or a URL's prefix (sorted), or those a list file names (in its order)."""
    if is_url(root_or_list):
        wanted = {e.lower() for e in extensions}
        return sorted(str(p) for p in RemotePath(os.fspath(root_or_list)).files() if p.suffix.lower() in wanted)
    source = Path(root_or_list).expanduser()
    if source.is_dir():
        wanted = {e.lower() for e in extensions}
        found = []
        for folder, _, names in os.walk(source):
            found += [os.path.join(folder, n) for n in names if os.path.splitext(n)[1].lower() in wanted]
        return sorted(found)
    paths = []
    for line in source.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            path = Path(line.split()[0].split(",")[0]).expanduser()
            paths.append(os.fspath(path if path.is_absolute() else source.parent / path))
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status: 1 when a file fails, 0 when none does."""
    parser = argparse.ArgumentParser(prog="python -m parallel_loader.video.index", description=__doc__.split("\n\n")[0])
    parser.add_argument("root_or_list", help="a directory or URL prefix of videos, or a file listing them one a line")
    parser.add_argument("--threads", type=int, default=4, help="files indexed at once (default 4)")
    parser.add_argument("--cache", help="the store's directory (default: where IndexCache() keeps indexes)")
    parser.add_argument(
        "--quiet", action="store_true", help="no progress (a bar on a terminal, a line every 5%% otherwise)"
    )
    args = parser.parse_args(argv)
    if not args.quiet:
        log_progress_to_stderr()
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    cache = IndexCache() if args.cache is None else IndexCache(args.cache)
    if cache.directory is None:
        parser.error("indexes would be kept in memory only (PARALLEL_LOADER_VIDEO_INDEX=off): give --cache DIR")
    paths = video_files(args.root_or_list)
    print(f"{len(paths)} videos from {args.root_or_list}; indexes kept in {cache.directory}", flush=True)
    counts = {"found": 0, "made": 0, "not seekable": 0, "failed": 0}
    unseekable: list[tuple[str, str]] = []
    failed: list[tuple[str, str]] = []

    def one(path: str) -> tuple[bool, str]:
        """Index ``path``: (whether it was in the store already, why its seeks are not exact or "")."""
        found = (cache.latest(path) if is_url(path) else cache.lookup(local_key(path))) is not None
        index = cache.get(path)
        return found, "" if index.seekable else index.reason

    with (
        ThreadPoolExecutor(args.threads, thread_name_prefix="index") as pool,
        FileProgress(len(paths), "indexing videos", show=not args.quiet) as shown,
    ):
        futures = {pool.submit(one, path): path for path in paths}
        for future in as_completed(futures):
            path = futures[future]
            try:
                found, reason = future.result()
            except (OSError, VideoDecodeError) as exc:
                counts["failed"] += 1
                failed.append((path, exc.reason if isinstance(exc, VideoDecodeError) else str(exc)))
            else:
                counts["found" if found else "made"] += 1
                if reason:
                    counts["not seekable"] += 1
                    unseekable.append((path, reason))
            shown.update(counts)
    cache.close()
    print(", ".join(f"{n} {what}" for what, n in counts.items()))
    for title, rows in (("not seekable (clips decoded from the first frame)", unseekable), ("failed", failed)):
        if rows:
            print(f"{title}:")
            for path, reason in sorted(rows):
                print(f"  {path}: {reason}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
