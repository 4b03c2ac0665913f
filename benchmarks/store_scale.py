"""Index store at scale: N synthetic records written by 4 processes, then looked up by a fresh process.

Each record is a Kinetics-like file (a 63-character path, 300 to 1,299 frames,
5 keyframes, evenly spaced timestamps): its key is unique (size and version),
its index one of 1,000 bodies. Writers are forked processes, each writing its
share through ``IndexStore.write`` in transactions of ``--batch`` records.
Then one process writes ``--puts`` more through ``IndexCache.put``, one record
a transaction, for the cost of a put.

A fresh (spawned) process then opens ``IndexCache(directory)`` and times its
first lookup, then ``--lookups`` lookups of random records. It reports its
resident memory growth from before the cache was made (``psutil``), and checks
that every lookup returns the index written. The lookups run again split over
4 threads sharing the cache (one SQLite connection behind a lock).

    python -m benchmarks.store_scale --records 2000000
    python -m benchmarks.store_scale                      # 10,000,000 records
"""

from __future__ import annotations

import multiprocessing
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from fractions import Fraction
from functools import cache
from pathlib import Path
from typing import Any

import psutil

from benchmarks._common import add_out_argument, format_table, make_parser, write_report
from parallel_loader.video._base.facts import PACKETS, VideoIndex, encode
from parallel_loader.video._base.keys import SourceKey
from parallel_loader.video._indexes.cache import IndexCache
from parallel_loader.video._indexes.store import FILE_NAME, IndexStore, Record

__all__ = ["expected_body", "main", "record_key", "synthetic_record"]

BODIES = 1000  # distinct index bodies: a row read for the wrong key shows
_TICK = Fraction(1, 15360)  # a common MP4 time base


def record_key(k: int) -> SourceKey:
    """Record ``k``'s key: a Kinetics-like path, and a size and version no other record has."""
    return SourceKey(f"/data/kinetics700/train/class_{k % 700:03d}/{k:011d}_000010_000020.mp4", 10**6 + k, f"m{k:x}")


@cache
def _body(which: int) -> bytes:
    keyframes = (0, 60, 120, 180, 240)
    return encode(VideoIndex(300 + which, keyframes, True, "", 0, 512, intact=True, made_by=PACKETS, time_base=_TICK))


def expected_body(k: int) -> bytes:
    """The encoded index record ``k`` holds."""
    return _body(k % BODIES)


def synthetic_record(k: int) -> Record:
    """Record ``k`` as a writer stores it, written now."""
    written_ns = time.time_ns()
    key = record_key(k)
    return Record(key.slot, Record.entry_of(key, written_ns, expected_body(k)), written_ns)


def _write_share(directory: str, writer: int, writers: int, records: int, batch: int) -> None:
    store = IndexStore(directory)
    share = range(writer, records, writers)
    for start in range(0, len(share), batch):
        store.write(synthetic_record(k) for k in share[start : start + batch])
        if not store.writable:
            raise SystemExit(3)
    store.close()


def _put_one_by_one(directory: str, first: int, count: int, out: Any) -> None:
    cache = IndexCache(directory)
    keys = [record_key(k) for k in range(first, first + count)]
    indexes = [VideoIndex(300, (0, 60), True, "", 0, 512, intact=True, made_by=PACKETS) for _ in keys]
    started = time.perf_counter()
    for key, index in zip(keys, indexes, strict=True):
        cache.put(key, index)
    out.put((time.perf_counter() - started) / count)
    cache.close()


