"""A Kinetics-style recipe: 16-frame clips at 8 fps, scale jitter, crop, flip, mixup, 3x3 views per video.

Training clips are 16 frames at 8 frames a second, found by timestamps: the
first and last are (16 - 1) / 8 = 1.875 s apart, whatever each file's frame
rate (25, 30, 60 or variable). Each clip's frames
are scaled to a random short side in ``--scale``, cut to a random ``--crop``
square and flipped at random. Batches are mixed by ``Mixup`` over one-hot,
smoothed labels. Evaluation sees each validation video as 3 clips spread over
it times 3 crops across the frame. It averages the 9 views' softmax per video,
found by the sample index each batch carries. Every random choice comes from
``--seed``, so the batches are the same whatever ``--threads`` is.

    python examples/kinetics_recipe.py --data data/sample --epochs 10

With no data at ``--data``, the synthetic sample set is made there first.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np

from parallel_loader import DataLoader
from parallel_loader.sample_data import make_sample_data
from parallel_loader.video import Augment, Mixup, VideoFolder

log = logging.getLogger("kinetics_recipe")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("data/sample"), help="root holding train/ and val/")
    parser.add_argument("--threads", type=int, default=2, help="loader threads decoding clips")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--clip-len", type=int, default=16, help="frames per clip")
    parser.add_argument("--fps", type=float, default=8.0, help="frames a second a clip is sampled at")
    parser.add_argument("--scale", type=int, nargs=2, default=(128, 160), metavar=("MIN", "MAX"), help="short side")
    parser.add_argument("--crop", type=int, default=112, help="the square cut from the scaled frames")
    parser.add_argument("--mixup", type=float, default=0.8, help="Mixup's alpha")
    parser.add_argument("--label-smoothing", type=float, default=0.1)
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam's learning rate")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def datasets(args: argparse.Namespace) -> tuple[VideoFolder, VideoFolder]:
    """Return the training set (augmented, mixed) and the evaluation set (3 x 3 views, with sample indices)."""
    # --clip-len frames at --fps: the frames played at t0, t0 + 1/fps, ... by each file's timestamps.
    fps = args.fps
    augment = Augment(scale=tuple(args.scale))  # a random crop of --crop, flipped with probability 1/2
    clips = dict(batch_size=args.batch_size, clip_len=args.clip_len, fps=fps, size=(args.crop, args.crop))
    train = VideoFolder(
        args.data / "train",
        seed=args.seed,
        augment=augment,
        batch_transform=Mixup(args.mixup),
        labels="one_hot",
        label_smoothing=args.label_smoothing,
        **clips,
    )
    # Evaluation scales the short side to --scale's min and takes 3 crops along the long side.
    evaluation = VideoFolder(
        args.data / "val",
        train=False,
        classes=train.classes,
        augment=augment,
        num_clips=3,
        num_crops=3,
        return_index=True,
        **clips,
    )
    return train, evaluation


def evaluate(
    predict: Callable[[np.ndarray], np.ndarray], evaluation: VideoFolder, threads: int
) -> tuple[float, dict[int, np.ndarray]]:
    """Return the accuracy per video and each video's mean softmax over its views, keyed by sample index."""
    scores: dict[int, np.ndarray] = {}
    correct = 0
    with DataLoader(evaluation, num_threads=threads, name="eval") as loader:
        for clips, labels, indices in loader:
            batch, views = clips.shape[:2]
            logits = np.asarray(predict(clips.reshape(batch * views, *clips.shape[2:])))
            softmax = np.exp(logits - logits.max(axis=-1, keepdims=True))
            softmax /= softmax.sum(axis=-1, keepdims=True)
            per_video = softmax.reshape(batch, views, -1).mean(axis=1)
            for index, label, score in zip(indices, labels, per_video, strict=True):
                scores[int(index)] = score
                correct += int(np.argmax(score) == label)
    return correct / len(scores), scores


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.data.exists():
        make_sample_data(args.data)
    train, evaluation = datasets(args)
    # TensorFlow takes seconds to load: imported once the data are known to be there.
    from parallel_loader.tensorflow import import_tensorflow

    import_tensorflow()
    import keras
    from video_model import build_model

    keras.utils.set_random_seed(args.seed)
    model = build_model(len(train.classes), (args.clip_len, args.crop, args.crop, 3))
    model.compile(keras.optimizers.Adam(args.lr), keras.losses.CategoricalCrossentropy(from_logits=True))
    losses = []
    # ordered: the batches in the same order as well, so that a run repeats whatever --threads is.
    with DataLoader(train, num_threads=args.threads, seed=args.seed, ordered=True, name="train") as loader:
        for epoch in range(args.epochs):
            epoch_losses = [float(model.train_on_batch(clips, labels)) for clips, labels in loader]
            losses.append(float(np.mean(epoch_losses)))
            log.info("epoch %d: loss %.3f over %d batches", epoch, losses[-1], len(epoch_losses))
    accuracy, scores = evaluate(model.predict_on_batch, evaluation, args.threads)
    print(f"{len(scores)} videos, 9 views each: video accuracy {accuracy:.3f}")
    return {"accuracy": accuracy, "videos": len(scores), "first_loss": losses[0], "last_loss": losses[-1]}


if __name__ == "__main__":
    main()
