"""Index a data set's videos ahead of time: ``python -m parallel_loader.video.index ROOT_OR_LIST [--threads N]``.

``ROOT_OR_LIST`` is a directory or a URL prefix (every video file under it, at
any depth), or a text file listing videos, one a line. A list gives each video
as the first field of its line, so split files such as UCF101's
``trainlist01.txt`` work. Relative paths are taken from the list's directory,
and ``#`` starts a comment.

``ROOT_OR_LIST`` may name local tar shards instead (``train-{00000..00099}.tar``,
``train-*.tar``). Each one gets DALI's index beside it (``train-00000.idx``,
version 1.2), which ``webdataset_samples`` then reads instead of the tar headers.
Its video members are indexed as files are.

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
import logging
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from .._base.errors import VideoDecodeError
from .._base.file_pass import FileProgress, log_progress_to_stderr
from .._base.keys import is_url
from .._bytes.listing import RemotePath
from .._bytes.source import source_key
from .._bytes.tar_members import index_files, member_table, member_url
from .._indexes.cache import IndexCache
from .._samples.annotations import VIDEO_EXTENSIONS
from .._samples.webdataset import expand_braces, key_and_extension, shard_paths

__all__ = ["main", "video_files", "write_shard_index"]

log = logging.getLogger(__name__)


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


def write_shard_index(shard: str) -> str | None:
    """Write DALI's index (version 1.2) of the local shard at ``shard`` beside it; return the index's path.

    One line a sample, ``EXT OFFSET SIZE NAME`` for each of its members, in the
    shard's order. A member name with white space cannot be written. Such a
    shard gets no index, and None is returned: its table comes from its headers.

    Raises:
        FileNotFoundError: there is no file at ``shard``.
        VideoDecodeError: it is not an uncompressed tar file.
    """
    table = member_table(shard)
    samples: dict[str, list[str]] = {}
    for name, (offset, size) in table.members.items():
        if any(c.isspace() for c in name):
            log.warning("%s: member %r has white space in its name, which DALI's index cannot hold", shard, name)
            return None
        key, extension = key_and_extension(name)
        if extension and not os.path.basename(key).startswith("."):
            samples.setdefault(key, []).append(f"{extension} {offset} {size} {name}")
    path = index_files(table.key.name)[0][0]
    lines = [f"v1.2 {len(samples)}"] + [" ".join(members) for members in samples.values()]
    written = f"{path}.{os.getpid()}.part"
    with open(written, "w", encoding="utf-8") as index:
        index.write("\n".join(lines) + "\n")
    os.replace(written, path)  # whole or not at all
    return path


def _shards(root_or_list: str) -> list[str]:
    """The local shards ``root_or_list`` names (a ``.tar`` path, braces or glob), or [] when it names none."""
    if is_url(root_or_list) or not all(p.endswith(".tar") for p in expand_braces(root_or_list)):
        return []
    return shard_paths(root_or_list)


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
    shards = _shards(args.root_or_list)
    paths = [] if shards else video_files(args.root_or_list)
    wanted = {e.lower().lstrip(".") for e in VIDEO_EXTENSIONS}
    for shard in shards:
        written = write_shard_index(shard)
        print(f"{shard}: {f'DALI index written to {written}' if written else 'no index written'}", flush=True)
        members = member_table(shard).members
        paths += [member_url(shard, n) for n in members if n.rpartition(".")[2].lower() in wanted]
    print(f"{len(paths)} videos from {args.root_or_list}; indexes kept in {cache.directory}", flush=True)
    counts = {"found": 0, "made": 0, "not seekable": 0, "failed": 0}
    unseekable: list[tuple[str, str]] = []
    failed: list[tuple[str, str]] = []

    def one(path: str) -> tuple[bool, str]:
        """Index ``path``: (whether it was in the store already, why its seeks are not exact or "")."""
        found = (cache.latest(path) if is_url(path) else cache.lookup(source_key(path))) is not None
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