def _look_up(directory: str, records: int, lookups: int, seed: int, out: Any) -> None:
    """In a fresh process: the first lookup, ``lookups`` random ones, then again over 4 threads; memory; checks."""
    process = psutil.Process()
    rng = random.Random(seed)
    picked = [rng.randrange(records) for _ in range(lookups)]
    keys = [record_key(k) for k in picked]
    for k in set(k % BODIES for k in picked):
        _body(k)
    rss0 = process.memory_info().rss
    cache = IndexCache(directory)
    started = time.perf_counter()
    first = cache.lookup(keys[0])
    first_s = time.perf_counter() - started
    started = time.perf_counter()
    found = [cache.lookup(key) for key in keys]
    lookups_s = time.perf_counter() - started
    rss1 = process.memory_info().rss
    pairs = zip([first, *found], picked[:1] + picked, strict=True)
    wrong = sum(f is None or encode(f) != expected_body(k) for f, k in pairs)
    cache.clear()  # from the store again, not from memory
    parts = [keys[t::4] for t in range(4)]
    threads = [threading.Thread(target=lambda part=part: [cache.lookup(key) for key in part]) for part in parts]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    threads_s = time.perf_counter() - started
    cache.close()
    out.put({"first_ms": first_s * 1000, "lookups_s": lookups_s, "threads_s": threads_s, "rss_mb": (rss1 - rss0) / 1e6})
    out.put(wrong)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = make_parser(__doc__)
    parser.add_argument("--records", type=int, default=10_000_000, help="records in the store (default 10,000,000)")
    parser.add_argument("--writers", type=int, default=4, help="processes writing them (default 4)")
    parser.add_argument("--batch", type=int, default=10_000, help="records a transaction (default 10,000)")
    parser.add_argument("--puts", type=int, default=5_000, help="records then put one by one (default 5,000)")
    parser.add_argument("--lookups", type=int, default=10_000, help="random lookups (default 10,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", help="the store's folder, kept (default: a temporary one, removed)")
    parser.add_argument(
        "--lookups-only", action="store_true", help="only look up, in the store an earlier run left in --dir"
    )
    add_out_argument(parser)
    args = parser.parse_args(argv)
    if args.lookups_only and not (args.dir and (Path(args.dir) / FILE_NAME).is_file()):
        parser.error("--lookups-only needs --dir holding a store an earlier run wrote")
    folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="store_scale-"))
    try:
        return _run(args, folder)
    finally:
        if not args.dir:
            shutil.rmtree(folder, ignore_errors=True)


def _run(args: Any, folder: Path) -> dict[str, Any]:
    write_s, put_us = _write(args, str(folder)) if not args.lookups_only else (float("nan"), float("nan"))
    size = sum(f.stat().st_size for f in folder.iterdir() if f.name.startswith(FILE_NAME))
    spawn = multiprocessing.get_context("spawn")
    queue = spawn.Queue()
    reader = spawn.Process(target=_look_up, args=(str(folder), args.records, args.lookups, args.seed, queue))
    reader.start()
    read, wrong = queue.get(), queue.get()
    reader.join()
    print(
        f"index store: {args.records:,} synthetic records written by {args.writers} processes in transactions of "
        f"{args.batch:,}, {size / 1e6:,.0f} MB on disk ({size / args.records:.0f} bytes a record); "
        f"then a fresh process; one run"
    )
    rows = [
        ["write, records/s", f"{args.records / write_s:,.0f}"],
        ["IndexCache.put one by one, us a record", f"{put_us:,.0f}"],
        ["first lookup, ms", f"{read['first_ms']:.1f}"],
        [f"{args.lookups:,} random lookups, s", f"{read['lookups_s']:.2f}"],
        ["the same over 4 threads, s", f"{read['threads_s']:.2f}"],
        ["resident memory growth, MB", f"{read['rss_mb']:.1f}"],
        ["lookups not returning the index written", f"{wrong}"],
    ]
    print(format_table(["measure", "value"], rows))
    fields = {"write_s": write_s, "bytes": size, "put_us": put_us, **read, "wrong": wrong}
    return write_report(args, "store_scale", fields)


def _write(args: Any, directory: str) -> tuple[float, float]:
    """Write the store with ``args.writers`` processes, then put ``args.puts`` more: (seconds, us a put)."""
    fork = multiprocessing.get_context("fork")
    started = time.perf_counter()
    writers = [
        fork.Process(target=_write_share, args=(directory, w, args.writers, args.records, args.batch))
        for w in range(args.writers)
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    if any(w.exitcode != 0 for w in writers):
        raise SystemExit(f"a writer failed: exit codes {[w.exitcode for w in writers]}")
    write_s = time.perf_counter() - started
    queue = fork.Queue()
    putter = fork.Process(target=_put_one_by_one, args=(directory, args.records, args.puts, queue))
    putter.start()
    put_us = queue.get() * 1e6
    putter.join()
    return write_s, put_us


if __name__ == "__main__":
    main()
