"""Remote videos: clips/s and requests per clip from an S3-compatible server with latency, against local files.

moto's S3 server runs on 127.0.0.1 behind a proxy that adds ``--latency-ms``
to every request and counts requests and bytes. Three readers take the same
16-frame clips (random starts, one seed) at each thread count:

* ``local``: ``read_clip`` on the local copies (indexes made before timing);
* ``parallel_loader``: ``read_clip`` on ``s3://`` URLs, the objects indexed
  before timing (``first touch`` reports indexing one object: its requests,
  bytes and seconds); each clip is then one ranged read;
* ``fsspec+PyAV``: what users write today: ``s3fs`` ``open()`` with its default
  cache, PyAV seeking to the clip's start and decoding to its end.

Two sets: 10-s files and 5-minute files (H.264, 320x240, 25 fps, a keyframe
every 2 s, moov at the end as most encoders write it). The 2-core machine
runs the server, the proxy and the decoding, so the remote readers here are
bounded by the server's CPU as much as by the network.

    python -m benchmarks.video_remote                     # 1, 8 and 16 threads
    python -m benchmarks.video_remote --threads 1,8 --clips 32
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from ._common import format_table, parse_ints

CLIP_LEN = 16
SIZE = (240, 320)


def write_mp4(path: Path, seconds: int, seed: int) -> Path:
    """An H.264 MP4 of ``seconds`` at 25 fps whose frames change (moving noise), keyframe every 2 s."""
    rng = np.random.default_rng(seed)
    height, width = SIZE
    texture = rng.integers(0, 255, (height, width * 2, 3), dtype=np.uint8)
    with av.open(str(path), "w") as output:
        stream = output.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {
            "g": "50",
            "keyint_min": "50",
            "sc_threshold": "0",
            "bf": "2",
            "crf": "28",
            "preset": "ultrafast",
        }
        for i in range(seconds * 25):
            shift = (3 * i) % width
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(texture[:, shift : shift + width]), format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, 25)
            output.mux(stream.encode(frame))
        output.mux(stream.encode())
    return path


def fsspec_pyav_clip(fs: object, url: str, start: int, fps: int = 25) -> np.ndarray:
    """A clip as users read one today: the object opened with fsspec's defaults, PyAV seeking in it."""
    with fs.open(url, "rb") as file, av.open(file) as container:  # type: ignore[attr-defined]
        stream = container.streams.video[0]
        stream.codec_context.thread_count = 1
        first = int(start / fps / stream.time_base)
        container.seek(first, stream=stream, backward=True)
        frames = []
        for frame in container.decode(stream):
            if frame.pts < first:
                continue
            frames.append(frame.to_ndarray(format="rgb24"))
            if len(frames) == CLIP_LEN:
                return np.stack(frames)
    raise RuntimeError(f"{url}: too short for a clip at {start}")


