"""One run of the campaign: build its loader (or ``Train``), consume it with its fault, and check the outcome.

The only module that puts the others together for a run: the yield functions of
``data``, the injection of ``inject`` and the judgements of ``check``. It knows
nothing of the campaign's loop, its hang watch or its report.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from parallel_loader import DataLoader, Train

from .check import allowed_exceptions, check_delivery, leaked_threads, sigint_swallowed
from .config import LEAK_GRACE, Config, Outcome, TaskError
from .data import Data, make_data, make_loader
from .inject import Interrupts, Trigger, traced

__all__ = ["run_one"]


def run_one(cfg: Config, interrupts: Interrupts) -> Outcome:
    """Run one configuration with its fault and check what happened."""
    outcome = Outcome(cfg)
    before = set(threading.enumerate())
    release = threading.Event()
    epochs: list[tuple[int, list[Any], bool]] = []  # (epoch, batches, ended whole)
    resumed: list[Any] = []
    loader: DataLoader | None = None
    trigger: Trigger | None = None
    start = time.perf_counter()
    exc: BaseException | None = None
    ignored = interrupts.ignored
    try:
        try:
            data = make_data(cfg, release)
            if cfg.fault.startswith("train_"):
                trigger = Trigger(cfg, interrupts)
                with traced(cfg, outcome):
                    _run_train(cfg, data, trigger, epochs)
            else:
                loader = make_loader(cfg, data)
                trigger = Trigger(cfg, interrupts, loader)
                with traced(cfg, outcome):
                    resumed = _consume(cfg, loader, data, epochs, trigger)
        finally:
            interrupts.disarm()
    except BaseException as error:  # every outcome is checked below
        exc = error
    finally:
        sys.settrace(None)
        interrupts.disarm()
        release.set()
        if trigger is not None:
            trigger.cancel()
    outcome.seconds = time.perf_counter() - start
    outcome.exception = None if exc is None else type(exc).__name__
    allowed = allowed_exceptions(cfg)
    if cfg.fault in ("trace", "train_trace"):  # the trap raised (and says where) or the run ended first
        allowed = {KeyboardInterrupt} if outcome.where else {None}
    if (type(exc) if exc is not None else None) not in allowed:
        outcome.wrong_exception = f"{outcome.exception}: {exc}" if exc is not None else "none"
    elif sigint_swallowed(trigger, exc, interrupts, ignored):
        outcome.wrong_exception = "none: a SIGINT sent during the run neither raised nor came after it"
    outcome.leaked = leaked_threads(before)
    if loader is not None and not loader.closed:
        loader.close(timeout=LEAK_GRACE)
    outcome.lost = check_delivery(cfg, epochs, resumed, loader)
    outcome.completed_epochs = sum(whole for _, _, whole in epochs)
    return outcome


def _consume(cfg: Config, loader: DataLoader, data: Data, epochs: list, trigger: Trigger) -> list[Any]:
    """Iterate the epochs, acting at batch ``cfg.at`` (a fault, a resume); the resumed batches."""
    seen = 0
    trigger.fire(-1)
    with loader:
        for _ in range(cfg.epochs):
            batches: list[Any] = []
            epochs.append((loader.epoch + 1, batches, False))
            for batch in loader:
                trigger.fire(seen)
                batches.append(batch)
                if seen == cfg.at and cfg.fault == "task":
                    raise TaskError(f"injected training-step failure at batch {seen}")
                if seen == cfg.at and cfg.fault == "resume":
                    return _resume(cfg, loader, data)
                seen += 1
            epochs[-1] = (epochs[-1][0], batches, True)
    return []


def _resume(cfg: Config, loader: DataLoader, data: Data) -> list[Any]:
    """Save the state mid-epoch, and go on in a new loader with another thread count and queue length."""
    state = json.loads(json.dumps(loader.state_dict()))
    loader.close()
    again = make_loader(cfg, make_data(cfg, data.release), cfg.resume_threads, cfg.resume_max_len)
    again.load_state_dict(state)
    with again:
        return list(again)


def _run_train(cfg: Config, data: Data, trigger: Trigger, epochs: list) -> None:
    seen = [0]
    batches: list[Any] = []

    def step(batch: Any) -> None:
        trigger.fire(seen[0])
        if seen[0] == cfg.at and cfg.fault == "train_task":
            raise TaskError(f"injected training-step failure at batch {seen[0]}")
        seen[0] += 1
        batches.append(batch)

    def epoch_end(stats: Any) -> None:
        epochs.append((stats.epoch, list(batches), True))
        batches.clear()

    trainer = Train(
        step,
        data,
        val_yield=make_data(cfg, data.release),
        val_task=lambda batch: None,
        num_threads=cfg.threads,
        eval_num_threads=max(1, cfg.threads // 2),
        max_len=cfg.max_len,
        shuffle=cfg.shuffle,
        seed=cfg.seed,
        ordered=cfg.ordered,
        overlap_epochs=cfg.overlap,
        batch_size=cfg.batch_size if cfg.protocol == "samples" else None,
        drop_last=cfg.drop_last,
        on_epoch_end=epoch_end,
    )
    trigger.fire(-1)
    try:
        trainer.run(cfg.epochs, progress=False)
    finally:
        if batches:
            epochs.append((len(trainer.history), list(batches), False))
