"""The campaign's yield functions, written each way a user may write one, and the loader over them.

Batch ``index`` is ``(epoch, index)`` (a sample dataset's sample is ``index``), so a
delivered batch says which index, and which epoch the call thought it served. Some
indices fail or hang as the configuration says. The module knows nothing of the
other faults (closes, SIGINTs, traced lines) or of how a delivery is checked.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import numpy as np

from parallel_loader import DataLoader, YieldFunction

from .config import Config, InjectedError

__all__ = ["HANG_LIMIT", "Data", "Samples", "WithGetBatch", "WithHooks", "indices", "make_data", "make_loader"]

# A hung call waits at most this long, so that a run the loader fails to free still ends.
HANG_LIMIT = 20.0


class Data(YieldFunction):
    """Batch ``index`` is ``(epoch, index)``; some indices fail or hang, and every call sleeps a little.

    ``epoch`` is what the call knows of its epoch: the argument of ``get_batch``,
    the last ``on_epoch_begin`` with hooks, and -1 without either.
    """

    def __init__(self, cfg: Config, release: threading.Event) -> None:
        self.cfg = cfg
        self.fail = set(cfg.fail)
        self.release = release
        self.epoch = -1
        self.rng = random.Random(cfg.seed)
        self._hang = cfg.hang
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.cfg.length

    def __call__(self, index: int) -> tuple[int, int]:
        return self.make(index, self.epoch)

    def make(self, index: int, epoch: int) -> tuple[int, int]:
        pause = self.rng.random()  # random.Random is safe to share between threads
        if pause < 0.3:
            time.sleep(pause * 0.003)
        if index == self._hang:
            with self._lock:
                hang = self._hang == index
                if self.cfg.fault == "hang_skip":
                    # Only the first call hangs, so that later epochs do not pile up stuck
                    # threads (past num_threads the loader raises, skip or not). With "hang"
                    # every call of the index hangs: the first may be one made ahead for an
                    # epoch that never runs, whose failure is rightly never raised.
                    self._hang = None
            if hang:
                self.release.wait(HANG_LIMIT)
        if index in self.fail:
            raise InjectedError(f"injected failure at index {index}")
        return (epoch, index)


class WithHooks(Data):
    def on_epoch_begin(self, epoch: int) -> None:
        self.epoch = epoch


class WithGetBatch(WithHooks):
    def get_batch(self, index: int, epoch: int) -> tuple[int, int]:
        return self.make(index, epoch)


class Samples(Data):
    """A sample dataset: sample ``index`` is ``index``."""

    def __getitem__(self, index: int) -> int:
        return self.make(index, -1)[1]


def make_data(cfg: Config, release: threading.Event) -> Data:
    return {"call": Data, "hooks": WithHooks, "get_batch": WithGetBatch, "samples": Samples}[cfg.protocol](cfg, release)


def make_loader(cfg: Config, data: Data, threads: int | None = None, max_len: int | None = None) -> DataLoader:
    return DataLoader(
        data,
        num_threads=threads or cfg.threads,
        max_len=max_len or cfg.max_len,
        shuffle=cfg.shuffle,
        seed=cfg.seed,
        ordered=cfg.ordered,
        overlap_epochs=cfg.overlap,
        on_error="skip" if cfg.fault in ("skip", "hang_skip") else "raise",
        call_timeout=cfg.call_timeout,
        batch_size=cfg.batch_size if cfg.protocol == "samples" else None,
        drop_last=cfg.drop_last,
        name=f"faults-{cfg.seed}",
    )


def indices(batch: Any, cfg: Config) -> list[int]:
    """The indices (samples) a batch carries."""
    if cfg.protocol == "samples":
        return [int(x) for x in np.asarray(batch).reshape(-1)]
    return [batch[1]]
