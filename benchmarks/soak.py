"""Soak: epochs over ~1 MB batches for a long time, skipping injected errors; RSS must stay flat.

A yield function makes numpy batches of ``--batch-mb`` MB and fails, deterministically,
for a fraction ``--error-rate`` of the (epoch, index) pairs. The loader runs with
``on_error="skip"`` and an ``error_log``, epoch after epoch, until ``--minutes`` have
passed (whole epochs only). At the end the script checks:

* resident memory: start, end and peak, against the batches that may exist at once,
  ``(max_len + num_threads) x batch bytes``;
* the manifest (the ``error_log`` file and ``loader.errors``) holds exactly the
  injected errors, each once;
* every other index of every epoch was delivered exactly once, with its own data;
* no loader thread is left running after ``close()``.

    python -m benchmarks.soak --minutes 30 --threads 4 --batch-mb 1 --error-rate 0.01
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from parallel_loader import DataLoader, YieldFunction

from ._common import add_out_argument, format_table, make_parser, write_report
from ._resources import ResourceSampler

__all__ = ["InjectedErrors", "main"]

MB = 2**20


class InjectedError(RuntimeError):
    """The failure the soak injects."""


class InjectedErrors(YieldFunction):
    """Batches of ``batch_bytes`` bytes; the call fails for the (epoch, index) pairs that ``bad`` names.

    Each batch starts with its epoch and index (two int64), so the consumer can
    check it received the right data. ``load_seconds`` of simulated I/O (a sleep)
    make each call cost what reading a file would.
    """

    def __init__(self, length: int, batch_bytes: int, error_rate: float, seed: int, load_seconds: float) -> None:
        self.length = length
        self.batch_bytes = batch_bytes
        self.error_rate = error_rate
        self.seed = seed
        self.load_seconds = load_seconds
        self.epoch = 0
        self._bad: frozenset[int] = frozenset()

    def bad(self, epoch: int) -> frozenset[int]:
        """The indices that fail in ``epoch``: the same for a given seed, whatever the threads do."""
        draws = np.random.default_rng([self.seed, epoch]).random(self.length)
        return frozenset(np.flatnonzero(draws < self.error_rate).tolist())

    def on_epoch_begin(self, epoch: int) -> None:
        self.epoch = epoch
        self._bad = self.bad(epoch)

    def __len__(self) -> int:
        return self.length

    def __call__(self, index: int) -> np.ndarray:
        if self.load_seconds:
            time.sleep(self.load_seconds)
        if index in self._bad:
            raise InjectedError(f"injected error at epoch {self.epoch} index {index}")
        batch = np.empty(self.batch_bytes // 8, np.int64)
        batch.fill(index)  # touch every page, as decoding would
        batch[0] = self.epoch
        return batch

    def error_context(self, index: int) -> dict[str, Any]:
        return {"source": f"batch-{index}"}


def _rss() -> int:
    return psutil.Process().memory_info().rss


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the soak, print its report and return it."""
    parser = make_parser(__doc__)
    parser.add_argument("--minutes", type=float, default=30.0, help="run whole epochs until this much time passed")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--max-len", type=int, default=8)
    parser.add_argument("--batch-mb", type=float, default=1.0, help="size of each batch in MB")
    parser.add_argument("--error-rate", type=float, default=0.01, help="fraction of calls that fail")
    parser.add_argument("--batches", type=int, default=1000, help="batches per epoch")
    parser.add_argument("--load-ms", type=float, default=20.0, help="simulated I/O per call (a sleep), ms")
    parser.add_argument("--step-ms", type=float, default=10.0, help="simulated training step per batch (a sleep), ms")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report-every", type=float, default=5.0, help="minutes between RSS lines")
    add_out_argument(parser)
    args = parser.parse_args(argv)
    # Each skipped call is logged as a warning; the manifest is the record that counts here.
    logging.getLogger("parallel_loader").setLevel(logging.ERROR)

    batch_bytes = int(args.batch_mb * MB) // 8 * 8
    data = InjectedErrors(args.batches, batch_bytes, args.error_rate, args.seed, args.load_ms / 1000)
    in_flight = (args.max_len + args.threads) * batch_bytes
    step = args.step_ms / 1000
    before = set(threading.enumerate())
    problems: list[str] = []
    samples: list[list[Any]] = []
    injected: set[tuple[int, int]] = set()
    delivered = 0
    with tempfile.TemporaryDirectory() as tmp, ResourceSampler(interval=0.5) as resources:
        manifest = Path(tmp) / "errors.jsonl"
        loader = DataLoader(
            data,
            num_threads=args.threads,
            max_len=args.max_len,
            shuffle=True,
            seed=args.seed,
            on_error="skip",
            error_log=manifest,
        )
        start_rss = _rss()
        warm_rss = 0
        t0 = time.monotonic()
        end = t0 + 60 * args.minutes
        next_report = t0
        with loader:
            while True:
                epoch = loader.epoch + 1
                seen = np.zeros(args.batches, np.int32)
                for batch in loader:
                    if batch[0] != epoch:
                        problems.append(f"epoch {epoch}: a batch of epoch {batch[0]}")
                    seen[batch[1]] += 1
                    if step:
                        time.sleep(step)
                bad = data.bad(epoch)
                injected |= {(epoch, i) for i in bad}
                expected = np.ones(args.batches, np.int32)
                expected[list(bad)] = 0
                if not np.array_equal(seen, expected):
                    wrong = np.flatnonzero(seen != expected)[:5].tolist()
                    problems.append(f"epoch {epoch}: indices delivered a wrong number of times, e.g. {wrong}")
                delivered += int(seen.sum())
                warm_rss = warm_rss or _rss()  # after the first epoch: the allocator has its working set
                now = time.monotonic()
                if now >= next_report or now >= end:
                    samples.append(
                        [f"{(now - t0) / 60:.1f}", epoch + 1, delivered, len(loader.errors), f"{_rss() / MB:.1f}"]
                    )
                    next_report += 60 * args.report_every
                if now >= end:
                    break
            errors = loader.errors
        end_rss = _rss()
        lines = manifest.read_text(encoding="utf-8").splitlines()
    elapsed = time.monotonic() - t0
    leaked = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    if leaked:
        problems.append(f"threads left running: {leaked}")
    logged = [json.loads(line) for line in lines]
    logged_keys = [(r["epoch"], r["index"]) for r in logged]
    kept_keys = [(r.epoch, r.index) for r in errors]
    for what, keys in (("error_log", logged_keys), ("loader.errors", kept_keys)):
        if len(keys) != len(set(keys)):
            problems.append(f"{what} has duplicate records")
        if set(keys) != injected:
            missing, extra = injected - set(keys), set(keys) - injected
            problems.append(f"{what}: {len(missing)} injected errors missing, {len(extra)} not injected")
    if any(r["type"] != "InjectedError" or r["context"] != {"source": f"batch-{r['index']}"} for r in logged):
        problems.append("error_log has records of the wrong type or without their context")

    peak_rss = resources.peak_rss
    print(
        f"soak: {elapsed / 60:.1f} min, {len(samples) and samples[-1][1]} epochs of {args.batches} batches of "
        f"{batch_bytes / MB:.2f} MB, threads={args.threads}, max_len={args.max_len}, "
        f"error rate {args.error_rate:.2%}, load {args.load_ms:g} ms, step {args.step_ms:g} ms"
    )
    print(format_table(["minutes", "epochs", "batches delivered", "errors recorded", "RSS MB"], samples))
    print(
        format_table(
            [
                "RSS start MB",
                "after epoch 1 MB",
                "RSS end MB",
                "RSS peak MB",
                "peak - start MB",
                "end - after epoch 1 MB",
                "(max_len+threads) x batch MB",
            ],
            [
                [
                    f"{start_rss / MB:.1f}",
                    f"{warm_rss / MB:.1f}",
                    f"{end_rss / MB:.1f}",
                    f"{peak_rss / MB:.1f}",
                    f"{(peak_rss - start_rss) / MB:.1f}",
                    f"{(end_rss - warm_rss) / MB:.1f}",
                    f"{in_flight / MB:.1f}",
                ]
            ],
        )
    )
    print(
        f"injected errors: {len(injected)}; error_log records: {len(logged)}; loader.errors: {len(errors)}; "
        f"batches delivered: {delivered}"
    )
    print(
        "OK: the manifest holds exactly the injected errors"
        if not problems
        else "PROBLEMS:\n  " + "\n  ".join(problems)
    )
    fields = {
        "minutes": elapsed / 60,
        "samples": samples,
        "start_rss": start_rss,
        "warm_rss": warm_rss,
        "end_rss": end_rss,
        "peak_rss": peak_rss,
        "in_flight_bytes": in_flight,
        "injected": len(injected),
        "logged": len(logged),
        "delivered": delivered,
        "problems": problems,
    }
    return write_report(args, "soak", fields)


if __name__ == "__main__":
    main()
