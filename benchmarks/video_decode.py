"""Random-access clip decoding: parallel_loader's read_clip against the usual ways of reading a clip.

Two generated sets (made once with PyAV, then reused):

* ``ucf``: UCF101-like, 320x240 MPEG-4 part 2 (XviD) in AVI, 25 fps, 4-8 s,
  a keyframe every 12 frames, no B-frames;
* ``kinetics``: Kinetics-like, 340x256 H.264 in MP4, 30 fps, 10 s, a keyframe
  every 2 s, up to 3 B-frames.

The videos show a camera panning over a textured scene, objects moving across
it and a little sensor noise. Each reader decodes the same clips: ``--clip-len``
frames at ``--stride`` from a uniformly random start over the whole video,
``--size`` RGB, from randomly chosen videos. Readers:

* ``parallel_loader``: ``read_clip`` (exact seeking through the per-file index,
  built before the timing and kept on disk next to the set);
* ``opencv-seek``: a typical OpenCV loop, ``cap.set(CAP_PROP_POS_FRAMES, start)``,
  then ``read()`` the kept frames and ``grab()`` the others, resize, BGR to RGB;
* ``grab-from-start``: the previous ``read_clip``: OpenCV grabs every frame from
  the first, then the same conversion;
* ``pyav``: a typical PyAV loop: seek to the start's time, decode, frame numbers
  from timestamps times frame rate, one reformatter per clip scaling to the size;
* ``decord2``: ``VideoReader(width=, height=).get_batch`` (decode-time resize), if installed.

Every reader runs with one decoder thread per open file; ``--threads`` reader
threads share the clips. Rounds are interleaved (each round visits the readers
and thread counts in a new order); medians reported. ``exact`` counts the clips
whose pixels equal what the same library gives decoding every frame in order
from the first (``read_clip(seek=False)`` for parallel_loader, the OpenCV
grab loop for the OpenCV readers, PyAV's and decord's in-order decode for theirs).

    python -m benchmarks.video_decode --rounds 3
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
from av.video.reformatter import VideoReformatter

from parallel_loader.video import IndexCache, read_clip

from ._common import (
    add_noise_arguments,
    add_out_argument,
    format_table,
    machine_info,
    make_parser,
    parse_ints,
    spread,
    write_report,
)
from ._resources import ResourceSampler, wait_for_quiet
from ._workloads import REPO, limit_opencv_threads

__all__ = ["SETS", "main"]


@dataclass(frozen=True)
class VideoSet:
    """How one set's videos are made."""

    name: str
    codec: str
    suffix: str
    width: int
    height: int
    fps: int
    seconds: tuple[float, float]  # shortest and longest
    gop: int
    b_frames: int
    description: str


SETS = {
    "ucf": VideoSet("ucf", "mpeg4", ".avi", 320, 240, 25, (4.0, 8.0), 12, 0, "UCF101-like 320x240 XviD AVI, 4-8 s"),
    "kinetics": VideoSet(
        "kinetics", "libx264", ".mp4", 340, 256, 30, (10.0, 10.0), 60, 3, "Kinetics-like 340x256 H.264 MP4, 10 s"
    ),
}
# Bump when the videos' content or encoding changes, so that older sets are remade.
_GENERATOR_VERSION = 1

Reader = Callable[[str, int], np.ndarray]
_READERS = ["parallel_loader", "opencv-seek", "grab-from-start", "pyav", "decord2"]


def make_set(root: Path, spec: VideoSet, count: int, seed: int, max_seconds: float | None = None) -> list[Path]:
    """The set's ``count`` videos under ``root``; those missing (or made otherwise) are made now.

    ``max_seconds`` shortens every video to at most that (for quick trials).
    """
    if max_seconds is not None:
        spec = replace(spec, seconds=(min(spec.seconds[0], max_seconds), min(spec.seconds[1], max_seconds)))
    stamp = root / ".video_decode.json"
    wanted = {"version": _GENERATOR_VERSION, "set": spec.name, "seed": seed, "seconds": list(spec.seconds)}
    if not stamp.is_file() or json.loads(stamp.read_text()) != wanted:
        for old in root.glob(f"*{spec.suffix}"):
            old.unlink()
    root.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(wanted))
    paths = [root / f"{spec.name}_{k:03d}{spec.suffix}" for k in range(count)]
    missing = [(k, p) for k, p in enumerate(paths) if not p.is_file()]
    if missing:
        print(f"making {len(missing)} {spec.description} videos in {root}", flush=True)
        started = time.perf_counter()
        for k, path in missing:
            _write(path.with_suffix(".part" + spec.suffix), spec, np.random.default_rng([seed, k]))
            path.with_suffix(".part" + spec.suffix).rename(path)
        print(f"  made in {time.perf_counter() - started:.0f} s", flush=True)
    return paths


