"""Clips by container family: milliseconds per clip for read_clip, OpenCV and decord2, and a late clip's cost.

One generated video per family (made once with PyAV, kept under ``--data``),
``--seconds`` long at 25 fps, a keyframe every 2 s and two B-frames where the
codec has them: H.264 in MP4, MPEG-TS and AVI, MPEG-2 in PS and TS at 640x360,
VP9 in WebM at 427x240 (Something-Something v2's odd width), HEVC in Matroska.
Every frame shows its own number in three flat blocks along the top (three
base-16 digits) over a moving textured scene, so that every reader's clip is
checked for holding the frames asked for, whatever its scaling.

Readers, each on the same clips (``--clip-len`` frames at ``--stride`` from a
random start, and the late clip: the last frames of the file), scaled to ``--size``:

* ``parallel_loader``: ``read_clip`` (the file's index made before the timing);
* ``from-frame-0``: ``read_clip(seek=False)``, decoding every frame from the first;
* ``opencv``: ``cap.set(CAP_PROP_POS_FRAMES, start)``, then ``read()`` and ``grab()``;
* ``decord2``: ``VideoReader(width=, height=).get_batch``, if installed.

One reader thread, one decoder thread per open file; rounds interleave the
readers in a new order each time; medians reported. ``right`` counts the clips
whose frames show the numbers asked for; ``exact`` the clips of
``parallel_loader`` equal to ``from-frame-0``'s, pixel for pixel. The late
clip's ratio (``parallel_loader`` over ``from-frame-0``, same run) is the
target for the families without an index: at most 0.3 for H.264 TS and MPEG-2 PS.

    python -m benchmarks.video_families --rounds 3
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from parallel_loader.video import IndexCache, read_clip

from ._common import add_out_argument, format_table, make_parser, write_report
from ._workloads import REPO, limit_opencv_threads
from .video_decode import Readers, _scene

__all__ = ["FAMILIES", "main"]

FPS = 25
_GENERATOR_VERSION = 1


@dataclass(frozen=True)
class Family:
    """How one family's video is made."""

    name: str
    codec: str
    file: str
    format: str | None
    width: int = 640
    height: int = 360
    gop: int = 50
    b_frames: int = 2


FAMILIES = {
    f.name: f
    for f in (
        Family("h264-mp4", "libx264", "h264.mp4", None),
        Family("h264-ts", "libx264", "h264.ts", "mpegts"),
        Family("h264-avi", "libx264", "h264.avi", None),
        Family("mpeg2-ps", "mpeg2video", "mpeg2.mpg", "vob", gop=12),
        Family("mpeg2-ts", "mpeg2video", "mpeg2.ts", "mpegts", gop=12),
        Family("vp9-webm-427x240", "libvpx-vp9", "vp9.webm", None, 427, 240, b_frames=0),
        Family("hevc-mkv", "libx265", "hevc.mkv", None),
    )
}
_READERS = ["parallel_loader", "from-frame-0", "opencv", "decord2"]
_DIGITS, _BASE, _STEP, _LOW = 3, 16, 15, 8  # frame numbers as 3 base-16 digits, digit d shown as gray 8 + 15 d


