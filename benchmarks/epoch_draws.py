"""What weighted and class-balanced draws cost a VideoDataset: construction, each epoch's draw, and its pickle.

For each size, a list of rows over 400 classes of skewed sizes (class ``k``
holds about twice as many rows as class ``k + 40``) makes a training
``VideoDataset`` with ``find_missing=False``, so that no file is needed or
opened. Four ways of drawing an epoch are compared:

* ``shuffle``: the default, each sample once, shuffled;
* ``2x epoch``: ``samples_per_epoch`` twice the list, two shuffled orders;
* ``weights``: a sequence of random weights, one per row;
* ``balanced``: ``weights="balanced"``.

Reported: construction (seconds), the epoch's draw (``set_epoch``, which a
``DataLoader`` makes in ``on_epoch_begin``; milliseconds, the median over
``--rounds`` epochs), the dataset's pickle (what a worker process receives),
and the rarest and commonest class's share of one epoch's draws.

    python -m benchmarks.epoch_draws                        # 10,000, 100,000 and 1,000,000 rows, 5 epochs
    python -m benchmarks.epoch_draws --rows 10000 --rounds 2
"""

from __future__ import annotations

import pickle
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from parallel_loader.video import VideoDataset

from ._common import add_out_argument, format_table, make_parser, parse_ints, write_report

__all__ = ["main", "measure"]

CLASSES = 400
MODES = ("shuffle", "2x epoch", "weights", "balanced")


def rows_of(count: int) -> list[tuple[str, int]]:
    """``count`` rows over ``CLASSES`` classes, class ``k``'s share falling as ``2 ** (-k / 40)``."""
    shares = 2.0 ** (-np.arange(CLASSES) / 40)
    labels = np.random.default_rng(0).choice(CLASSES, size=count, p=shares / shares.sum())
    labels[:CLASSES] = np.arange(CLASSES)  # every class has a row
    return [(f"/videos/class_{label:03d}/{i:011d}.mp4", int(label)) for i, label in enumerate(labels.tolist())]


def options_of(mode: str, count: int) -> dict[str, Any]:
    """The ``VideoDataset`` keywords of ``mode`` for a list of ``count`` rows."""
    if mode == "2x epoch":
        return {"samples_per_epoch": 2 * count}
    if mode == "weights":
        return {"weights": np.random.default_rng(1).random(count)}
    if mode == "balanced":
        return {"weights": "balanced"}
    return {}


def measure(count: int, mode: str, rounds: int) -> dict[str, Any]:
    """Construction, the draw of ``rounds`` epochs, the pickle and the class shares of one mode at one size."""
    rows = rows_of(count)
    start = time.perf_counter()
    data = VideoDataset(rows, batch_size=8, clip_len=8, seed=0, find_missing=False, **options_of(mode, count))
    construct = time.perf_counter() - start
    draws = []
    for epoch in range(1, rounds + 1):
        start = time.perf_counter()
        data.set_epoch(epoch)
        draws.append(time.perf_counter() - start)
    start = time.perf_counter()
    pickled = pickle.dumps(data)
    pickle_s = time.perf_counter() - start
    labels = np.array([label for _, label in rows])
    drawn = labels[data._state[1]]  # the epoch's sample at each position
    shares = np.bincount(drawn, minlength=CLASSES) / len(drawn)
    return {
        "construct_s": construct,
        "draw_ms": 1000 * statistics.median(draws),
        "pickle_s": pickle_s,
        "pickle_mb": len(pickled) / 2**20,
        "rarest_share": float(shares[CLASSES - 1]),
        "commonest_share": float(shares[0]),
        "positions": len(drawn),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = make_parser(__doc__)
    parser.add_argument("--rows", type=parse_ints, default=[10_000, 100_000, 1_000_000], help="list sizes, e.g. 10000")
    parser.add_argument("--rounds", type=int, default=5, help="epochs drawn per setting; the median is reported")
    add_out_argument(parser)
    args = parser.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    table = []
    for count in args.rows:
        for mode in MODES:
            result = results.setdefault(str(count), {})[mode] = measure(count, mode, args.rounds)
            table.append(
                [
                    f"{count:,}",
                    mode,
                    f"{result['positions']:,}",
                    f"{result['construct_s']:.3f}",
                    f"{result['draw_ms']:.1f}",
                    f"{result['pickle_mb']:.1f}",
                    f"{result['pickle_s']:.3f}",
                    f"{100 * result['rarest_share']:.2f}",
                    f"{100 * result['commonest_share']:.2f}",
                ]
            )
    headers = ["rows", "draw", "positions", "construct s", "draw ms", "pickle MB", "pickle s", "rarest %", "common %"]
    print(format_table(headers, table))
    print(f"rarest and common: the shares of class {CLASSES - 1} and class 0 in one epoch's draws")
    write_report(args, "epoch_draws", {"results": results})
    return results


if __name__ == "__main__":
    main()
