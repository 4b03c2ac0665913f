"""Train a small Conv3D network on a video folder, with loader threads decoding the clips.

The loader threads of ``Train`` decode and augment clips (``VideoFolder``) while
this thread runs the compiled TensorFlow step; each epoch ends with a
validation pass. With no data at ``--data``, the synthetic sample set is made
there first (``parallel_loader.sample_data``).

    python examples/train_video.py --data data/sample --threads 2 --epochs 30

Exits with status 1 when something fails, including a final validation accuracy
below ``--min-val-accuracy``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

log = logging.getLogger("train_video")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("data/sample"), help="root holding train/ and val/")
    parser.add_argument("--threads", type=int, default=2, help="loader threads decoding clips")
    parser.add_argument("--max-len", type=int, default=8, help="capacity of the batch queue")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--clip-len", type=int, default=8, help="frames per clip")
    parser.add_argument("--stride", type=int, default=2, help="step between a clip's frames")
    parser.add_argument("--size", type=int, nargs=2, default=(48, 64), metavar=("H", "W"), help="frame size")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate at the start (cosine decay)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-val-accuracy", type=float, default=0.0, help="fail below this final accuracy")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("parallel_loader.train").setLevel(logging.WARNING)  # this script prints more per epoch
    # Imported here, after the argument check, because TensorFlow takes seconds to load.
    import keras
    import numpy as np
    import tensorflow as tf
    from video_model import build_model, make_eval_step, make_train_step

    from parallel_loader import Train
    from parallel_loader.sample_data import make_sample_data
    from parallel_loader.video import VideoFolder

    if not args.data.exists():
        log.info("no data at %s: making the sample data set there", args.data)
        make_sample_data(args.data)  # logs what it wrote
    gpus = tf.config.list_physical_devices("GPU")
    log.info("TensorFlow %s runs the model on %s", tf.__version__, f"GPU {gpus[0].name}" if gpus else "the CPU")

    common = dict(batch_size=args.batch_size, clip_len=args.clip_len, stride=args.stride, size=tuple(args.size))
    train_data = VideoFolder(args.data / "train", train=True, seed=args.seed, **common)
    val_data = VideoFolder(args.data / "val", train=False, classes=train_data.classes, **common)
    log.info(
        "classes %s; %d training and %d validation videos",
        train_data.classes,
        len_samples(train_data),
        len_samples(val_data),
    )

    keras.utils.set_random_seed(args.seed)
    model = build_model(len(train_data.classes), (args.clip_len, *args.size, 3))
    # A cosine decay of the learning rate settles the weights by the last epoch.
    schedule = keras.optimizers.schedules.CosineDecay(args.lr, decay_steps=args.epochs * len(train_data))
    train_step = make_train_step(model, keras.optimizers.Adam(schedule))
    eval_step = make_eval_step(model)

    def on_epoch_end(stats) -> None:
        loss, correct = (float(np.mean([o[0] for o in stats.train.outputs])), sum_int(stats.train.outputs))
        val_loss, val_correct = (sum(float(o[0]) for o in stats.val.outputs), sum_int(stats.val.outputs))
        clips = stats.train.batches * args.batch_size
        n_val = len_samples(val_data)
        print(
            f"epoch {stats.epoch + 1:2d}/{args.epochs}: loss {loss:.3f} acc {correct / clips:.3f} | "
            f"val loss {val_loss / n_val:.3f} val acc {val_correct / n_val:.3f} | "
            f"{clips / stats.train.seconds:.1f} clips/s, waited for data {100 * stats.wait_fraction:.0f}% | "
            f"{stats.train.seconds + stats.val.seconds:.1f} s",
            flush=True,
        )
        history.append(val_correct / n_val)
        # The outputs were kept only for these figures; free them.
        stats.train.outputs.clear()
        stats.val.outputs.clear()

    history: list[float] = []
    trainer = Train(
        lambda batch: train_step(*batch),
        train_data,
        val_data,
        max_nthread=args.threads,
        max_len=args.max_len,
        val_task=lambda batch: eval_step(*batch),
        seed=args.seed,
        keep_outputs=True,
        on_epoch_end=on_epoch_end,
    )
    start = time.perf_counter()
    trainer.run(args.epochs)
    elapsed = time.perf_counter() - start
    final = history[-1]
    print(f"final validation accuracy {final:.3f} after {args.epochs} epochs in {elapsed:.0f} s")
    if final < args.min_val_accuracy:
        print(f"error: validation accuracy {final:.3f} is below --min-val-accuracy {args.min_val_accuracy}")
        return 1
    return 0


def len_samples(data) -> int:
    return len(data.samples)


def sum_int(outputs) -> int:
    return int(sum(int(o[1]) for o in outputs))


if __name__ == "__main__":
    sys.exit(main())
