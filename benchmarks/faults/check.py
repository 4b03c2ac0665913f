"""What a run must have done: the exception its fault allows, each index once, no thread left behind.

Every judgement of a run's outcome is here, and only judgements: the module
runs nothing of the fault itself (it only replays an uninterrupted ordered
epoch, to compare a resumed one with it).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from parallel_loader import DataLoader, LoaderClosed, LoaderTimeout
from parallel_loader._core.worker_pool import thread_frames

from .config import LEAK_GRACE, Config, InjectedError, TaskError
from .data import indices, make_data, make_loader
from .inject import Interrupts, Trigger

__all__ = ["allowed_exceptions", "check_delivery", "leaked_threads", "sigint_swallowed"]


def sigint_swallowed(trigger: Trigger | None, exc: BaseException | None, interrupts: Interrupts, ignored: int) -> bool:
    """Whether the run's SIGINT was sent but neither raised in the run nor handled after it.

    ``ignored`` is ``interrupts.ignored`` before the run. A signal sent just as the
    run ended is handled at the main thread's next check, which the sleeps give it.
    """
    if trigger is None or not trigger.sent or isinstance(exc, KeyboardInterrupt):
        return False
    deadline = time.monotonic() + 1.0
    while interrupts.ignored == ignored and time.monotonic() < deadline:
        time.sleep(0.001)
    return interrupts.ignored == ignored


def allowed_exceptions(cfg: Config) -> set[type[BaseException] | None]:
    """The exceptions (None: none) a run with this fault may end with."""
    some_batches = cfg.batches > 0
    # With drop_last, the failing or hanging sample may be among those left out.
    may_miss = {None} if cfg.protocol == "samples" and cfg.drop_last else set()
    if cfg.fault == "raise":
        return {InjectedError} | may_miss if some_batches else {None}
    if cfg.fault == "close":
        return {None, LoaderClosed}
    if cfg.fault in ("sigint", "trace", "train_sigint", "train_trace"):
        return {None, KeyboardInterrupt}
    if cfg.fault in ("task", "train_task"):
        return {TaskError} if some_batches else {None}
    if cfg.fault == "hang":
        return {LoaderTimeout} | may_miss if some_batches else {None}
    return {None}


def check_delivery(cfg: Config, epochs: list, resumed: list[Any], loader: DataLoader | None) -> list[str]:
    problems = []
    expected = _epoch_indices(cfg)
    for epoch, batches, whole in epochs:
        got = [i for batch in batches for i in indices(batch, cfg)]
        if cfg.protocol in ("hooks", "get_batch") and not cfg.fault.startswith("train_"):
            wrong = [b for b in batches if b[0] != epoch]
            if wrong:
                problems.append(f"epoch {epoch}: batches made for another epoch: {wrong[:5]}")
        if resumed and epoch == epochs[-1][0]:
            got += [i for batch in resumed for i in indices(batch, cfg)]
            whole = True
            if cfg.ordered:
                order = _uninterrupted_order(cfg, epoch)
                if got != order:
                    problems.append(f"epoch {epoch}: resumed order differs from an uninterrupted run's")
        counts = Counter(got)
        twice = sorted(i for i, n in counts.items() if n > 1)
        if twice:
            problems.append(f"epoch {epoch}: delivered twice: {twice[:10]}")
        if whole:
            skipped = _skipped(cfg, loader, epoch)
            if cfg.protocol == "samples" and cfg.drop_last:
                if len(counts) != cfg.samples_per_epoch or not set(counts) <= expected:
                    problems.append(f"epoch {epoch}: {len(counts)} samples, expected {cfg.samples_per_epoch}")
            elif set(counts) != expected - skipped:
                lost = sorted(expected - skipped - set(counts))
                extra = sorted(set(counts) - (expected - skipped))
                problems.append(f"epoch {epoch}: lost {lost[:10]}, unexpected {extra[:10]}")
    return problems


def _epoch_indices(cfg: Config) -> set[int]:
    return set(range(cfg.length))


def _skipped(cfg: Config, loader: DataLoader | None, epoch: int) -> set[int]:
    """The indices the loader recorded as skipped in ``epoch``.

    They must be the injected failures: every index in ``fail``, and the hung index
    in the epoch whose call hung (only the first call for it hangs).
    """
    if cfg.fault not in ("skip", "hang_skip") or loader is None:
        return set()
    recorded = [r.index for r in loader.errors if r.epoch == epoch]
    hung = [r.index for r in loader.errors if isinstance(r.index, int) and r.index == cfg.hang]
    expected = set(cfg.fail) & _epoch_indices(cfg)
    if cfg.hang is not None and cfg.hang in recorded:
        expected.add(cfg.hang)
    if len(recorded) != len(set(recorded)) or set(recorded) != expected or len(hung) > 1:
        return {-1}  # makes the epoch's check fail: the records are not the injected failures
    return set(recorded)


def _uninterrupted_order(cfg: Config, epoch: int) -> list[int]:
    """The indices of ``epoch`` as an uninterrupted ordered loader delivers them."""
    plain = Config(**{**asdict(cfg), "fault": "none", "fail": [], "hang": None, "call_timeout": None})
    loader = make_loader(plain, make_data(plain, threading.Event()), threads=2)
    with loader:
        for _ in range(epoch + 1):
            batches = list(loader)
    return [i for batch in batches for i in indices(batch, plain)]


def leaked_threads(before: set[threading.Thread]) -> list[str]:
    """Threads the run started that are still alive ``LEAK_GRACE`` seconds from now.

    A thread whose ``start()`` was interrupted before it was launched stays listed by
    ``threading.enumerate()`` without ever running: it is not counted.
    """
    deadline = time.monotonic() + LEAK_GRACE
    for thread in threading.enumerate():
        ours = thread not in before and not isinstance(thread, threading._DummyThread)
        if ours and thread._started.wait(max(0.0, deadline - time.monotonic())):
            thread.join(max(0.0, deadline - time.monotonic()))
    leaked = [
        t
        for t in threading.enumerate()
        if t not in before and t.is_alive() and not isinstance(t, threading._DummyThread)
    ]
    frames = thread_frames()
    return [
        f"{t.name} at "
        + " < ".join(
            f"{Path(f.filename).name}:{f.lineno}" for f in reversed(traceback.extract_stack(frames[t.ident])[-3:])
        )
        if t.ident in frames
        else t.name
        for t in leaked
    ]
