"""First touch against a warm read on short WebM files: CPU per clip, each round in a fresh process.

Something-Something v2 ships short VP9 WebM files, read one clip per file an
epoch. So most of its reads are first touches. Here ``--videos`` files,
``--seconds`` long at 12 fps and 426x240, are made once with PyAV under
``--data``. VP9 and VP8 come from libvpx in its real-time mode with a
look-ahead, whose alternate reference frames are hidden (VP9: in superframes).
AV1 comes from SVT-AV1, whose hidden frames are shown again later.

Each round runs in a new process, with an empty index cache in memory. It first
reads one clip, untimed, from a file outside the set: imports and FFmpeg's first
codec setup are charged to no pass. The first pass reads one clip from a
random start of every file: every read is a first touch. The warm pass reads a new
random clip of every file, with its index and packet table in memory.
``cpu ms/clip`` is the process's CPU time over a pass per clip. ``ratio`` is the
median over rounds of each round's first-touch CPU over its warm CPU. ``exact`` counts
the clips, of both passes, equal to decoding from the first frame.

    python -m benchmarks.video_first_touch --rounds 5
    python -m benchmarks.video_first_touch --codec vp8 av1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from parallel_loader.video import IndexCache, read_clip

from ._common import add_out_argument, format_table, make_parser, run_job, write_report
from ._workloads import REPO
from .video_decode import _scene

__all__ = ["main"]

FPS = 12
HEIGHT, WIDTH = 240, 426
# codec -> (PyAV encoder, its options). libvpx makes alternate references in one pass only in real time.
_ENCODERS = {
    "vp9": ("libvpx-vp9", {"deadline": "realtime", "cpu-used": "8", "lag-in-frames": "25", "auto-alt-ref": "1"}),
    "vp8": ("libvpx", {"deadline": "realtime", "cpu-used": "8", "lag-in-frames": "25", "auto-alt-ref": "1"}),
    "av1": ("libsvtav1", {"preset": "10"}),
}
_GENERATOR_VERSION = 1


def make_videos(root: Path, codec: str, count: int, seconds: float, gop: int) -> list[Path]:
    """``count`` files of ``codec`` under ``root``, plus one more for the warm-up (the last), made if missing."""
    paths = []
    for k in range(count + 1):
        path = root / f"{codec}_gop{gop}_{k:03d}.webm"
        stamp = path.with_suffix(".json")
        wanted = {"version": _GENERATOR_VERSION, "seconds": seconds, "codec": codec, "gop": gop, "seed": k}
        if not (path.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == wanted):
            _encode(path, codec, round(seconds * FPS), k, gop)
            stamp.write_text(json.dumps(wanted))
        paths.append(path)
    return paths


def _encode(path: Path, codec: str, frames: int, seed: int, gop: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    encoder, options = _ENCODERS[codec]
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        with av.open(str(path), "w") as output:
            stream = output.add_stream(encoder, rate=FPS)
            stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
            stream.time_base, stream.bit_rate, stream.gop_size = Fraction(1, FPS), 400_000, gop
            stream.options = dict(options)
            for i, pixels in enumerate(_scene(np.random.default_rng(seed), frames, HEIGHT, WIDTH)):
                frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
                frame.pts, frame.time_base = i, Fraction(1, FPS)
                output.mux(stream.encode(frame))
            output.mux(stream.encode())
    finally:  # SVT-AV1 run as root leaves the caller SCHED_FIFO: the timed processes would inherit it
        if os.sched_getscheduler(0) != policy:
            os.sched_setscheduler(0, policy, param)


def describe(paths: Sequence[Path]) -> dict[str, int]:
    """Packets, frames decoded, and VP9 superframes (an index in a packet's last bytes) over ``paths``."""
    packets = frames = superframes = 0
    for path in paths:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            for packet in container.demux(stream):
                data = bytes(packet)
                if not data:
                    continue
                packets += 1
                marker, at = data[-1], 2 + (1 + (data[-1] >> 3 & 3)) * (1 + (data[-1] & 7))
                superframes += marker & 0xE0 == 0xC0 and marker & 7 > 0 and len(data) >= at and data[-at] == marker
                frames += len(packet.decode())
            frames += len(stream.codec_context.decode(None))
    return {"packets": packets, "frames": frames, "superframes": superframes}


def run_round(job: dict[str, Any]) -> dict[str, Any]:
    """One round in this (fresh) process: the warm-up, the first pass and the warm pass, timed; then exactness."""
    paths, span = job["paths"], (job["clip_len"] - 1) * job["stride"] + 1
    size = tuple(job["size"])
    rng = random.Random(job["seed"])
    read_clip(job["warm_up"], 0, job["clip_len"], job["stride"], size, index_cache=IndexCache(None))
    cache = IndexCache(None)
    passes: dict[str, float] = {}
    clips: list[tuple[str, int, np.ndarray]] = []
    for name in ("first", "warm"):
        starts = [rng.randrange(job["frames"] - span + 1) for _ in paths]
        started = time.process_time()
        for path, start in zip(paths, starts, strict=True):
            clips.append((path, start, read_clip(path, start, job["clip_len"], job["stride"], size, index_cache=cache)))
        passes[name] = (time.process_time() - started) / len(paths) * 1000
    made_by = sorted({cache.get(path).made_by for path in paths})
    exact = 0
    for path, start, clip in clips:
        truth = read_clip(path, 0, start + span, 1, size, seek=False)[start :: job["stride"]]
        exact += bool(np.array_equal(clip, truth))
    return {**passes, "made_by": made_by, "exact": exact, "clips": len(clips)}


def _in_fresh_process(job: dict[str, Any]) -> dict[str, Any]:
    return run_job("benchmarks.video_first_touch", job, "a round", 600)


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    parser = make_parser(__doc__)
    parser.add_argument("--job", help=argparse.SUPPRESS)  # a round in a fresh process: its job as JSON
    parser.add_argument("--codec", nargs="+", default=["vp9"], choices=list(_ENCODERS))
    parser.add_argument("--videos", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--gop", type=int, default=12, help="at most this many frames from a keyframe to the next")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each in a fresh process; medians reported")
    parser.add_argument("--clip-len", type=int, default=8)
    parser.add_argument("--stride", type=int, default=1)
    parser.add_argument("--size", type=int, nargs=2, default=[112, 112], metavar=("H", "W"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default=str(REPO / "data" / "video_first_touch"), help="where the videos are kept")
    add_out_argument(parser)
    args = parser.parse_args(argv)
    if args.job:
        print(json.dumps(run_round(json.loads(args.job))))
        return None
    rows, results = [], {}
    for codec in args.codec:
        paths = make_videos(Path(args.data), codec, args.videos, args.seconds, args.gop)
        frames = round(args.seconds * FPS)
        job = {"paths": [str(p) for p in paths[:-1]], "warm_up": str(paths[-1]), "frames": frames}
        job |= {"clip_len": args.clip_len, "stride": args.stride, "size": args.size}
        rounds = [_in_fresh_process(job | {"seed": args.seed + r}) for r in range(args.rounds)]
        shape = describe(paths[:-1])
        first = statistics.median(r["first"] for r in rounds)
        warm = statistics.median(r["warm"] for r in rounds)
        ratio = statistics.median(r["first"] / r["warm"] for r in rounds)
        exact = f"{sum(r['exact'] for r in rounds)}/{sum(r['clips'] for r in rounds)}"
        made_by = ",".join(sorted({m for r in rounds for m in r["made_by"]}))
        rows.append([codec, len(paths) - 1, shape["packets"], shape["frames"], shape["superframes"], made_by])
        rows[-1] += [first, warm, f"{ratio:.2f}x", exact]
        results[codec] = {"rounds": rounds, **shape}
    headers = ["codec", "files", "packets", "frames", "superframes", "index by", "first touch cpu ms/clip"]
    headers += ["warm cpu ms/clip", "ratio", "exact"]
    print(format_table(headers, rows))
    return write_report(args, "video_first_touch", {"results": results})


if __name__ == "__main__":
    main()