def make_video(root: Path, family: Family, seconds: float) -> Path:
    """The family's video under ``root``, made now if missing or made otherwise."""
    path = root / family.file
    stamp = root / f".{family.file}.json"
    wanted = {"version": _GENERATOR_VERSION, "seconds": seconds, "family": family.name}
    if path.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == wanted:
        return path
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    part = path.with_name("part." + family.file)
    frames = round(seconds * FPS)
    with av.open(str(part), "w", format=family.format) as output:
        stream = output.add_stream(family.codec, rate=FPS)
        stream.width, stream.height, stream.pix_fmt = family.width, family.height, "yuv420p"
        stream.time_base = Fraction(1, FPS)
        stream.gop_size, stream.max_b_frames = family.gop, family.b_frames
        if family.codec == "libx264":
            stream.options = {"preset": "veryfast", "crf": "23", "g": str(family.gop), "bf": str(family.b_frames)}
            stream.options |= {"keyint_min": str(family.gop), "sc_threshold": "0"}
        elif family.codec == "libx265":
            stream.options = {"preset": "ultrafast", "x265-params": f"keyint={family.gop}:bframes={family.b_frames}"}
        elif family.codec == "libvpx-vp9":
            stream.options = {"deadline": "realtime", "cpu-used": "8", "g": str(family.gop)}
            stream.bit_rate = 1_000_000
        else:
            stream.bit_rate = 4_000_000
        rng = np.random.default_rng(0)
        for i, pixels in enumerate(_scene(rng, frames, family.height, family.width)):
            _draw_number(pixels, i)
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, FPS)
            output.mux(stream.encode(frame))
        output.mux(stream.encode())
    part.rename(path)
    stamp.write_text(json.dumps(wanted))
    print(f"made {path} ({frames} frames) in {time.perf_counter() - started:.0f} s", flush=True)
    return path


