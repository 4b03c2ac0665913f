"""Tar shards: clips/s from local shards against the same files loose, and from shards on a server; requests.

``--videos`` 10-s H.264 MP4s (320x240, 25 fps, a keyframe every 2 s, as
``video_remote`` writes them) go loose into a folder and into ``--shards``
WebDataset shards (a video and a caption a sample). A server (``--server``:
moto's S3 server, rclone's, or nginx over HTTP) holds the shards and the loose
files. It runs behind a proxy that adds ``--latency-ms`` to every request and
counts requests; a child process starts both. Four ways read the same 16-frame
clips (random starts, one seed), with each thread count, every index made before timing:

* ``loose``: ``read_clip`` on the files;
* ``local shards``: ``read_clip`` on ``tar://MEMBER::/path/shard.tar``;
* ``remote shards``: ``read_clip`` on ``tar://MEMBER::s3://bench/shard.tar`` (nginx: ``http://...``);
* ``remote loose``: ``read_clip`` on the files on the server, ``s3://bench/NAME.mp4``: what the server allows.

Rounds interleave the ways; the table gives the median clips/s and its range,
and the CPU a clip takes in this process (reading and decoding), in the proxy,
and in the server (moto runs in the proxy's process). The requests table counts
a first epoch (``webdataset_samples`` and one clip a member, a new index store)
and a later one (new member tables and index cache over the same store, as a
new process finds them: one clip a member).

Every way's clips are checked against the loose files' on a few clips.

    python -m benchmarks.video_shards --rounds 3 --server nginx
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ._common import format_table, parse_ints
from .video_remote import CLIP_LEN, write_mp4

__all__ = ["main"]

WAYS = ("loose", "local shards", "remote shards", "remote loose")
SERVERS = ("moto", "rclone", "nginx")


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.video_shards", description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=parse_ints, default=[1, 16], help="thread counts (default 1,16)")
    parser.add_argument("--videos", type=int, default=16, help="videos (default 16)")
    parser.add_argument("--seconds", type=int, default=10, help="each video's length (default 10)")
    parser.add_argument("--shards", type=int, default=4, help="shards they are split into (default 4)")
    parser.add_argument("--clips", type=int, default=64, help="clips per way, round and thread count (default 64)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the ways interleaved (default 3)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="added to every request (default 20)")
    parser.add_argument("--server", choices=SERVERS, default="moto", help="the server holding the files (default moto)")
    args = parser.parse_args(argv)

    import boto3

    from parallel_loader.video import (
        IndexCache,
        default_index_cache,
        frame_count,
        read_clip,
        set_default_index_cache,
        webdataset_samples,
    )
    from parallel_loader.video._bytes import objects as remote
    from parallel_loader.video._bytes import tar_members
    from tests.remote_servers import ServedApart, s3_test_keys

    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as served:
        served.enter_context(s3_test_keys())
        root = Path(scratch)
        folder = root / "bench"  # the bucket, for rclone; nginx serves it as /bench
        folder.mkdir()
        files = [write_mp4(folder / f"{v:06d}.mp4", args.seconds, v) for v in range(args.videos)]
        shards = _shards(folder, files, args.shards)
        proxy = served.enter_context(ServedApart(args.latency_ms / 1000, args.server, root))
        if args.server == "moto":
            client = boto3.client("s3", endpoint_url=proxy.endpoint)
            client.create_bucket(Bucket="bench")
            for path in [*shards, *files]:
                client.upload_file(str(path), "bench", path.name)
            client.close()
        if args.server == "nginx":
            where = f"{proxy.url}/bench"
        else:
            remote.configure("s3://", {"endpoint_url": proxy.url})
            where = "s3://bench"
        pattern = f"{where}/shard-{{0000..{args.shards - 1:04d}}}.tar"
        processes = _Processes(proxy)

        # Requests: a first epoch over a new store, then a later one as a new process finds it.
        store = root / "index"
        before = default_index_cache()
        set_default_index_cache(IndexCache(store))  # where webdataset_samples keeps the member tables
        served.callback(set_default_index_cache, before)
        proxy.reset()
        members = webdataset_samples(pattern, fields=["txt"])
        listing = proxy.requests
        first_cache = IndexCache(store)
        for sample in members:
            read_clip(sample.path, 0, CLIP_LEN, index_cache=first_cache)
        first = proxy.requests
        tar_members.forget_tables()
        later_cache = IndexCache(store)
        proxy.reset()
        for sample in members:
            read_clip(sample.path, args.seconds * 10, CLIP_LEN, index_cache=later_cache)
        later = proxy.requests
        count = len(members)
        request_rows = [
            ("listing (member tables, captions checked)", listing, listing / count),
            ("first epoch, listing included", first, first / count),
            ("later epoch, a new process's state", later, later / count),
        ]
        print(format_table(["epoch", "requests", "per member"], request_rows), flush=True)

        # Throughput: the same clips three ways, every index made before timing.
        local_cache = IndexCache(None)
        local_members = webdataset_samples([str(s) for s in shards])
        paths = {
            "loose": [str(f) for f in files],
            "local shards": [s.path for s in local_members],
            "remote shards": [s.path for s in members],
            "remote loose": [f"{where}/{f.name}" for f in files],
        }
        frames = [frame_count(f, index_cache=local_cache) for f in files]
        for path in paths["local shards"]:
            read_clip(path, 0, 1, index_cache=local_cache)
        caches = {"loose": local_cache, "local shards": local_cache, "remote shards": later_cache}
        caches["remote loose"] = later_cache
        for path in paths["remote loose"]:
            read_clip(path, 0, 1, index_cache=later_cache)
        rng = random.Random(0)
        rates: dict[tuple[str, int], list[float]] = {}
        cpu: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
        for round_number in range(args.rounds):
            for threads in args.threads:
                clips = [(k, rng.randrange(frames[k] - CLIP_LEN)) for k in rng.choices(range(count), k=args.clips)]
                order = list(WAYS)
                random.Random(round_number * 100 + threads).shuffle(order)
                for way in order:
                    cpu_before = processes.cpu()
                    rate = _timed(_reader(read_clip, paths[way], caches[way]), clips, threads)
                    spent = [(b - a) * 1000 / len(clips) for a, b in zip(cpu_before, processes.cpu(), strict=True)]
                    rates.setdefault((way, threads), []).append(rate)
                    cpu.setdefault((way, threads), []).append(tuple(spent))
                    print(f"round {round_number + 1}, {threads} threads, {way}: {rate:.1f} clips/s", flush=True)
        loose_clip = _reader(read_clip, paths["loose"], local_cache)
        same = sum(
            all(np.array_equal(_reader(read_clip, paths[w], caches[w])(c), loose_clip(c)) for w in WAYS[1:])
            for c in clips[:8]
        )
        print(f"same clips as loose: {same}/{len(clips[:8])}")
        remote.forget_settings()
    rows = []
    for threads in args.threads:
        base = {w: statistics.median(rates[w, threads]) for w in WAYS}
        for way in WAYS:
            low, high = min(rates[way, threads]), max(rates[way, threads])
            against = {"remote shards": "local shards", "remote loose": "local shards"}.get(way, "loose")
            spent = [statistics.median(c[k] for c in cpu[way, threads]) for k in range(3)]
            rows.append(
                (
                    threads,
                    way,
                    f"{base[way]:.1f} ({low:.1f}-{high:.1f})",
                    f"{base[way] / base[against]:.2f}x vs {against}",
                    " / ".join(f"{c:.1f}" for c in spent[: 2 if args.server == "moto" else 3]),
                )
            )
    print()
    print(f"server: {args.server}, {args.latency_ms:g} ms added to each request")
    cpu_header = "CPU ms a clip: reader / " + ("moto and proxy" if args.server == "moto" else "proxy / server")
    print(format_table(["threads", "way", "clips/s (min-max)", "ratio", cpu_header], rows))
    return {"server": args.server, "requests": request_rows, "throughput": rows, "same": f"{same}/{len(clips[:8])}"}


def _shards(folder: Path, files: list[Path], count: int) -> list[Path]:
    """``count`` shards holding ``files`` in turn, each video with a caption, as video2dataset writes them."""
    shards = [folder / f"shard-{s:04d}.tar" for s in range(count)]
    per = -(-len(files) // count)
    for s, shard in enumerate(shards):
        with tarfile.open(shard, "w") as tar:
            for path in files[s * per : (s + 1) * per]:
                tar.add(path, arcname=path.name)
                caption = folder / f"{path.stem}.txt"
                caption.write_text(f"a caption of {path.stem}")
                tar.add(caption, arcname=caption.name)
    return shards


class _Processes:
    """CPU seconds so far of this process, the proxy's and the server's (0 for moto, which runs in the proxy's).

    psutil reads them from the OS, in clock ticks (10 ms on Linux): a figure a clip is good to 10 ms over the clips.
    """

    def __init__(self, served: object) -> None:
        import psutil

        self._ours = psutil.Process()
        self._proxy = psutil.Process(served.proxy_pid)  # type: ignore[attr-defined]
        apart = served.server_pid != served.proxy_pid  # type: ignore[attr-defined]
        self._server = psutil.Process(served.server_pid) if apart else None  # type: ignore[attr-defined]

    def cpu(self) -> tuple[float, float, float]:
        def seconds(process: object) -> float:
            if process is None:
                return 0.0
            times = process.cpu_times()  # type: ignore[attr-defined]
            return times.user + times.system

        return seconds(self._ours), seconds(self._proxy), seconds(self._server)


def _reader(read_clip: Callable, paths: list[str], cache: object) -> Callable[[tuple[int, int]], object]:
    """A clip ``(video, start)`` of ``paths`` read with ``cache``."""
    return lambda clip: read_clip(paths[clip[0]], clip[1], CLIP_LEN, index_cache=cache)


def _timed(read: Callable[[tuple[int, int]], object], clips: list[tuple[int, int]], threads: int) -> float:
    """Clips/s reading ``clips`` with ``threads`` threads."""
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(read, clips))
    return len(clips) / (time.perf_counter() - started)


if __name__ == "__main__":
    main()
