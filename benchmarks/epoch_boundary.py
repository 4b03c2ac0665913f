"""The consumer's wait at epoch boundaries, with and without overlapping epochs.

A latency-bound loader (each batch sleeps ``--load`` seconds, as waiting for a disk
or a network would) feeds a step that sleeps ``--step`` seconds, in short epochs of
``--epoch-batches`` batches. Two measurements, each with ``overlap_epochs`` off
(the next epoch starts only when it is iterated) and on (its first batches are made
while this epoch's last ones are used), in interleaved rounds:

* ``loader``: epochs back to back from one ``DataLoader``;
* ``train``: ``Train`` with a validation pass after each epoch (``--val-batches``
  batches through a step of ``--step`` seconds): the training loader keeps
  working while validation runs.

Reported per setting: the wait for the first batch of each epoch after the first
(the boundary), the wait over all the other batches, and epochs per second.

    python -m benchmarks.epoch_boundary --rounds 3
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Sequence
from typing import Any

from parallel_loader import DataLoader, Train

from ._common import add_noise_arguments, add_out_argument, format_table, make_parser, spread, write_report
from ._resources import wait_for_quiet

__all__ = ["main", "measure"]


class Sleeper:
    """A yield function that sleeps ``load`` seconds per batch and returns its index."""

    def __init__(self, batches: int, load: float) -> None:
        self.batches = batches
        self.load = load

    def __len__(self) -> int:
        return self.batches

    def __call__(self, index: int) -> int:
        time.sleep(self.load)
        return index


def measure(mode: str, overlap: bool, args: argparse.Namespace) -> dict[str, float]:
    """One run: the boundary waits, the other waits and the epochs per second."""
    boundary: list[float] = []
    inside: list[float] = []
    data = Sleeper(args.epoch_batches, args.load)
    start = time.perf_counter()
    if mode == "loader":
        with DataLoader(data, args.threads, args.max_len, overlap_epochs=overlap) as loader:
            for epoch in range(args.epochs):
                ready = time.perf_counter()
                for position, _ in enumerate(loader):
                    waited = time.perf_counter() - ready
                    (boundary if position == 0 and epoch > 0 else inside).append(waited)
                    time.sleep(args.step)
                    ready = time.perf_counter()
    else:
        marks: list[tuple[str, float, float]] = []  # (pass, step start, step end)

        def task(kind: str) -> Any:
            def step(_: Any) -> None:
                begin = time.perf_counter()
                time.sleep(args.step)
                marks.append((kind, begin, time.perf_counter()))

            return step

        trainer = Train(
            task("train"),
            data,
            Sleeper(args.val_batches, args.load),
            num_threads=args.threads,
            max_len=args.max_len,
            val_task=task("val"),
            shuffle=False,
            overlap_epochs=overlap,
        )
        trainer.run(args.epochs, progress=False)
        # The training loop's wait before a step: the gap since the step before it ended;
        # after a validation step, that is the wait at the start of an epoch.
        for (previous, _, ended), (kind, began, _) in itertools.pairwise(marks):
            if kind == "train":
                (boundary if previous == "val" else inside).append(began - ended)
    seconds = time.perf_counter() - start
    return {
        "boundary_wait_ms": 1000 * statistics.median(boundary),
        "other_wait_ms_per_batch": 1000 * sum(inside) / max(1, args.epochs * args.epoch_batches - len(boundary)),
        "epochs_per_s": args.epochs / seconds,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = make_parser(__doc__)
    parser.add_argument("--load", type=float, default=0.05, help="seconds each batch sleeps in the loader")
    parser.add_argument("--step", type=float, default=0.01, help="seconds each training (and validation) step sleeps")
    parser.add_argument("--threads", type=int, default=5)
    parser.add_argument("--max-len", type=int, default=8)
    parser.add_argument("--epoch-batches", type=int, default=20)
    parser.add_argument("--val-batches", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    add_out_argument(parser)
    add_noise_arguments(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    settings = [(mode, overlap) for mode in ("loader", "train") for overlap in (False, True)]
    runs: dict[tuple[str, bool], list[dict[str, float]]] = {s: [] for s in settings}
    for r in range(args.rounds):
        for mode, overlap in settings if r % 2 == 0 else settings[::-1]:
            wait_for_quiet(args.quiet)
            runs[(mode, overlap)].append(measure(mode, overlap, args))
    print(
        f"latency loader: T_load = {args.load * 1000:.0f} ms, T_step = {args.step * 1000:.0f} ms, "
        f"{args.threads} threads, max_len {args.max_len}, {args.epochs} epochs of {args.epoch_batches} batches"
        f" (train: + {args.val_batches} validation batches), {args.rounds} interleaved rounds; medians (min-max)"
    )
    rows = []
    for mode, overlap in settings:
        results = runs[(mode, overlap)]
        rows.append(
            [
                mode,
                "on" if overlap else "off",
                spread(r["boundary_wait_ms"] for r in results).fmt(1),
                spread(r["other_wait_ms_per_batch"] for r in results).fmt(2),
                spread(r["epochs_per_s"] for r in results).fmt(2),
            ]
        )
    print(
        format_table(
            ["run", "overlap_epochs", "wait at epoch start, ms", "other waits, ms per batch", "epochs/s"], rows
        )
    )
    for mode in ("loader", "train"):
        off = statistics.median(r["boundary_wait_ms"] for r in runs[(mode, False)])
        on = statistics.median(r["boundary_wait_ms"] for r in runs[(mode, True)])
        speed = statistics.median(r["epochs_per_s"] for r in runs[(mode, True)]) / statistics.median(
            r["epochs_per_s"] for r in runs[(mode, False)]
        )
        print(f"{mode}: boundary wait {off:.1f} ms -> {on:.1f} ms; epochs/s {speed:.2f}x")
    return write_report(args, "epoch_boundary", {"runs": {f"{m}-{o}": v for (m, o), v in runs.items()}}, say=False)


if __name__ == "__main__":
    main()
