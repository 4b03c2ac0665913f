"""What one run of the campaign is: its configuration and fault, drawn from a seed, and its outcome.

A ``Config`` is data only: drawing it needs nothing but its seed, so any run can be
replayed from the seed the campaign printed. The module knows nothing of how a
fault is injected, of the loader's API, or of how an outcome is judged.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["FAULTS", "LEAK_GRACE", "PROTOCOLS", "Config", "InjectedError", "Outcome", "TaskError"]

FAULTS = (
    "none",
    "raise",
    "skip",
    "close",
    "sigint",
    "trace",
    "task",
    "hang",
    "hang_skip",
    "resume",
    "train_task",
    "train_sigint",
    "train_trace",
)
PROTOCOLS = ("call", "hooks", "get_batch", "samples")

# How long the threads a run started get to end after it, before they count as leaked.
LEAK_GRACE = 3.0


class InjectedError(RuntimeError):
    """A yield-function call's injected failure."""


class TaskError(RuntimeError):
    """The training step's injected failure."""


@dataclass
class Config:
    """One run's configuration and fault, drawn from its seed."""

    seed: int
    fault: str
    protocol: str
    threads: int
    max_len: int
    ordered: bool
    shuffle: bool
    overlap: bool
    length: int
    epochs: int
    batch_size: int = 1
    drop_last: bool = False
    fail: list[int] = field(default_factory=list)  # indices whose call raises
    hang: int | None = None  # the index whose call hangs
    call_timeout: float | None = None
    at: int = 0  # the batch (over all epochs) where the fault starts; -1: before the first
    delay: float = 0.0  # seconds from batch ``at`` to a close or a SIGINT
    line: int = 0  # the traced line at which KeyboardInterrupt is raised
    resume_threads: int = 1
    resume_max_len: int = 1

    @classmethod
    def draw(cls, seed: int, faults: tuple[str, ...] = FAULTS) -> Config:
        rng = random.Random(seed)
        fault = rng.choice(faults)
        protocol = rng.choice(PROTOCOLS)
        if fault in ("skip", "hang_skip"):
            protocol = rng.choice(("call", "hooks", "get_batch"))  # a skipped batch's samples are not known
        length = rng.choice((0, 1, 2, rng.randint(3, 20), rng.randint(3, 200)))
        if fault in ("trace", "train_trace"):
            length = min(length, 40)  # tracing every line is slow
        cfg = cls(
            seed=seed,
            fault=fault,
            protocol=protocol,
            threads=rng.randint(1, 16),
            max_len=rng.randint(1, 8),
            ordered=rng.random() < 0.4,
            shuffle=rng.random() < 0.5,
            overlap=rng.random() < 0.7,
            length=length,
            epochs=rng.randint(1, 3),
        )
        if protocol == "samples":
            cfg.batch_size = rng.randint(1, 7)
            cfg.drop_last = rng.random() < 0.5
        span = max(1, cfg.length)  # indices, or samples of a sample dataset
        if fault == "raise":
            cfg.fail = [rng.randrange(span)]
        elif fault == "skip":
            cfg.fail = sorted(rng.sample(range(span), min(span, rng.randint(1, 5))))
        elif fault in ("hang", "hang_skip"):
            cfg.hang = rng.randrange(span)
            cfg.call_timeout = rng.uniform(0.05, 0.3)
        elif fault in ("trace", "train_trace"):
            cfg.line = rng.randint(1, 3000)
        elif fault in ("close", "sigint", "train_sigint"):
            cfg.at = rng.randint(-1, cfg.epochs * cfg.batches - 1)
            cfg.delay = rng.choice((0.0, rng.uniform(0.0, 0.005)))
        elif fault in ("task", "train_task", "resume"):
            cfg.at = rng.randint(0, max(0, cfg.epochs * cfg.batches - 1))
            cfg.resume_threads = rng.randint(1, 16)
            cfg.resume_max_len = rng.randint(1, 8)
        return cfg

    @property
    def batches(self) -> int:
        """Batches per epoch."""
        if self.protocol != "samples":
            return self.length
        full, rest = divmod(self.length, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    @property
    def samples_per_epoch(self) -> int:
        """Indices (samples, for a sample dataset) delivered by a whole epoch."""
        if self.protocol != "samples":
            return self.length
        return self.length - (self.length % self.batch_size if self.drop_last else 0)


@dataclass
class Outcome:
    """What went wrong in one run (empty lists: nothing)."""

    config: Config
    seconds: float = 0.0
    exception: str | None = None
    wrong_exception: str | None = None
    leaked: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # lost or duplicated indices, per epoch
    completed_epochs: int = 0
    where: list[str] = field(default_factory=list)  # for a trace fault: where KeyboardInterrupt was raised

    @property
    def ok(self) -> bool:
        return self.wrong_exception is None and not self.leaked and not self.lost
