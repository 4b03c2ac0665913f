"""CPU per clip from videos in memory and from tar shards, against the same files loose.

The same videos (``--videos`` of each codec, ``--seconds`` long at 25 fps, a
keyframe every second, two B-frames where the codec has them: H.264 in MP4 at
640x360 and XviD in AVI at 320x240) are read four ways:

* ``loose``: ``read_clip(path)``;
* ``bytes``: ``read_clip(data)``, the file's bytes held in memory (each call hashes them);
* ``BytesIO``: ``read_clip(io.BytesIO(data))`` (the same, through a file object);
* ``shard``: ``read_clip("tar://NAME::SHARD")``, the member read in place from one tar shard.

Clips of ``--clip-len`` frames at ``--stride`` from random starts, scaled to
``--size``, one thread, one decoder thread per file. ``warm``: each video's index
made before the timing, ``--clips`` clips per video per round. ``first touch``: a
new memory-only index cache each round, one clip per video (its index made by that
read). Rounds interleave the ways in a new order each time; the table gives the
median CPU ms per clip (``time.process_time``), its rounds' range, and its ratio to ``loose``.
The lines after it give the videos' mean size, what hashing one costs, and the hashes' rates on one core.
Every clip is checked to be the same, pixel for pixel, whichever way read it.

    python -m benchmarks.video_memory --rounds 5
"""

from __future__ import annotations

import argparse
import hashlib
import io
import random
import statistics
import tarfile
import time
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from parallel_loader.video import IndexCache, frame_count, read_clip

from ._common import add_out_argument, format_table, make_parser, write_report
from ._workloads import REPO, limit_opencv_threads
from .video_decode import _scene

__all__ = ["main"]

FPS = 25
WAYS = ("loose", "bytes", "BytesIO", "shard")
# codec name -> (file extension, encoder, (height, width), codec tag, B-frames)
CODECS = {
    "h264-mp4": ("mp4", "libx264", (360, 640), None, 2),
    "xvid-avi": ("avi", "mpeg4", (240, 320), "XVID", 2),
}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = make_parser(__doc__)
    parser.add_argument("--videos", type=int, default=8, help="videos of each codec (default 8)")
    parser.add_argument("--seconds", type=float, default=4.0, help="each video's length (default 4)")
    parser.add_argument("--clips", type=int, default=4, help="warm clips per video per round (default 4)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, the ways interleaved (default 5)")
    parser.add_argument("--clip-len", type=int, default=16, help="frames per clip (default 16)")
    parser.add_argument("--stride", type=int, default=2, help="step between frames (default 2)")
    parser.add_argument("--size", type=int, nargs=2, default=(112, 112), help="clip height and width")
    parser.add_argument("--data", type=Path, default=REPO / "data" / "video_memory", help="where the videos go")
    add_out_argument(parser)
    args = parser.parse_args(argv)
    limit_opencv_threads()
    results: dict[str, Any] = {}
    rows = []
    for codec in CODECS:
        paths, shard = _videos(args, codec)
        result = _measure(args, paths, shard)
        results[codec] = result
        for phase in ("warm", "first touch"):
            loose = result[phase]["loose"]
            for way in WAYS:
                ms = result[phase][way]
                low, high = min(result["rounds"][phase][way]), max(result["rounds"][phase][way])
                cells = [f"{ms:.2f} ({low:.2f}-{high:.2f})", f"{ms / loose:.2f}x", result["exact"][way]]
                rows.append([codec, phase, way, *cells])
    print(format_table(["codec", "clips", "way", "CPU ms per clip (min-max)", "vs loose", "same clips"], rows))
    for codec, result in results.items():
        print(f"{codec}: {result['mean_kb']:.0f} KB a video; SHA-256 of its bytes {result['sha256_ms']:.3f} ms")
    sha256 = results[next(iter(CODECS))]["sha256_mb_s"]
    print(f"SHA-256: {sha256:,.0f} MB/s, BLAKE2b: {_hash_rate('blake2b'):,.0f} MB/s")
    return write_report(args, "video_memory", {"codecs": results})


def _hash_rate(name: str, megabytes: int = 64) -> float:
    """MB/s of CPU time of ``hashlib``'s ``name`` over ``megabytes`` of random bytes, the best of 3 (one core)."""
    data = np.random.default_rng(0).bytes(megabytes << 20)
    best = float("inf")
    for _ in range(3):
        began = time.process_time()  # CPU time: other processes on the machine do not count
        hashlib.new(name, data).digest()
        best = min(best, time.process_time() - began)
    return megabytes / best