def _draw_number(pixels: np.ndarray, i: int) -> None:
    height, width = pixels.shape[:2]
    block = width // _DIGITS
    for d in range(_DIGITS):
        digit = i // _BASE ** (_DIGITS - 1 - d) % _BASE
        pixels[: height // 3, d * block : (d + 1) * block] = _LOW + _STEP * digit


def frame_numbers(clip: np.ndarray) -> list[int]:
    """The number each frame of an RGB clip shows (see ``_draw_number``)."""
    _, height, width, _ = clip.shape
    block = width // _DIGITS
    numbers = []
    for frame in clip.astype(np.float32):
        value = 0
        for d in range(_DIGITS):
            # The middle of the block: away from its edges, which scaling blurs into the scene.
            cell = frame[height // 12 : height // 4, d * block + block // 4 : (d + 1) * block - block // 4]
            value = value * _BASE + round((float(cell.mean()) - _LOW) / _STEP)
        numbers.append(value)
    return numbers


def readers_of(args: argparse.Namespace, index: IndexCache) -> dict[str, Callable[[str, int], np.ndarray]]:
    """The readers by name: each ``(path, start) -> uint8 (clip_len, height, width, 3)`` RGB (``video_decode``'s)."""
    peers = Readers(args, index)
    height, width = args.size

    def from_frame_0(path: str, start: int) -> np.ndarray:
        return read_clip(path, start, args.clip_len, args.stride, (height, width), seek=False)

    return {
        "parallel_loader": peers.parallel_loader,
        "from-frame-0": from_frame_0,
        "opencv": peers.opencv_seek,
        "decord2": peers.decord2,
    }


def run_family(args: argparse.Namespace, family: Family, readers: Sequence[str]) -> dict[str, Any]:
    """Time every reader on one family's clips; the report's entry for it."""
    path = str(make_video(Path(args.data), family, args.seconds))
    index = IndexCache(None)
    info = index.get(path)  # made before the timing, as a second epoch finds it
    span = (args.clip_len - 1) * args.stride + 1
    late = info.frames - span
    rng = random.Random(args.seed)
    starts = [rng.randrange(0, late + 1) for _ in range(args.clips)]
    get = readers_of(args, index).__getitem__
    times: dict[str, dict[str, list[float]]] = {r: {"random": [], "late": []} for r in readers}
    right = {r: 0 for r in readers}
    errors: dict[str, str] = {}
    exact = 0
    for round_ in range(args.rounds):
        order = list(readers)
        random.Random(args.seed + round_).shuffle(order)
        clips: dict[str, list[np.ndarray | None]] = {}
        for reader in order:
            got: list[np.ndarray | None] = []
            for kind, start in [("random", s) for s in starts] + [("late", late)]:
                began = time.perf_counter()
                try:
                    clip = get(reader)(path, start)
                except Exception as exc:  # a peer reader failing on a family is a result, not a crash
                    errors[reader] = f"{type(exc).__name__}: {exc}"[:120]
                    got.append(None)
                    continue
                times[reader][kind].append((time.perf_counter() - began) * 1000)
                got.append(clip)
                if round_ == 0 and frame_numbers(clip) == list(range(start, start + span, args.stride)):
                    right[reader] += 1
            clips[reader] = got
        if round_ == 0 and {"parallel_loader", "from-frame-0"} <= set(clips):
            pairs = zip(clips["parallel_loader"], clips["from-frame-0"], strict=True)
            exact = sum(a is not None and b is not None and np.array_equal(a, b) for a, b in pairs)
    results = {}
    for reader in readers:
        random_ms, late_ms = times[reader]["random"], times[reader]["late"]
        results[reader] = {
            "ms_per_clip": statistics.median(random_ms) if random_ms else None,
            "late_ms": statistics.median(late_ms) if late_ms else None,
            "right": right[reader],
            "error": errors.get(reader),
        }
    pl, zero = results.get("parallel_loader", {}), results.get("from-frame-0", {})
    ratio = pl["late_ms"] / zero["late_ms"] if pl.get("late_ms") and zero.get("late_ms") else None
    return {
        "path": path,
        "frames": info.frames,
        "keyframes": len(info.keyframes),
        "seekable": info.seekable,
        "reason": info.reason,
        "clips": args.clips + 1,
        "exact": exact,
        "late_ratio": ratio,
        "results": results,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = make_parser(__doc__, "python -m benchmarks.video_families")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--readers", nargs="+", default=_READERS, choices=_READERS)
    parser.add_argument("--seconds", type=float, default=60.0, help="each video's length")
    parser.add_argument("--clips", type=int, default=8, help="random clips per round, besides the late one")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clip-len", type=int, default=16)
    parser.add_argument("--stride", type=int, default=2)
    parser.add_argument("--size", type=int, nargs=2, default=[112, 112], metavar=("HEIGHT", "WIDTH"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default=str(REPO / "data" / "video_families"), help="where the videos are kept")
    add_out_argument(parser)
    args = parser.parse_args(argv)
    limit_opencv_threads()
    readers = list(args.readers)
    if "decord2" in readers and importlib.util.find_spec("decord") is None:
        print("decord2 is not installed (pip install -e '.[bench]'): left out")
        readers.remove("decord2")
    report = {name: run_family(args, FAMILIES[name], readers) for name in args.families}
    headers = ["family", "seeks", *(f"{r} ms" for r in readers), "late: parallel_loader / from-frame-0"]
    rows = []
    for name, result in report.items():
        cells = []
        for r in readers:
            entry = result["results"][r]
            ms = "error" if entry["ms_per_clip"] is None else f"{entry['ms_per_clip']:.1f}"
            cells.append(f"{ms} ({entry['right']}/{result['clips']} right)")
        late = result["results"].get("parallel_loader", {}).get("late_ms")
        zero = result["results"].get("from-frame-0", {}).get("late_ms")
        ratio = "" if result["late_ratio"] is None else f"{late:.0f} / {zero:.0f} ms = {result['late_ratio']:.2f}x"
        rows.append([name, "yes" if result["seekable"] else "no", *cells, ratio])
    print(format_table(headers, rows))
    for name, result in report.items():
        if result["reason"]:
            print(f"{name}: does not seek: {result['reason']}")
        for reader, entry in result["results"].items():
            if entry["error"]:
                print(f"{name}: {reader} failed: {entry['error']}")
        if "parallel_loader" in result["results"] and "from-frame-0" in result["results"]:
            print(f"{name}: parallel_loader equal to from-frame-0 on {result['exact']}/{result['clips']} clips")
    for name in ("h264-ts", "mpeg2-ps"):
        ratio = report.get(name, {}).get("late_ratio")
        if ratio is not None:
            print(f"target {name} late clip <= 0.3x from frame 0: {'met' if ratio <= 0.3 else 'missed'} ({ratio:.2f}x)")
    return write_report(args, "video_families", {"families": report})


if __name__ == "__main__":
    main()
