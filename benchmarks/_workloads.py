"""The video workloads shared by the sweep and the comparison: sample data, VideoFolder, the example's step.

They follow the video module's contract: ``parallel_loader.video.VideoFolder(root,
batch_size, clip_len, stride=1, size=(H, W), train=True, seed=None, on_error="raise")``
yields ``(clips float32 (B, T, H, W, 3), labels int (B,))``; ``python -m
parallel_loader.sample_data OUT --classes C --per-class K`` writes a sample set;
``examples/video_model.py`` has ``build_model(num_classes, clip_shape)`` and a
train-step factory.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "REPO",
    "add_video_arguments",
    "describe_video",
    "ensure_sample_data",
    "limit_opencv_threads",
    "load_example",
    "make_train_step",
    "open_video_folder",
    "set_tf_threads",
    "time_calls",
]

REPO = Path(__file__).resolve().parent.parent


def add_video_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that choose the clips: data folder, batch size, clip length, frame size."""
    group = parser.add_argument_group("video (decode and train workloads)")
    group.add_argument(
        "--data",
        type=str,
        default=str(REPO / "data" / "sample"),
        help="video root (train/ in it if any); made if missing",
    )
    group.add_argument("--classes", type=int, default=5, help="classes, when the sample set is made")
    group.add_argument("--per-class", type=int, default=20, help="videos per class, when the sample set is made")
    group.add_argument("--batch-size", type=int, default=8)
    group.add_argument("--clip-len", type=int, default=16)
    group.add_argument("--size", type=int, nargs=2, default=[112, 112], metavar=("H", "W"))
    group.add_argument("--seed", type=int, default=0)


def limit_opencv_threads() -> None:
    """One OpenCV thread per calling thread: the loaders give the parallelism, for every peer alike.

    ``VideoFolder`` also opens each capture with one FFmpeg decoder thread
    (``CAP_PROP_N_THREADS = 1``); ``setNumThreads`` covers OpenCV's own functions
    (resize, colour conversion).
    """
    import cv2

    cv2.setNumThreads(1)


def ensure_sample_data(root: Path, classes: int, per_class: int) -> Path:
    """Make the sample video set at ``root`` with ``parallel_loader.sample_data`` unless it is there."""
    if root.is_dir() and any(root.iterdir()):
        return _train_part(root)
    if importlib.util.find_spec("parallel_loader.sample_data") is None:
        raise SystemExit(f"{root} is missing and parallel_loader.sample_data (branch video) is not available")
    root.parent.mkdir(parents=True, exist_ok=True)
    print(f"making the sample video set in {root} ({classes} classes x {per_class} videos)", flush=True)
    command = [sys.executable, "-m", "parallel_loader.sample_data", str(root)]
    command += ["--classes", str(classes), "--per-class", str(per_class)]
    subprocess.run(command, check=True)
    return _train_part(root)


def _train_part(root: Path) -> Path:
    """The sample set's ``train/`` folder (its layout is ``train/<class>`` and ``val/<class>``), else ``root``."""
    return root / "train" if (root / "train").is_dir() else root


def open_video_folder(args: argparse.Namespace, train: bool = True) -> Any:
    """A ``VideoFolder`` over ``args.data`` (made if missing), with OpenCV limited to one thread."""
    try:
        from parallel_loader.video import VideoFolder
    except ImportError as exc:
        raise SystemExit(f"this workload needs parallel_loader.video (branch video): {exc}") from exc
    limit_opencv_threads()
    root = ensure_sample_data(Path(args.data), args.classes, args.per_class)
    return VideoFolder(
        root, args.batch_size, args.clip_len, size=tuple(args.size), train=train, seed=args.seed, on_error="raise"
    )


def describe_video(folder: Any, args: argparse.Namespace) -> str:
    """One line on the clips a workload decodes."""
    return (
        f"{len(folder.samples)} videos in {len(folder.classes)} classes, batches of {args.batch_size} clips x "
        f"{args.clip_len} frames at {args.size[0]}x{args.size[1]}; OpenCV 1 thread, 1 FFmpeg thread per capture"
    )


def time_calls(call: Callable[[int], Any], n: int) -> float:
    """The mean seconds of ``call(i)`` for ``i`` in ``1..n``, after one warm-up call ``call(0)``.

    The mean, not the median: clips differ in cost (a random start means decoding from the
    previous keyframe), and a throughput is one over the mean cost.
    """
    call(0)
    start = time.perf_counter()
    for i in range(1, n + 1):
        call(i)
    return (time.perf_counter() - start) / n


def load_example(name: str = "video_model") -> ModuleType:
    """Import ``examples/<name>.py`` from this repository."""
    path = REPO / "examples" / f"{name}.py"
    if not path.is_file():
        raise SystemExit(f"the benchmarks need {path.relative_to(REPO)}")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def make_train_step(folder: Any, intra_op: int = 0) -> tuple[Callable[[Any], Any], list[str]]:
    """The example's model and tf.function train step, as a callable taking a ``(clips, labels)`` batch.

    The step waits for its loss, so that its time is the step's, not the dispatch's.
    ``intra_op`` sets TensorFlow's intra-op thread pool (0: its default, one per core).
    """
    import keras

    threads_note = set_tf_threads(intra_op, None)
    example = load_example()
    clips, _ = folder(0)
    keras.utils.set_random_seed(0)
    model = example.build_model(len(folder.classes), tuple(clips.shape[1:]))
    step = example.make_train_step(model, keras.optimizers.Adam(3e-3))

    def train_step(batch: Any) -> Any:
        loss, _ = step(*batch)
        return loss.numpy()

    return train_step, [f"example model, {model.count_params():,} weights, Adam; {threads_note}"]


def set_tf_threads(intra_op: int | None, inter_op: int | None) -> str:
    """Size TensorFlow's thread pools (``None``: leave as is; 0: TF's default, one per core); say what holds.

    TensorFlow fixes them when its runtime starts; a process that already ran an
    op (as in the smoke tests, which run several scripts in one process) keeps
    what it had, and the returned line says so.
    """
    import tensorflow as tf

    threading = tf.config.threading
    note = ""
    try:
        if intra_op is not None:
            threading.set_intra_op_parallelism_threads(intra_op)
        if inter_op is not None:
            threading.set_inter_op_parallelism_threads(inter_op)
    except RuntimeError:
        note = " (TF was already initialised: not changed)"
    intra, inter = threading.get_intra_op_parallelism_threads(), threading.get_inter_op_parallelism_threads()
    return f"TF intra/inter-op threads {intra}/{inter} (0: TF default, one per core){note}"
