"""The CPU a clip costs with each ``resize``: the frame squashed, its aspect kept, or letterboxed; and with ``scale=``.

One generated set (made once with PyAV, then reused): 240p H.264 in MP4 at
426x240, 25 fps, 3 s, a keyframe every 25 frames, as Something-Something v2
and the TensorFlow tutorial's clips are shaped. Each file's index is built
before the timing. Each run reads one evaluation clip per file through a
``VideoDataset`` (``--clip-len`` frames at ``--stride``, ``--size`` output) in
one thread, and reports the process's CPU time per clip.

``resize`` reads no header: ``"short_side"`` and ``"pad"`` take the frame's
size from its first decoded frame. ``scale=(128, 160)`` (evaluation: the short
side to 128, as ``"short_side"`` gives here) reads each file's header at its
first read, kept for the last 4,096 files. So each variant runs twice: a new
dataset ("first": headers read, as every clip of a set of more than 4,096
files), then the same dataset again ("again": headers kept). Rounds
interleave the variants in a new order each time; medians reported.

    python -m benchmarks.video_resize --rounds 5
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from parallel_loader.video import IndexCache, VideoDataset

from ._common import add_out_argument, format_table, make_parser, write_report
from ._workloads import REPO

RESIZES = ("stretch", "short_side", "pad")
VARIANTS = (*RESIZES, "scale")  # "scale": scale=(128, 160), the aspect kept by Augment, which reads the header
PASSES = ("first", "again")
WIDTH, HEIGHT, FPS = 426, 240, 25


def make_set(folder: Path, files: int, seconds: float) -> list[Path]:
    """``files`` 426x240 H.264 MP4s of ``seconds``, made once: a gradient that moves, so that frames differ."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"v{k:03d}.mp4" for k in range(files)]
    ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH]
    for k, path in enumerate(paths):
        if path.exists():
            continue
        partial = path.with_suffix(".partial.mp4")
        with av.open(str(partial), "w") as container:
            stream = container.add_stream("libx264", rate=FPS, options={"g": str(FPS), "preset": "veryfast"})
            stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
            stream.time_base = Fraction(1, FPS)
            for i in range(round(seconds * FPS)):
                image = np.empty((HEIGHT, WIDTH, 3), np.uint8)
                image[..., 0] = (xs + 4 * i) % 256
                image[..., 1] = (ys * 2 + 3 * k) % 256
                image[..., 2] = ((xs // 16 + ys // 16 + i) % 2) * 200
                for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        partial.rename(path)
    return paths


def cpu_per_clip(data: VideoDataset) -> float:
    """Milliseconds of this process's CPU per clip, reading every batch of ``data`` once."""
    start = time.process_time()
    clips = 0
    for index in range(len(data)):
        clips += len(data(index)[0])
    return 1000 * (time.process_time() - start) / clips


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = make_parser(__doc__, "python -m benchmarks.video_resize")
    parser.add_argument("--files", type=int, default=48)
    parser.add_argument("--seconds", type=float, default=3.0, help="each video's length")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clip-len", type=int, default=16)
    parser.add_argument("--stride", type=int, default=2)
    parser.add_argument("--size", type=int, nargs=2, default=[112, 112], metavar=("HEIGHT", "WIDTH"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default=str(REPO / "data" / "video_resize"), help="where the videos are kept")
    add_out_argument(parser)
    args = parser.parse_args(argv)
    paths = make_set(Path(args.data), args.files, args.seconds)
    cache = IndexCache(Path(args.data) / "indexes")
    rows = [(str(p), 0) for p in paths]
    options = dict(batch_size=8, clip_len=args.clip_len, stride=args.stride, size=tuple(args.size), train=False)
    options |= dict(classes=["a"], dtype="uint8", index_cache=cache)
    for path in paths:
        cache.get(str(path))  # indexed before the timing
    times: dict[str, list[float]] = {f"{v} {p}": [] for v in VARIANTS for p in PASSES}
    order = random.Random(args.seed)
    for _ in range(args.rounds):
        for variant in order.sample(VARIANTS, len(VARIANTS)):
            short = round(max(args.size) / 0.875)  # the short side crop_fraction's default gives "short_side"
            scale = (short, short + 32)
            kwargs = {"scale": scale} if variant == "scale" else {"resize": variant}
            data = VideoDataset(rows, **kwargs, **options)
            times[f"{variant} first"].append(cpu_per_clip(data))  # a new dataset: any header read
            times[f"{variant} again"].append(cpu_per_clip(data))  # the same again: headers kept
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = medians["stretch again"]
    table = [[v, p, medians[f"{v} {p}"], medians[f"{v} {p}"] / base] for v in VARIANTS for p in PASSES]
    print(format_table(["variant", "pass", "CPU ms per clip", "x stretch"], table))
    return write_report(args, "video_resize", {"ms_per_clip": times, "medians": medians})


if __name__ == "__main__":
    main()
