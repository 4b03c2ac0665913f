"""Train a small Conv3D network on a video folder, with loader threads decoding the clips.

The loader threads of ``Train`` decode and augment clips (``VideoFolder``) while
this thread runs the compiled TensorFlow step; each epoch ends with a
validation pass. Training ends with a multi-view evaluation, as papers report
it: each validation video seen as ``--eval-clips`` clips spread over it times
``--eval-crops`` crops, scored per clip and per video (the views' mean softmax).
With no data at ``--data``, the synthetic sample set is made there first
(``parallel_loader.sample_data``).

    python examples/train_video.py --data data/sample --threads 2 --epochs 30

With ``--checkpoint-dir DIR`` the model, the optimizer and the loaders' position are
saved together every ``--checkpoint-every`` steps, at the end, and on Ctrl-C; the
same command run again resumes from the latest checkpoint, mid-epoch: the batches
not yet trained on, then the remaining epochs (``examples/checkpointing.py``).

Exits with status 1 when something fails, including a final validation accuracy
below ``--min-val-accuracy``. TensorFlow's start-up lines are hidden unless ``--verbose``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from example_options import add_output_arguments

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
    parser.add_argument(
        "--seek",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="seek to the keyframe before each clip (exact; the default) or, with --no-seek, decode from frame 0",
    )
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate at the start (cosine decay)")
    parser.add_argument("--eval-clips", type=int, default=3, help="clips per video in the final evaluation")
    parser.add_argument(
        "--eval-crops", type=int, default=3, choices=(1, 3), help="crops per clip in the final evaluation"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-val-accuracy", type=float, default=0.0, help="fail below this final accuracy")
    add_output_arguments(parser)
    parser.add_argument(
        "--prefetch-to-device", metavar="DEVICE", help="copy batches to this device (e.g. /GPU:0) ahead of the step"
    )
    parser.add_argument("--report", type=Path, help="write the per-epoch figures here as JSON")
    parser.add_argument(
        "--checkpoint-dir", type=Path, help="save model, optimizer and loader state here, and resume from it"
    )
    parser.add_argument("--checkpoint-every", type=int, default=100, help="training steps between checkpoints")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("absl").setLevel(logging.WARNING)  # TensorFlow's checkpoint writer logs each save
    # Imported here, after the argument check, because TensorFlow takes seconds to load.
    from parallel_loader.tf_startup import device_line, import_tensorflow

    import_tensorflow(args.verbose)
    import keras
    import numpy as np
    from video_model import build_model, make_eval_step, make_multiview_eval_step, make_train_step

    from parallel_loader import DataLoader, EpochStats, Train
    from parallel_loader.sample_data import make_sample_data
    from parallel_loader.video import VideoDecodeError, VideoFolder

    if not args.data.exists():
        log.info("no data at %s: making the sample data set there", args.data)
        make_sample_data(args.data)  # logs what it wrote
    log.info("%s", device_line())

    common = dict(
        batch_size=args.batch_size, clip_len=args.clip_len, stride=args.stride, size=tuple(args.size), seek=args.seek
    )
    try:
        train_data = VideoFolder(args.data / "train", train=True, seed=args.seed, **common)
        val_data = VideoFolder(args.data / "val", train=False, classes=train_data.classes, **common)
        views_data = VideoFolder(
            args.data / "val",
            train=False,
            classes=train_data.classes,
            num_clips=args.eval_clips,
            num_crops=args.eval_crops,
            **common,
        )
    except (OSError, ValueError, VideoDecodeError) as exc:
        print(f"error: {exc} (expected {args.data}/train/<class>/* and {args.data}/val/<class>/*)", file=sys.stderr)
        return 1
    log.info(
        "classes %s; %d training and %d validation videos",
        train_data.classes,
        len(train_data.samples),
        len(val_data.samples),
    )

    keras.utils.set_random_seed(args.seed)
    model = build_model(len(train_data.classes), (args.clip_len, *args.size, 3))
    # A cosine decay of the learning rate settles the weights by the last epoch.
    schedule = keras.optimizers.schedules.CosineDecay(args.lr, decay_steps=args.epochs * len(train_data))
    optimizer = keras.optimizers.Adam(schedule)
    train_step = make_train_step(model, optimizer)
    eval_step = make_eval_step(model)

    val_accuracy: list[float] = []
    epochs: list[dict[str, float]] = []

    def on_epoch_end(stats: EpochStats) -> None:
        # The steps returned tensors; reading them once per epoch keeps the loop from waiting on each step.
        loss = float(np.mean([float(loss) for loss, _ in stats.train.outputs]))
        correct = sum(int(c) for _, c in stats.train.outputs)
        val_loss = sum(float(loss) for loss, _ in stats.val.outputs) / len(val_data.samples)
        val_accuracy.append(sum(int(c) for _, c in stats.val.outputs) / len(val_data.samples))
        clips = stats.train.batches * args.batch_size  # training batches are always full
        # Train has shown the epoch's speed and input-bound share (stderr); the model's figures follow.
        print(
            f"  loss {loss:.3f} acc {correct / clips:.3f} | "
            f"val loss {val_loss:.3f} val acc {val_accuracy[-1]:.3f} | {clips / stats.train.seconds:.1f} clips/s",
            flush=True,
        )
        epochs.append(
            {"batches": stats.train.batches, "seconds": stats.train.seconds, "wait_fraction": stats.wait_fraction}
        )
        stats.train.outputs.clear()  # kept only for these figures
        stats.val.outputs.clear()

    checkpoint = None
    if args.checkpoint_dir is not None:
        from checkpointing import TrainingCheckpoint

        optimizer.build(model.trainable_variables)  # its slots exist now, so a restore fills them at once
        checkpoint = TrainingCheckpoint(args.checkpoint_dir, model=model, optimizer=optimizer)
    steps = 0

    def train_task(batch: tuple[np.ndarray, np.ndarray]) -> tuple[object, object]:
        nonlocal steps
        outputs = train_step(*batch)
        steps += 1
        if checkpoint is not None and steps % args.checkpoint_every == 0:
            checkpoint.save(trainer)
        return outputs

    trainer = Train(
        train_task,
        train_data,
        val_data,
        num_threads=args.threads,
        max_len=args.max_len,
        val_task=lambda batch: eval_step(*batch),
        seed=args.seed,
        ordered=True,  # batches in the seeded order, so runs repeat (up to TensorFlow's own float noise)
        keep_outputs=True,
        on_epoch_end=on_epoch_end,
        prefetch_to_device=args.prefetch_to_device,
    )
    if checkpoint is not None and (restored := checkpoint.restore(trainer)) is not None:
        done = trainer.state_dict()["train"]["done"]
        print(
            f"resumed from {restored}: {len(trainer.history)} epochs done, "
            f"{sum(stop - start for start, stop in done)} batches of the next one",
            flush=True,
        )
    start = time.perf_counter()
    remaining = args.epochs - len(trainer.history)
    try:
        if remaining > 0:
            trainer.run(remaining, progress=args.progress)
    except KeyboardInterrupt:
        if checkpoint is None:
            raise
        print(f"interrupted: saved {checkpoint.save(trainer)}; run the same command to resume", flush=True)
        return 130
    if checkpoint is not None:
        checkpoint.save(trainer)
    elapsed = time.perf_counter() - start
    if not val_accuracy:  # every epoch was done before this run: measure it once
        correct = 0
        with DataLoader(val_data, num_threads=args.threads, max_len=args.max_len) as loader:
            for batch in loader:
                correct += int(eval_step(*batch)[1])
        val_accuracy.append(correct / len(val_data.samples))
    print(f"final validation accuracy {val_accuracy[-1]:.3f} after {args.epochs} epochs in {elapsed:.0f} s")

    # Multi-view evaluation: the loader's threads decode the views while this thread scores them.
    multiview_step = make_multiview_eval_step(model)
    start = time.perf_counter()
    clip_correct = video_correct = 0
    with DataLoader(views_data, num_threads=args.threads, max_len=args.max_len) as loader:
        for clips, labels in loader:
            views_right, videos_right = multiview_step(clips, labels)
            clip_correct += int(views_right)
            video_correct += int(videos_right)
    videos = len(views_data.samples)
    print(
        f"multi-view evaluation, {args.eval_clips} clips x {args.eval_crops} crops per video: "
        f"clip accuracy {clip_correct / (videos * views_data.views):.3f}, "
        f"video accuracy {video_correct / videos:.3f} ({time.perf_counter() - start:.1f} s)"
    )
    if args.report is not None:
        report = {"epochs": epochs, "val_accuracy": val_accuracy, "prefetch_to_device": args.prefetch_to_device}
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    if val_accuracy[-1] < args.min_val_accuracy:
        print(f"error: validation accuracy is below --min-val-accuracy {args.min_val_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
