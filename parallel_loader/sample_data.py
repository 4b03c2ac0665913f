"""A small synthetic video data set whose classes differ only in motion.

Each video shows one disc on a textured, noisy background, 320x240 at 25 fps,
3 to 6 seconds long. It is encoded as MPEG-4 part 2 (XviD) in AVI, like UCF101.
OpenCV's ``XVID`` writer uses FFmpeg's encoder, so the AVI tag reads ``FMP4``.

The disc's size, colour, start position and exact speed are random. Its class
is how it moves (up, down, sideways, ...). It wraps around the frame edges, so
that it keeps moving. Every disc, still or moving, starts anywhere in the frame
with equal chance. It is drawn with its wrapped copies: a disc on an edge shows
on both sides. So in every class, the disc is equally likely to be anywhere in
any one frame. One frame says nothing of the class, and a model must compare
frames. A pipeline that mixes up labels or frame order cannot learn it. Every
class is its own mirror image, so a horizontal flip keeps labels right.

The tree is ``OUT/train/<class>/<class>_NNN.avi`` and ``OUT/val/<class>/...``,
ready for ``VideoFolder``. Run it as::

    python -m parallel_loader.sample_data OUT --classes 5 --per-class 20

Existing complete videos (every frame decodes) are kept, so running it again
costs only a decode of each. A set made with another seed or generator version
is replaced. ``OUT/.sample_data.json`` records the seed and generator version.
Videos that a new ``--per-class`` or ``--val-fraction`` puts elsewhere are removed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from .video import VideoDecodeError, frame_count

__all__ = ["MOTIONS", "SampleDataSummary", "make_sample_data", "main"]

log = logging.getLogger(__name__)

WIDTH, HEIGHT, FPS = 320, 240, 25
# Bump when the videos' content changes, so that older sets are rewritten, not kept.
GENERATOR_VERSION = 3
_STAMP = ".sample_data.json"
SLOW, FAST = (2.5, 4.0), (7.0, 10.0)  # pixels per frame

# Class name -> (vertical direction, horizontal direction, speed range). A horizontal
# direction of 2 means left or right at random, so the class is its own mirror image.
MOTIONS: dict[str, tuple[int, int, tuple[float, float]]] = {
    "down": (1, 0, SLOW),
    "sideways": (0, 2, SLOW),
    "sideways_fast": (0, 2, FAST),
    "still": (0, 0, (0.0, 0.0)),
    "up": (-1, 0, SLOW),
    "down_fast": (1, 0, FAST),
    "up_fast": (-1, 0, FAST),
}


@dataclass
class SampleDataSummary:
    """What ``make_sample_data`` did: videos written, videos already there, frames written."""

    root: Path
    written: int = 0
    kept: int = 0
    frames: int = 0

    def __str__(self) -> str:
        return (
            f"sample data in {self.root}: {self.written} videos written ({self.frames} frames), "
            f"{self.kept} already there"
        )


def make_sample_data(
    out: str | os.PathLike[str],
    classes: int = 5,
    per_class: int = 20,
    val_fraction: float = 0.2,
    seed: int = 0,
) -> SampleDataSummary:
    """Write the synthetic data set under ``out``, skipping videos that are already complete.

    Args:
        out: the folder to write ``train/`` and ``val/`` into.
        classes: how many classes, the first ones of ``MOTIONS`` (at most ``len(MOTIONS)``).
        per_class: videos per class, training and validation together.
        val_fraction: the share of each class's videos that go to ``val/``. At least
            one goes there when ``per_class > 1`` and ``val_fraction > 0``. At least
            one stays in ``train/``.
        seed: makes the whole data set reproducible.

    Returns:
        A summary of what was written and kept.

    Raises:
        ValueError: an argument is out of range.
        RuntimeError: OpenCV cannot write XviD here, or a written video does not decode back.
    """
    if not 1 <= classes <= len(MOTIONS):
        raise ValueError(f"classes must be between 1 and {len(MOTIONS)}, got {classes}")
    if per_class < 1:
        raise ValueError(f"per_class must be at least 1, got {per_class}")
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    root = Path(out)
    summary = SampleDataSummary(root)
    n_val = min(per_class - 1, max(1 if per_class > 1 and val_fraction > 0 else 0, round(per_class * val_fraction)))
    plan: dict[Path, tuple[str, int, int]] = {}  # path -> (class, label, index)
    for label, name in enumerate(list(MOTIONS)[:classes]):
        for i in range(per_class):
            split = "val" if i >= per_class - n_val else "train"
            plan[root / split / name / f"{name}_{i:03d}.avi"] = (name, label, i)
    _remove_stale(root, set(plan), seed)
    for path, (name, label, i) in plan.items():
        rng = np.random.default_rng([seed, label, i])
        n_frames = int(rng.integers(3 * FPS, 6 * FPS + 1))
        if _complete(path, n_frames):
            summary.kept += 1
            continue
        _write_video(path, name, n_frames, rng)
        summary.written += 1
        summary.frames += n_frames
    (root / _STAMP).write_text(json.dumps({"generator": GENERATOR_VERSION, "seed": seed}) + "\n")
    log.info("%s", summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    """The command line: ``python -m parallel_loader.sample_data OUT [--classes N] [--per-class N]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder to write train/<class>/*.avi and val/<class>/*.avi into")
    parser.add_argument("--classes", type=int, default=5, help=f"number of classes, at most {len(MOTIONS)}")
    parser.add_argument("--per-class", type=int, default=20, help="videos per class, train and val together")
    parser.add_argument("--val-fraction", type=float, default=0.2, help="share of each class kept for val/")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        summary = make_sample_data(args.out, args.classes, args.per_class, args.val_fraction, args.seed)
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(summary)
    return 0


def _remove_stale(root: Path, planned: set[Path], seed: int) -> None:
    """Delete videos this module wrote earlier that the new set does not have in the same place.

    Another ``per_class`` or ``val_fraction`` moves videos between ``train/`` and
    ``val/``; another seed or generator version changes their content. Only files
    named as this module names them, in class folders it writes, are touched.
    """
    stamp = root / _STAMP
    try:
        previous = json.loads(stamp.read_text())
    except (OSError, ValueError):
        previous = None
    same_content = previous == {"generator": GENERATOR_VERSION, "seed": seed}
    if not same_content:
        stamp.unlink(missing_ok=True)  # rewritten only once the new set is complete
    removed = 0
    for split in ("train", "val"):
        for name in MOTIONS:
            for path in (root / split / name).glob(f"{name}_[0-9][0-9][0-9]*.avi"):
                if path not in planned or not same_content:
                    path.unlink()
                    removed += 1
    if removed:
        log.info("removed %d videos of an earlier sample set in %s that this one does not keep", removed, root)


def _complete(path: Path, n_frames: int) -> bool:
    """A video is complete if it exists and all the frames it was written with decode.

    The header is not enough: a file cut short keeps its header's frame count. A
    decode of the whole file costs a few tens of milliseconds at this size.
    """
    if not path.is_file():
        return False
    try:
        return frame_count(path) == n_frames
    except VideoDecodeError:
        return False


def _disc(name: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """Draw a disc of class ``name``: its start ``(x, y)``, velocity ``(dx, dy)`` per frame, and radius.

    The start is uniform over the whole frame for every class. So where the disc
    is in a frame gives no hint of its class: not at the start, and, since it
    wraps, not at any time.
    """
    vertical, horizontal, speeds = MOTIONS[name]
    speed = rng.uniform(*speeds)
    if horizontal == 2:
        horizontal = int(rng.choice([-1, 1]))
    velocity = np.array([horizontal, vertical], dtype=float) * speed
    radius = int(rng.integers(14, 24))
    position = rng.uniform((0, 0), (WIDTH, HEIGHT))
    return position, velocity, radius


def _write_video(path: Path, name: str, n_frames: int, rng: np.random.Generator) -> None:
    """Render and encode one video, to a temporary name first so that a half-written file never looks complete."""
    position, velocity, radius = _disc(name, rng)
    colour = tuple(int(c) for c in rng.integers(160, 256, size=3))  # brighter than any background
    # Smooth texture (a few random blobs, blurred by upscaling) plus a bank of
    # noise frames, cheap to add to every frame.
    texture = cv2.resize(rng.integers(0, 100, size=(6, 8, 3), dtype=np.uint8), (WIDTH, HEIGHT), cv2.INTER_CUBIC)
    noise = rng.integers(0, 20, size=(8, HEIGHT, WIDTH, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.stem + ".part.avi")
    writer = cv2.VideoWriter(str(part), cv2.VideoWriter_fourcc(*"XVID"), FPS, (WIDTH, HEIGHT))
    if not writer.isOpened():
        raise RuntimeError(f"OpenCV cannot write XviD video to {part}; its FFmpeg build lacks an MPEG-4 encoder")
    try:
        for t in range(n_frames):
            frame = cv2.add(texture, noise[t % len(noise)])
            x, y = (position + velocity * t) % (WIDTH, HEIGHT)
            # Draw the wrapped copies too, so the disc slides across an edge instead of jumping.
            for dx in (-WIDTH, 0, WIDTH):
                for dy in (-HEIGHT, 0, HEIGHT):
                    cv2.circle(frame, (int(x + dx), int(y + dy)), radius, colour, -1, cv2.LINE_AA)
            writer.write(frame)
    finally:
        writer.release()
    try:
        decoded = frame_count(part)
    except VideoDecodeError as exc:
        raise RuntimeError(f"the video just written does not decode: {exc}") from exc
    if decoded != n_frames:
        raise RuntimeError(f"{part}: wrote {n_frames} frames but {decoded} decode back")
    os.replace(part, path)


if __name__ == "__main__":
    sys.exit(main())
