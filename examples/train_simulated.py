"""Train a small TensorFlow model from a deliberately slow loader, threaded and not.

The loader stands in for video decoding: each batch costs ``--load-ms`` of waiting
(as a read from remote storage would) plus a little numpy work. The training step
is a real ``tf.function`` on the GPU when TensorFlow sees one, else the CPU.
With N loader threads, an epoch takes about max(T_load / N, T_step) per batch
instead of T_load + T_step.

    python examples/train_simulated.py --threads 4 --epochs 3

TensorFlow's start-up lines are hidden unless ``--verbose``.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

import numpy as np
from example_options import add_output_arguments

from parallel_loader import Train, YieldFunction
from parallel_loader.tf_startup import device_line, import_tensorflow

FEATURES = 256


class SlowBatches(YieldFunction):
    """Random batches whose label is whether the features sum to more than zero."""

    def __init__(self, batches: int, batch_size: int, load_seconds: float, seed: int) -> None:
        self.batches = batches
        self.batch_size = batch_size
        self.load_seconds = load_seconds
        self.seed = seed

    def __len__(self) -> int:
        return self.batches

    def __call__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        time.sleep(self.load_seconds)  # I/O or decoding, which releases the GIL
        rng = np.random.default_rng([self.seed, index])
        x = rng.standard_normal((self.batch_size, FEATURES), dtype=np.float32)
        y = (x.sum(axis=1) > 0).astype(np.float32)[:, None]
        return x, y


def make_steps(model: Any, optimizer: Any):
    import tensorflow as tf

    loss_fn = tf.keras.losses.BinaryCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables, strict=True)
        )
        return loss

    @tf.function
    def eval_step(x, y):
        logits = model(x, training=False)
        return tf.reduce_mean(tf.cast(tf.equal(tf.cast(logits > 0, tf.float32), y), tf.float32))

    return train_step, eval_step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=4, help="loader threads (default 4)")
    parser.add_argument("--max-len", type=int, default=8, help="queue length (default 8)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=60, help="training batches per epoch")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--load-ms", type=float, default=40.0, help="simulated load time per batch")
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")

    tf = import_tensorflow(args.verbose)
    print(device_line())
    model = tf.keras.Sequential(
        [tf.keras.Input((FEATURES,)), tf.keras.layers.Dense(256, activation="relu"), tf.keras.layers.Dense(1)]
    )
    train_step, eval_step = make_steps(model, tf.keras.optimizers.Adam(1e-3))
    load = args.load_ms / 1000
    train_data = SlowBatches(args.batches, args.batch_size, load, seed=0)
    val_data = SlowBatches(max(1, args.batches // 4), args.batch_size, load, seed=1)

    def step(batch):
        # Numbers in a dict are averaged over the epoch and shown by Train, as Keras shows its metrics.
        return {"loss": float(train_step(*batch))}

    step(train_data(0))  # trace the tf.function once, outside the timings
    # Serial baseline, the loop the loader replaces: load, then step.
    start = time.perf_counter()
    for i in range(args.batches):
        step(train_data(i))
    serial = args.batches / (time.perf_counter() - start)
    print(f"serial (load, then step): {serial:.1f} batches/s")

    trainer = Train(
        step,
        train_data,
        val_yield=val_data,
        val_task=lambda batch: {"accuracy": float(eval_step(*batch))},
        num_threads=args.threads,
        max_len=args.max_len,
        seed=0,
    )
    history = trainer.run(args.epochs, progress=args.progress)
    threaded = history[-1].train.batches_per_second
    print(f"{args.threads} loader threads: {threaded:.1f} batches/s, {threaded / serial:.1f}x the serial loop")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
