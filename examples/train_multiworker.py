"""One worker of multi-worker training: the video model with MultiWorkerMirroredStrategy.

Every worker runs this script with its own ``TF_CONFIG`` (the cluster's
addresses and its own index); ``examples/launch_multiworker.py`` starts them on
one machine. The input pipeline is ``strategy.distribute_datasets_from_function``
over ``as_tf_dataset``: each worker's loader threads decode only its shard of
every epoch (``input_context``: shard ``input_pipeline_id`` of
``num_input_pipelines``), batches of the per-replica size. All workers shuffle
with the same seed, so the shards cut one global order; they are disjoint and
equally long, so every worker runs the same number of steps. Gradients are
summed across workers each step, so the weights stay the same on every worker.

    export TF_CONFIG='{"cluster": {"worker": ["127.0.0.1:20000", "127.0.0.1:20001"]},
                       "task": {"type": "worker", "index": 0}}'
    python examples/train_multiworker.py --data data/sample --report out/worker0.json

Each epoch ends with the worker's progress line on stderr (a bar on a terminal;
``--no-progress`` for none): its steps, their rate, and how much of the time it
waited for input. After training, each worker evaluates the whole validation
set, prints its accuracy, and with ``--report`` writes a JSON report (the
batches it read in each epoch, the clips, the accuracy) and its final weights
(``.npz`` next to it). TensorFlow's start-up lines are hidden unless ``--verbose``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections import defaultdict
from contextlib import closing
from pathlib import Path
from typing import Any

from example_options import add_output_arguments

log = logging.getLogger("train_multiworker")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("data/sample"), help="root holding train/ and val/")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=8, help="global batch size, split among the replicas")
    parser.add_argument("--clip-len", type=int, default=8, help="frames per clip")
    parser.add_argument("--stride", type=int, default=2, help="step between a clip's frames")
    parser.add_argument("--size", type=int, nargs=2, default=(48, 64), metavar=("H", "W"), help="frame size")
    parser.add_argument("--threads", type=int, default=1, help="loader threads per worker")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate at the start (cosine decay)")
    parser.add_argument("--seed", type=int, default=0, help="the same on every worker: one global order per epoch")
    parser.add_argument("--intra-op", type=int, default=0, help="TF intra-op threads per worker (0: TF default)")
    parser.add_argument("--report", type=Path, help="write this worker's report (JSON) here, its weights next to it")
    add_output_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Imported here, after the argument check, because TensorFlow takes seconds to load.
    from parallel_loader.tf_startup import device_line, import_tensorflow

    tf = import_tensorflow(args.verbose)
    import keras
    import numpy as np
    from video_model import build_model, make_eval_step

    from parallel_loader import DataLoader, PassStats, YieldFunction, as_tf_dataset
    from parallel_loader.sharding import shard_length
    from parallel_loader.train import PassProgress, progress_mode
    from parallel_loader.video import VideoFolder

    if args.intra_op:
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op)
    # Reads TF_CONFIG; must come before any other TensorFlow op.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    worker = strategy.cluster_resolver.task_id
    workers = strategy.cluster_resolver.cluster_spec().num_tasks("worker")
    replicas = strategy.num_replicas_in_sync
    if args.batch_size % replicas:
        print(f"error: --batch-size {args.batch_size} is not a multiple of the {replicas} replicas", file=sys.stderr)
        return 1
    common = dict(clip_len=args.clip_len, stride=args.stride, size=tuple(args.size))
    train_probe = VideoFolder(args.data / "train", batch_size=args.batch_size // replicas, seed=args.seed, **common)
    classes = train_probe.classes
    clip_shape = (args.clip_len, *args.size, 3)

    class Recorded(YieldFunction):
        """A VideoFolder that records which batches this worker read in each epoch."""

        def __init__(self, folder: VideoFolder) -> None:
            self.folder = folder
            self.read: dict[int, list[int]] = defaultdict(list)
            self._epoch = 0
            self._lock = threading.Lock()  # loader threads append at once

        def __len__(self) -> int:
            return len(self.folder)

        def __call__(self, index: int) -> Any:
            batch = self.folder(index)
            with self._lock:
                self.read[self._epoch].append(index)
            return batch

        def on_epoch_begin(self, epoch: int) -> None:
            self._epoch = epoch
            self.folder.on_epoch_begin(epoch)

    pipelines: list[Recorded] = []
    # Given, not inferred: inferring would decode (and record) a batch outside any epoch.
    signature = (tf.TensorSpec((None, *clip_shape), tf.float32), tf.TensorSpec((None,), tf.int64))

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        per_replica = context.get_per_replica_batch_size(args.batch_size)
        folder = VideoFolder(args.data / "train", batch_size=per_replica, seed=args.seed, **common)
        pipelines.append(Recorded(folder))
        # shuffle with the same seed everywhere: one global order per epoch, cut into shards
        return as_tf_dataset(
            pipelines[-1], signature, num_threads=args.threads, shuffle=True, seed=args.seed, ordered=True,
            input_context=context, name=f"worker{worker}-loader",
        )  # fmt: skip

    dataset = strategy.distribute_datasets_from_function(dataset_fn)
    # Each worker's shard, handed out to its replicas a batch each per step.
    steps_per_epoch = shard_length(len(train_probe), workers, "pad", replicas // workers) // (replicas // workers)

    keras.utils.set_random_seed(args.seed)
    with strategy.scope():
        model = build_model(len(classes), clip_shape)
        schedule = keras.optimizers.schedules.CosineDecay(args.lr, decay_steps=args.epochs * steps_per_epoch)
        optimizer = keras.optimizers.Adam(schedule)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    @tf.function
    def train_step(batch: Any) -> tuple[tf.Tensor, tf.Tensor]:
        def replica_step(clips: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            with tf.GradientTape() as tape:
                logits = model(clips, training=True)
                loss = tf.nn.compute_average_loss(loss_fn(labels, logits), global_batch_size=args.batch_size)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))  # summed over replicas
            correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, -1), labels), tf.int64))
            return loss, correct

        loss, correct = strategy.run(replica_step, args=batch)
        return strategy.reduce("SUM", loss, axis=None), strategy.reduce("SUM", correct, axis=None)

    eval_step = make_eval_step(model)
    val_data = VideoFolder(args.data / "val", batch_size=args.batch_size, train=False, classes=classes, **common)

    def evaluate() -> float:
        correct = 0
        with DataLoader(val_data, num_threads=args.threads, name=f"worker{worker}-val") as loader:
            for clips, labels in loader:
                correct += int(eval_step(clips, labels)[1])
        return correct / len(val_data.samples)

    print(f"worker {worker}: {device_line()}", flush=True)
    print(
        f"worker {worker}: {replicas} replicas in {workers} workers; {len(train_probe)} training batches "
        f"per epoch, {steps_per_epoch} steps per worker",
        flush=True,
    )
    mode = progress_mode(args.progress)
    start = time.perf_counter()
    for epoch in range(args.epochs):
        losses, correct, steps, waited = [], 0, 0, 0.0
        description = f"worker {worker} epoch {epoch + 1}/{args.epochs}"
        # Closed on an error as it stands; finish() writes the epoch's speed and input-bound share.
        with closing(PassProgress(description, mode, total=steps_per_epoch)) as display:
            began = ready = time.perf_counter()
            for batch in dataset:  # one loader epoch: this worker's shard
                waited += time.perf_counter() - ready  # waiting for this batch
                loss, right = train_step(batch)
                losses.append(loss)
                correct += right
                steps += 1
                display.update(waited)  # no metrics: reading the tensors would wait for each step
                ready = time.perf_counter()
            waited += time.perf_counter() - ready  # waiting for the end of the epoch
            display.finish(PassStats(batches=steps, seconds=time.perf_counter() - began, wait_seconds=waited))
        accuracy = int(correct) / (steps * args.batch_size)
        print(
            f"worker {worker} epoch {epoch + 1:2d}/{args.epochs}: {steps} steps, loss {float(np.mean(losses)):.3f}, "
            f"train acc {accuracy:.3f}, read batches {sorted(pipelines[0].read[epoch])}",
            flush=True,
        )
    val_accuracy = evaluate()
    elapsed = time.perf_counter() - start
    (recorded,) = pipelines  # one input pipeline per worker
    clips = sum(len(indices) for indices in recorded.read.values()) * (args.batch_size // replicas)
    print(f"worker {worker}: read {clips} clips; final validation accuracy {val_accuracy:.3f} in {elapsed:.0f} s")
    if args.report is not None:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        weights = args.report.with_suffix(".npz")
        np.savez(weights, *model.get_weights())
        report = {
            "worker": worker,
            "workers": workers,
            "batches_per_epoch": len(train_probe),
            "clips_per_batch": args.batch_size // replicas,
            "read": {str(epoch): indices for epoch, indices in sorted(recorded.read.items())},
            "clips": clips,
            "val_accuracy": val_accuracy,
            "seconds": elapsed,
            "weights": str(weights),
        }
        args.report.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