def _write(path: Path, spec: VideoSet, rng: np.random.Generator) -> None:
    frames = round(rng.uniform(*spec.seconds) * spec.fps)
    with av.open(str(path), "w") as output:
        stream = output.add_stream(spec.codec, rate=spec.fps)
        stream.width, stream.height, stream.pix_fmt = spec.width, spec.height, "yuv420p"
        stream.time_base = Fraction(1, spec.fps)
        if spec.codec == "mpeg4":
            stream.codec_tag = "XVID"
            stream.gop_size, stream.max_b_frames, stream.bit_rate = spec.gop, spec.b_frames, 500_000
        else:
            stream.options = {
                "g": str(spec.gop),
                "keyint_min": str(spec.gop),
                "sc_threshold": "0",
                "bf": str(spec.b_frames),
                "preset": "fast",
                "crf": "23",
            }
        for i, pixels in enumerate(_scene(rng, frames, spec.height, spec.width)):
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, spec.fps)
            output.mux(stream.encode(frame))
        output.mux(stream.encode())


def _scene(rng: np.random.Generator, frames: int, height: int, width: int) -> Iterator[np.ndarray]:
    """A camera panning over a textured scene, a few objects moving across it, a little noise."""
    big_h, big_w = 2 * height, 2 * width
    texture = np.zeros((big_h, big_w, 3), np.float32)
    for cell in (4, 16, 64):
        coarse = rng.random((big_h // cell + 2, big_w // cell + 2, 3), dtype=np.float32)
        texture += cv2.resize(coarse, (big_w, big_h), interpolation=cv2.INTER_CUBIC) * cell
    texture = ((texture - texture.min()) / np.ptp(texture) * 235 + 10).astype(np.uint8)
    phase, speed = rng.uniform(0, 2 * np.pi, 2), rng.uniform(0.01, 0.04, 2)
    objects = [(rng.uniform(0, width), rng.uniform(0, height), *rng.uniform(-4, 4, 2), rng.integers(0, 256, 3))]
    objects += [(rng.uniform(0, width), rng.uniform(0, height), *rng.uniform(-4, 4, 2), rng.integers(0, 256, 3))]
    for i in range(frames):
        top = int((big_h - height) / 2 * (1 + np.sin(phase[0] + speed[0] * i)))
        left = int((big_w - width) / 2 * (1 + np.sin(phase[1] + speed[1] * i)))
        frame = texture[top : top + height, left : left + width].copy()
        for x, y, vx, vy, colour in objects:
            cx, cy = int(x + vx * i) % width, int(y + vy * i) % height
            cv2.circle(frame, (cx, cy), 18, tuple(int(c) for c in colour), -1)
        noise = rng.integers(-2, 3, frame.shape, dtype=np.int16)
        yield np.clip(frame + noise, 0, 255).astype(np.uint8)


class Readers:
    """The readers under test and, for each, its library's in-order reference."""

    def __init__(self, args: argparse.Namespace, index: IndexCache) -> None:
        self.clip_len, self.stride = args.clip_len, args.stride
        self.height, self.width = args.size
        self.index = index
        self.span = (self.clip_len - 1) * self.stride + 1
        self.decord = importlib.util.find_spec("decord") is not None

    def names(self) -> list[str]:
        names = ["parallel_loader", "opencv-seek", "grab-from-start", "pyav"]
        return names + (["decord2"] if self.decord else [])

    def reader(self, name: str) -> Reader:
        return {
            "parallel_loader": self.parallel_loader,
            "opencv-seek": self.opencv_seek,
            "grab-from-start": self.grab_from_start,
            "pyav": self.pyav,
            "decord2": self.decord2,
        }[name]

    def reference(self, name: str) -> Callable[[str, int], np.ndarray]:
        """``(path, last)``: frames 0..last decoded in order by the reader's library, converted as it converts."""
        return {
            "parallel_loader": self._read_clip_in_order,
            "opencv-seek": self._opencv_in_order,
            "grab-from-start": self._opencv_in_order,
            "pyav": self._pyav_in_order,
            "decord2": self._decord_in_order,
        }[name]

    # The readers.

    def parallel_loader(self, path: str, start: int) -> np.ndarray:
        return read_clip(path, start, self.clip_len, self.stride, (self.height, self.width), index_cache=self.index)

    def opencv_seek(self, path: str, start: int) -> np.ndarray:
        capture = _capture(path)
        try:
            capture.set(cv2.CAP_PROP_POS_FRAMES, start)
            return self._opencv_frames(path, capture, 0)
        finally:
            capture.release()

    def grab_from_start(self, path: str, start: int) -> np.ndarray:
        capture = _capture(path)
        try:
            return self._opencv_frames(path, capture, start)
        finally:
            capture.release()

    def pyav(self, path: str, start: int) -> np.ndarray:
        clip = np.empty((self.clip_len, self.height, self.width, 3), np.uint8)
        wanted = {start + k * self.stride: k for k in range(self.clip_len)}
        with av.open(path) as container:
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1
            rate, base = stream.average_rate, stream.time_base
            container.seek(int(start / rate / base), stream=stream, backward=True)
            reformatter, found = VideoReformatter(), 0
            for frame in container.decode(stream):
                i = round(frame.pts * base * rate)  # the frame number its timestamp implies
                if i in wanted:
                    clip[wanted[i]] = self._pyav_rgb(reformatter, frame)
                    found += 1
                if i >= start + self.span - 1:
                    break
        if found < self.clip_len:
            raise RuntimeError(f"{path}: pyav found {found} of {self.clip_len} frames from frame {start}")
        return clip

    def decord2(self, path: str, start: int) -> np.ndarray:
        import decord

        reader = decord.VideoReader(path, width=self.width, height=self.height, num_threads=1)
        return reader.get_batch(list(range(start, start + self.span, self.stride))).asnumpy()

    # Helpers and references.

    def _read_clip_in_order(self, path: str, last: int) -> np.ndarray:
        return read_clip(path, 0, last + 1, size=(self.height, self.width), seek=False)

    def _opencv_frames(self, path: str, capture: cv2.VideoCapture, skip: int) -> np.ndarray:
        """Grab ``skip`` frames, then read the clip's (grabbing those between)."""
        clip = np.empty((self.clip_len, self.height, self.width, 3), np.uint8)
        for _ in range(skip):
            if not capture.grab():
                raise RuntimeError(f"{path}: ends before frame {skip}")
        for k in range(self.clip_len):
            for _ in range(self.stride - 1 if k else 0):
                capture.grab()
            ok, frame = capture.read()
            if not ok:
                raise RuntimeError(f"{path}: ends before the clip does")
            small = cv2.resize(frame, (self.width, self.height), interpolation=cv2.INTER_AREA)
            cv2.cvtColor(small, cv2.COLOR_BGR2RGB, dst=clip[k])
        return clip

    def _opencv_in_order(self, path: str, last: int) -> np.ndarray:
        capture = _capture(path)
        try:
            frames = []
            for _ in range(last + 1):
                ok, frame = capture.read()
                if not ok:
                    break
                small = cv2.resize(frame, (self.width, self.height), interpolation=cv2.INTER_AREA)
                frames.append(cv2.cvtColor(small, cv2.COLOR_BGR2RGB))
            return np.stack(frames)
        finally:
            capture.release()

    def _pyav_rgb(self, reformatter: VideoReformatter, frame: av.VideoFrame) -> np.ndarray:
        return reformatter.reformat(frame, width=self.width, height=self.height, format="rgb24", threads=1).to_ndarray()

    def _pyav_in_order(self, path: str, last: int) -> np.ndarray:
        with av.open(path) as container:
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1
            reformatter = VideoReformatter()
            frames = []
            for frame in container.decode(stream):
                frames.append(self._pyav_rgb(reformatter, frame))
                if len(frames) > last:
                    break
        return np.stack(frames)

    def _decord_in_order(self, path: str, last: int) -> np.ndarray:
        import decord

        reader = decord.VideoReader(path, width=self.width, height=self.height, num_threads=1)
        return np.stack([reader.next().asnumpy() for _ in range(last + 1)])


def _capture(path: str) -> cv2.VideoCapture:
    capture = cv2.VideoCapture(path, cv2.CAP_FFMPEG, [cv2.CAP_PROP_N_THREADS, 1])
    if not capture.isOpened():
        raise RuntimeError(f"{path}: OpenCV cannot open it")
    return capture


def time_reader(reader: Reader, clips: Sequence[tuple[str, int]], threads: int) -> float:
    """Clips per second reading every clip with ``threads`` threads."""
    started = time.perf_counter()
    with ThreadPoolExecutor(threads, thread_name_prefix="video-decode") as pool:
        for _ in pool.map(lambda clip: reader(*clip), clips):
            pass
    return len(clips) / (time.perf_counter() - started)


def count_exact(readers: Readers, names: Sequence[str], clips: Sequence[tuple[str, int]]) -> dict[str, int]:
    """How many clips each reader returns exactly as its library's in-order decode gives them."""
    exact = dict.fromkeys(names, 0)
    by_file: dict[str, list[int]] = {}
    for path, start in clips:
        by_file.setdefault(path, []).append(start)
    for path, starts in by_file.items():
        last = max(starts) + readers.span - 1
        for name in names:
            reference = readers.reference(name)(path, last)
            for start in starts:
                try:
                    clip = readers.reader(name)(path, start)
                except Exception:  # a reader that fails a clip gets no credit for it
                    continue
                wanted = reference[start : start + readers.span : readers.stride]
                exact[name] += int(clip.shape == wanted.shape and np.array_equal(clip, wanted))
    return exact


def run_set(args: argparse.Namespace, spec: VideoSet, count: int, clips_per_round: int) -> dict[str, Any]:
    """Make (or reuse) one set, time every reader on it, count exact clips; print and return the table."""
    paths = [str(p) for p in make_set(Path(args.data) / spec.name, spec, count, args.seed, args.max_seconds)]
    index = IndexCache(Path(args.data) / "index")
    started = time.perf_counter()
    frames = {p: index.get(p).frames for p in paths}
    index_seconds = time.perf_counter() - started
    seekable = sum(index.get(p).seekable for p in paths)
    readers = Readers(args, index)
    names = [n for n in args.readers if n in readers.names()]
    rng = np.random.default_rng([args.seed, len(spec.name)])
    clips = []
    for _ in range(clips_per_round):
        path = paths[int(rng.integers(len(paths)))]
        clips.append((path, int(rng.integers(frames[path] - readers.span + 1))))

    configs = [(name, n) for name in names for n in args.threads]
    rates: dict[tuple[str, int], list[float]] = {c: [] for c in configs}
    others: dict[tuple[str, int], list[float]] = {c: [] for c in configs}
    shuffle = random.Random(args.seed)
    for _ in range(args.rounds):
        order = configs[:]
        shuffle.shuffle(order)
        for name, threads in order:
            wait_for_quiet(args.quiet)
            with ResourceSampler() as resources:
                rates[(name, threads)].append(time_reader(readers.reader(name), clips, threads))
            others[(name, threads)].append(resources.others_percent)
    exact = count_exact(readers, names, clips) if args.exact else {}

    results = {}
    for name in names:
        results[name] = {
            "clips_per_s": {str(n): rates[(name, n)] for n in args.threads},
            "median": {str(n): statistics.median(rates[(name, n)]) for n in args.threads},
            "others_cpu_percent": [x for n in args.threads for x in others[(name, n)]],
            "exact": exact.get(name),
        }
    headers = ["reader", *(f"{n} thread{'s' * (n > 1)} clips/s" for n in args.threads), "exact", "others' CPU %"]
    rows = [
        [
            name,
            *(spread(r["clips_per_s"][str(n)]).fmt(1) for n in args.threads),
            f"{r['exact']}/{len(clips)}" if r["exact"] is not None else "not checked",
            spread(r["others_cpu_percent"]).fmt(0),
        ]
        for name, r in results.items()
    ]
    print(
        f"\n{spec.description}: {len(paths)} videos, {clips_per_round} clips of {args.clip_len} frames at stride "
        f"{args.stride}, {args.size[0]}x{args.size[1]} RGB, {args.rounds} interleaved rounds; clips/s median (min-max)"
    )
    print(
        f"index: {index_seconds:.1f} s for {len(paths)} videos (made once, then read from disk); "
        f"{seekable} of them seekable"
    )
    print(format_table(headers, rows))
    targets = _targets(spec, results, args.threads, len(clips))
    for line in targets:
        print(line)
    return {
        "set": spec.description,
        "videos": len(paths),
        "clips": len(clips),
        "index_seconds": index_seconds,
        "seekable": seekable,
        "results": results,
        "targets": targets,
    }


def _targets(spec: VideoSet, results: dict[str, dict[str, Any]], threads: Sequence[int], clips: int) -> list[str]:
    ours = results.get("parallel_loader")
    if ours is None:
        return []
    lines = []
    for n in map(str, threads):
        peers = {k: r["median"][n] for k, r in results.items() if k not in ("parallel_loader", "grab-from-start")}
        if peers:
            best = max(peers, key=peers.get)
            ratio = ours["median"][n] / peers[best]
            verdict = "met" if ratio >= 1 else "MISSED"
            lines.append(f"target >= fastest other reader at {n} thread(s): {verdict} ({ratio:.2f}x {best})")
        grab = results.get("grab-from-start")
        if spec.name == "kinetics" and grab:
            ratio = ours["median"][n] / grab["median"][n]
            verdict = "met" if ratio >= 2 else "MISSED"
            lines.append(f"target >= 2x grab-from-start at {n} thread(s): {verdict} ({ratio:.2f}x)")
    if ours["exact"] is not None:
        verdict = "met" if ours["exact"] == clips else "MISSED"
        lines.append(f"target every clip exact: {verdict} ({ours['exact']}/{clips})")
    return lines


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark on each set, print its tables and return the results."""
    parser = make_parser(__doc__)
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    parser.add_argument("--readers", nargs="+", default=list(_READERS), choices=list(_READERS))
    parser.add_argument("--threads", type=parse_ints, default=[1, 2], help="reader thread counts, e.g. 1,2")
    parser.add_argument("--ucf-videos", type=int, default=60, help="videos in the UCF101-like set")
    parser.add_argument("--kinetics-videos", type=int, default=30, help="videos in the Kinetics-like set")
    parser.add_argument("--ucf-clips", type=int, default=150, help="clips per round on the UCF101-like set")
    parser.add_argument("--kinetics-clips", type=int, default=50, help="clips per round on the Kinetics-like set")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians reported")
    parser.add_argument("--clip-len", type=int, default=16)
    parser.add_argument("--stride", type=int, default=2)
    parser.add_argument("--size", type=int, nargs=2, default=[112, 112], metavar=("H", "W"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=None, help="make the videos at most this long (trials)")
    parser.add_argument("--no-exact", dest="exact", action="store_false", help="skip counting exact clips")
    parser.add_argument("--data", type=str, default=str(REPO / "data" / "video_decode"), help="where the sets are")
    add_out_argument(parser)
    add_noise_arguments(parser)
    args = parser.parse_args(argv)
    limit_opencv_threads()
    if importlib.util.find_spec("decord") is None:
        print("decord2 is not installed (pip install decord2): its reader was skipped")

    sets = {}
    for name in args.sets:
        if name == "ucf":
            sets[name] = run_set(args, SETS[name], args.ucf_videos, args.ucf_clips)
        else:
            sets[name] = run_set(args, SETS[name], args.kinetics_videos, args.kinetics_clips)
    return write_report(args, "video_decode", {"sets": sets}, machine=machine_info() | _versions())


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for dist in ("av", "decord2"):
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = "not installed"
    return found


if __name__ == "__main__":
    main()