def _videos(args: argparse.Namespace, codec: str) -> tuple[list[Path], Path]:
    """The codec's videos (made once) and a shard holding them (made each run)."""
    ext, encoder, (height, width), tag, b_frames = CODECS[codec]
    folder = args.data / f"{codec}-{args.seconds:g}s"
    folder.mkdir(parents=True, exist_ok=True)
    frames = round(args.seconds * FPS)
    paths = []
    for v in range(args.videos):
        path = folder / f"{v:04d}.{ext}"
        if not path.exists() or frame_count(path, index_cache=IndexCache(None)) != frames:
            _write(path, encoder, height, width, tag, b_frames, frames, v)
        paths.append(path)
    shard = folder / "shard.tar"
    with tarfile.open(shard, "w") as tar:
        for path in paths:
            tar.add(path, arcname=path.name)
    return paths, shard


def _write(path: Path, encoder: str, height: int, width: int, tag: str | None, b_frames: int, frames: int, seed: int):
    with av.open(str(path), "w") as output:
        stream = output.add_stream(encoder, rate=FPS)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.gop_size, stream.max_b_frames, stream.time_base = FPS, b_frames, Fraction(1, FPS)
        if tag:
            stream.codec_tag = tag
            stream.bit_rate = 1_500_000
        else:
            stream.options = {"g": str(FPS), "keyint_min": str(FPS), "sc_threshold": "0", "crf": "23"}
        for i, pixels in enumerate(_scene(np.random.default_rng(seed), frames, height, width)):
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, FPS)
            output.mux(stream.encode(frame))
        output.mux(stream.encode())


def _measure(args: argparse.Namespace, paths: list[Path], shard: Path) -> dict[str, Any]:
    """Median CPU ms per clip of each way, warm and first touch, and how many clips equalled ``loose``'s."""
    data = [p.read_bytes() for p in paths]
    sources: dict[str, Callable[[int], object]] = {
        "loose": lambda v: paths[v],
        "bytes": lambda v: data[v],
        "BytesIO": lambda v: io.BytesIO(data[v]),
        "shard": lambda v: f"tar://{paths[v].name}::{shard}",
    }
    frames = frame_count(paths[0], index_cache=IndexCache(None))
    span = (args.clip_len - 1) * args.stride + 1
    rng = random.Random(0)
    size = tuple(args.size)
    warm_cache = IndexCache(None)
    for way in WAYS:
        for v in range(len(paths)):
            read_clip(sources[way](v), 0, 1, index_cache=warm_cache)
    times: dict[str, dict[str, list[float]]] = {"warm": {w: [] for w in WAYS}, "first touch": {w: [] for w in WAYS}}
    exact = dict.fromkeys(WAYS, 0)
    clips = 0
    for _ in range(args.rounds):
        starts = [[rng.randrange(frames - span + 1) for _ in range(args.clips)] for _ in paths]
        expected: dict[tuple[int, int], np.ndarray] = {}
        order = list(WAYS)
        rng.shuffle(order)
        for way in order:
            cold = IndexCache(None)
            began = time.process_time()
            for v in range(len(paths)):
                clip = read_clip(sources[way](v), starts[v][0], args.clip_len, args.stride, size, index_cache=cold)
                _check(expected, exact, way, (v, -1), clip)
            times["first touch"][way].append((time.process_time() - began) * 1000 / len(paths))
            began = time.process_time()
            for v in range(len(paths)):
                for j, start in enumerate(starts[v]):
                    clip = read_clip(sources[way](v), start, args.clip_len, args.stride, size, index_cache=warm_cache)
                    _check(expected, exact, way, (v, j), clip)
            times["warm"][way].append((time.process_time() - began) * 1000 / (len(paths) * args.clips))
        clips += len(paths) * (args.clips + 1)
    result: dict[str, Any] = {phase: {w: statistics.median(t) for w, t in by.items()} for phase, by in times.items()}
    result["rounds"] = times
    result["exact"] = {w: f"{n}/{clips}" for w, n in exact.items()}
    result["mean_kb"] = statistics.mean(len(d) for d in data) / 1024
    result["sha256_mb_s"] = _hash_rate("sha256")
    result["sha256_ms"] = result["mean_kb"] / 1024 / result["sha256_mb_s"] * 1000
    return result


def _check(expected: dict[tuple[int, int], np.ndarray], exact: dict[str, int], way: str, key, clip) -> None:
    """Count ``clip`` as exact if it equals the clip the round's first way read for ``key``."""
    first = expected.setdefault(key, clip)
    exact[way] += int(np.array_equal(first, clip))


if __name__ == "__main__":
    main()