def timed(read: Callable[[int], object], jobs: list[int], threads: int) -> tuple[float, float]:
    """Clips/s reading ``jobs`` (indices into the clip list) with ``threads`` threads; this process's CPU ms a clip."""
    started, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(read, jobs))
    return len(jobs) / (time.perf_counter() - started), 1000 * (time.process_time() - cpu) / len(jobs)


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.video_remote", description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=parse_ints, default=[1, 8, 16], help="thread counts (default 1,8,16)")
    parser.add_argument("--clips", type=int, default=48, help="clips per reader and thread count (default 48)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="added to every request (default 20)")
    parser.add_argument("--short", type=int, default=8, help="10-s files (default 8)")
    parser.add_argument("--long", type=int, default=2, help="5-minute files (default 2)")
    parser.add_argument("--long-seconds", type=int, default=300, help="length of the long files (default 300)")
    parser.add_argument(
        "--server-in-process",
        action="store_true",
        help="run moto and the proxy as threads of this process (default: a child process, as a real server is)",
    )
    args = parser.parse_args(argv)

    import boto3
    import fsspec

    from parallel_loader.video._bytes import objects as remote
    from tests.remote_servers import FaultProxy, ServedApart, s3_server, s3_test_keys

    results: dict = {}
    if args.server_in_process:
        served = contextlib.ExitStack()
        endpoint = served.enter_context(s3_server())
        proxy = served.enter_context(FaultProxy(endpoint, latency_s=args.latency_ms / 1000))
    else:
        served = contextlib.ExitStack()
        served.enter_context(s3_test_keys())
        proxy = served.enter_context(ServedApart(args.latency_ms / 1000))
        endpoint = proxy.endpoint
    with tempfile.TemporaryDirectory() as scratch, served:
        folder = Path(scratch)
        sets = {
            "10-s": [write_mp4(folder / f"short{i}.mp4", 10, i) for i in range(args.short)],
            _length(args.long_seconds): [
                write_mp4(folder / f"long{i}.mp4", args.long_seconds, 100 + i) for i in range(args.long)
            ],
        }
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket="bench")
        for files in sets.values():
            for path in files:
                client.upload_file(str(path), "bench", path.name)
        client.close()
        rows = []
        remote.configure("s3://", {"endpoint_url": proxy.url})
        peer = fsspec.filesystem("s3", endpoint_url=proxy.url, skip_instance_cache=True)
        sets = {name: files for name, files in sets.items() if files}
        for set_name, files in sets.items():
            rows += run_set(set_name, files, folder, proxy, peer, args, results)
        remote.forget_settings()
    print()
    print(format_table(HEADERS, rows))
    ratios = []
    for set_name in sets:
        for threads in args.threads:
            ours = results[(set_name, "parallel_loader", threads)]
            ratios.append(
                (
                    set_name,
                    threads,
                    ours / results[(set_name, "local", threads)],
                    ours / results[(set_name, "fsspec+PyAV", threads)],
                )
            )
    print()
    print(format_table(["set", "threads", "remote / local", "remote / fsspec+PyAV"], ratios))
    return {"rows": rows, "ratios": ratios, "median_ratio": statistics.median(r[2] for r in ratios)}


def _length(seconds: int) -> str:
    return f"{seconds // 60}-min" if seconds % 60 == 0 else f"{seconds}-s"


HEADERS = ["set", "reader", "threads", "clips/s", "CPU ms/clip", "requests/clip", "MB/clip"]


def run_set(
    set_name: str, files: list[Path], folder: Path, proxy: object, peer: object, args: argparse.Namespace, results: dict
) -> list[tuple]:
    """Time every reader on one set at every thread count; print each row as it is measured."""
    from parallel_loader.video import frame_count, read_clip
    from parallel_loader.video._indexes.cache import IndexCache

    local_cache, remote_cache = IndexCache(None), IndexCache(folder / f"index-{set_name}")
    frames = [frame_count(path, index_cache=local_cache) for path in files]
    rng = random.Random(0)
    clips = [(k, rng.randrange(frames[k] - CLIP_LEN)) for k in range(len(files)) for _ in range(64)]
    rng.shuffle(clips)
    urls = [f"s3://bench/{path.name}" for path in files]
    proxy.reset()
    started = time.perf_counter()
    read_clip(urls[0], 0, CLIP_LEN, index_cache=remote_cache)
    first_s = time.perf_counter() - started
    size = files[0].stat().st_size
    print(
        f"{set_name}: first touch of a {size / 1e6:.1f} MB object: {proxy.requests} requests, "
        f"{proxy.bytes / 1e6:.3f} MB ({100 * proxy.bytes / size:.1f}% of it), {first_s:.2f} s",
        flush=True,
    )
    for url in urls[1:]:
        read_clip(url, 0, 1, index_cache=remote_cache)
    readers: dict[str, Callable[[int], object]] = {
        "local": lambda j: read_clip(files[clips[j][0]], clips[j][1], CLIP_LEN, index_cache=local_cache),
        "parallel_loader": lambda j: read_clip(urls[clips[j][0]], clips[j][1], CLIP_LEN, index_cache=remote_cache),
        "fsspec+PyAV": lambda j: fsspec_pyav_clip(peer, urls[clips[j][0]], clips[j][1]),
    }
    rows = []
    for threads in args.threads:
        jobs = list(range(args.clips))
        for name, read in readers.items():
            proxy.reset()
            rate, cpu_ms = timed(read, jobs, threads)
            rows.append(
                (set_name, name, threads, rate, cpu_ms, proxy.requests / len(jobs), proxy.bytes / len(jobs) / 1e6)
            )
            results[(set_name, name, threads)] = rate
            print(format_table(HEADERS, rows[-1:]).splitlines()[-1], flush=True)
    return rows


if __name__ == "__main__":
    main()
