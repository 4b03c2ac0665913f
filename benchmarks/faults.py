"""Fault-injection campaign: random loader configurations, one random fault each.

Each run draws a configuration (threads 1-16, ``max_len`` 1-8, ordered or not,
shuffled or not, epochs overlapping or not, 0-200 batches per epoch, 1-3 epochs,
and how the yield function is written: a plain ``__call__``, epoch hooks,
``get_batch(index, epoch)``, or a sample dataset batched by the loader) and one
fault:

* ``none``: no fault, the baseline;
* ``raise`` / ``skip``: the call for some indices raises, with ``on_error`` "raise"
  (the error must reach the consumer) or "skip" (recorded, the rest delivered);
* ``close``: another thread calls ``close(timeout)`` at a random moment;
* ``sigint``: a real SIGINT reaches the consuming thread at a random moment;
* ``trace``: a trace function raises ``KeyboardInterrupt`` at the N-th line the
  consuming thread runs in the package or in ``threading.Condition`` (N random),
  so that every line of the consumer's code, waits and wake-ups included, is hit
  over a campaign;
* ``task``: the training step raises at a random batch;
* ``hang`` / ``hang_skip``: a call hangs past ``call_timeout`` (the watchdog must
  raise ``LoaderTimeout``, or record it and go on);
* ``resume``: the consumer stops at a random batch, saves ``state_dict()``, and a
  new loader with another thread count and queue length goes on from it;
* ``train_task`` / ``train_sigint`` / ``train_trace``: the same through
  ``Train.run`` with a validation loader: the step raising, a real SIGINT, or
  Ctrl-C at a traced line.

After each run it checks: the run ended within ``--run-limit`` seconds (else it
prints every thread's stack and exits: a hang), no thread started by the run is
still alive shortly after, the exception (or none) is one the fault allows, and
every epoch that ended delivered each index exactly once (less the skipped ones,
which must be exactly the injected failures); an epoch cut short delivered none
twice. A resumed epoch, both parts together, is the epoch exactly once, and in
ordered mode in the order of an uninterrupted run.

    python -m benchmarks.faults --runs 1000 --seed 0
"""

from __future__ import annotations

import argparse
import dis
import faulthandler
import json
import linecache
import logging
import os
import random
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import parallel_loader
from parallel_loader import DataLoader, LoaderClosed, LoaderTimeout, Train, YieldFunction

from ._common import DEFAULT_OUT, RunProgress, format_table, machine_info, write_json

__all__ = ["FAULTS", "Config", "Outcome", "main", "run_one"]

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

# A hung call waits at most this long, so that a run the loader fails to free still ends.
HANG_LIMIT = 20.0
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


class Interrupts:
    """Real SIGINTs to the main thread, raised as Python's own handler raises a Ctrl-C, only while armed.

    Armed, SIGINT has Python's default handler (so the loader sees the setting a
    user's program has); disarmed, it is ignored, so that a signal sent as a run
    ended cannot land in the checks. Both switches happen in the main thread, where
    Python runs the handler, so a signal is either raised in the run or ignored.
    """

    def __init__(self) -> None:
        self.ignored = 0  # SIGINTs that came while disarmed
        self._previous = signal.signal(signal.SIGINT, self._ignore)

    def arm(self) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def disarm(self) -> None:
        signal.signal(signal.SIGINT, self._ignore)

    def restore(self) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def _ignore(self, signum: int, frame: Any) -> None:
        self.ignored += 1


class Trigger:
    """Starts a run's close or SIGINT ``cfg.delay`` seconds after batch ``cfg.at`` is delivered (-1: at once).

    ``fire(batch)`` is called by the consumer before each batch's work and once
    before the first with -1.
    """

    def __init__(self, cfg: Config, interrupts: Interrupts, loader: DataLoader | None = None) -> None:
        self.at = cfg.at if cfg.fault in ("close", "sigint", "train_sigint") else None
        self.delay = cfg.delay
        self.timer: threading.Timer | None = None
        self.sent = False  # whether the SIGINT was sent
        if cfg.fault == "close":
            assert loader is not None
            self.action, self.args, self.kwargs = loader.close, (), {"timeout": cfg.delay * 5}
        else:
            main = threading.main_thread().ident
            self.action, self.args, self.kwargs = self._send, (main,), {}
            if self.at is not None:
                interrupts.arm()

    def fire(self, batch: int) -> None:
        if batch == self.at and self.timer is None:
            self.timer = threading.Timer(self.delay, self.action, self.args, self.kwargs)
            self.timer.name = "faults-trigger"
            self.timer.start()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer.join(LEAK_GRACE)

    def _send(self, thread: int) -> None:
        signal.pthread_kill(thread, signal.SIGINT)
        self.sent = True


class LineTrap:
    """A trace function that raises KeyboardInterrupt at the ``line``-th line run in the watched code.

    Watched: the package, and ``threading.Condition``'s methods, through which the
    package waits and wakes. The rest of ``threading`` is not: an interrupt inside
    ``Thread.start`` or the module's own bookkeeping breaks the interpreter's
    thread registry whatever the caller does (the loader defers Ctrl-C around
    ``start()`` for that reason), and is not what this campaign tests.
    """

    def __init__(self, line: int) -> None:
        package = Path(parallel_loader.__file__).parent
        self.watched = {str(p) for p in package.rglob("*.py")}
        self.line = line
        self.count = 0
        self.where: list[str] = []  # the innermost frames where it raised

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        if code.co_filename in self.watched:
            return self._local
        if _is_condition(frame) and (
            frame.f_back.f_code.co_filename in self.watched
            or (_is_condition(frame.f_back) and frame.f_back.f_back.f_code.co_filename in self.watched)
        ):
            return self._local  # a condition method the package called (notify_all calls notify)
        return None

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and _signal_can_land(frame):
            self.count += 1
            if self.count == self.line:
                sys.settrace(None)
                self.where[:] = [
                    f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in traceback.extract_stack(frame)[-4:]
                ]
                raise KeyboardInterrupt
        return self._local


_NOP = dis.opmap["NOP"]


def _is_condition(frame: Any) -> bool:
    code = None if frame is None else frame.f_code
    return code is not None and code.co_filename == threading.__file__ and code.co_qualname.startswith("Condition.")


def _signal_can_land(frame: Any) -> bool:
    """Whether a KeyboardInterrupt raised at this line event is one a real Ctrl-C could cause.

    CPython raises a signal's exception only after a call returns, at a function's
    start and on a backward jump. Two kinds of line event stand where none can:
    a ``NOP`` (the ``try:`` of a ``try`` statement compiles to one, outside the
    enclosing ``with``'s exception handler), and the second event of a ``with``
    line, where its block ends, before ``__exit__`` is called. Every event of a
    line that starts with ``with`` is left out: its first, before the lock or
    context is taken, is the same point as the end of the line before it.
    Line-level tracing also misses points a signal can reach (between a call's
    return and the store of its result, and inside the standard library's own
    Python code beyond ``threading.Condition``); the real SIGINTs cover those.
    """
    if frame.f_code.co_code[frame.f_lasti] == _NOP:
        return False
    return not linecache.getline(frame.f_code.co_filename, frame.f_lineno).lstrip().startswith("with ")


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
                with _traced(cfg, outcome):
                    _run_train(cfg, data, trigger, epochs)
            else:
                loader = make_loader(cfg, data)
                trigger = Trigger(cfg, interrupts, loader)
                with _traced(cfg, outcome):
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
    allowed = _allowed(cfg)
    if cfg.fault in ("trace", "train_trace"):  # the trap raised (and says where) or the run ended first
        allowed = {KeyboardInterrupt} if outcome.where else {None}
    if (type(exc) if exc is not None else None) not in allowed:
        outcome.wrong_exception = f"{outcome.exception}: {exc}" if exc is not None else "none"
    elif _swallowed(trigger, exc, interrupts, ignored):
        outcome.wrong_exception = "none: a SIGINT sent during the run neither raised nor came after it"
    outcome.leaked = _leaked(before)
    if loader is not None and not loader.closed:
        loader.close(timeout=LEAK_GRACE)
    outcome.lost = _check_delivery(cfg, epochs, resumed, loader)
    outcome.completed_epochs = sum(whole for _, _, whole in epochs)
    return outcome


@contextmanager
def _traced(cfg: Config, outcome: Outcome) -> Iterator[None]:
    """For a trace fault, run the block under a ``LineTrap`` for ``cfg.line``; for the others, as it is."""
    if cfg.fault not in ("trace", "train_trace"):
        yield
        return
    trap = LineTrap(cfg.line)
    outcome.where = trap.where
    sys.settrace(trap)
    try:
        yield
    finally:
        sys.settrace(None)


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


def _swallowed(trigger: Trigger | None, exc: BaseException | None, interrupts: Interrupts, ignored: int) -> bool:
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


def _allowed(cfg: Config) -> set[type[BaseException] | None]:
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


def _check_delivery(cfg: Config, epochs: list, resumed: list[Any], loader: DataLoader | None) -> list[str]:
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


def _leaked(before: set[threading.Thread]) -> list[str]:
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
    frames = sys._current_frames()
    return [
        f"{t.name} at "
        + " < ".join(
            f"{Path(f.filename).name}:{f.lineno}" for f in reversed(traceback.extract_stack(frames[t.ident])[-3:])
        )
        if t.ident in frames
        else t.name
        for t in leaked
    ]


class HangWatch:
    """Ends the campaign, with every thread's stack, if one run takes longer than ``limit`` seconds."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.current: Config | None = None
        self._deadline = float("inf")
        self._stopped = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._watch, name="faults-hang-watch", daemon=True)
        self._thread.start()

    def begin(self, cfg: Config) -> None:
        with self._cond:
            self.current, self._deadline = cfg, time.monotonic() + self.limit

    def end(self) -> None:
        with self._cond:
            self.current, self._deadline = None, float("inf")

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join()

    def _watch(self) -> None:
        with self._cond:
            while not self._stopped:
                left = self._deadline - time.monotonic()
                if left <= 0 and self.current is not None:
                    print(f"\nHANG: run {asdict(self.current)} passed {self.limit} s; stacks:", file=sys.stderr)
                    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
                    os._exit(3)
                self._cond.wait(min(left, 1.0) if left != float("inf") else 1.0)


def campaign(
    runs: int, seed: int, run_limit: float, faults: tuple[str, ...] = FAULTS, progress: bool | None = None
) -> list[Outcome]:
    """``runs`` runs from seeds ``seed, seed + 1, ...``; stops the process on a hang."""
    watch = HangWatch(run_limit)
    interrupts = Interrupts()
    outcomes = []
    bar = RunProgress(runs, progress)
    try:
        for i in range(runs):
            cfg = Config.draw(seed + i, faults)
            watch.begin(cfg)
            outcome = run_one(cfg, interrupts)
            watch.end()
            outcomes.append(outcome)
            bar.done(cfg.fault, "ok" if outcome.ok else "FAILED")
            if not outcome.ok:
                print(f"\nFAILED run {cfg.seed}: {json.dumps(_failure(outcome))}", file=sys.stderr, flush=True)
    finally:
        bar.close()
        interrupts.restore()
        watch.close()
    return outcomes


def summarize(outcomes: list[Outcome]) -> dict[str, Any]:
    by_fault: dict[str, dict[str, int]] = {}
    for o in outcomes:
        row = by_fault.setdefault(
            o.config.fault, {"runs": 0, "ended_with_error": 0, "epochs": 0, "wrong": 0, "leaked": 0, "lost": 0}
        )
        row["runs"] += 1
        row["ended_with_error"] += o.exception is not None
        row["epochs"] += o.completed_epochs
        row["wrong"] += o.wrong_exception is not None
        row["leaked"] += bool(o.leaked)
        row["lost"] += bool(o.lost)
    total = {key: sum(row[key] for row in by_fault.values()) for key in next(iter(by_fault.values()), {})}
    return {"runs": len(outcomes), "hangs": 0, "by_fault": by_fault, "total": total}


def _failure(o: Outcome) -> dict[str, Any]:
    return {
        "config": asdict(o.config),
        "exception": o.exception,
        "wrong_exception": o.wrong_exception,
        "leaked": o.leaked,
        "lost": o.lost,
        "where": o.where,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0, help="run i draws its configuration from seed + i")
    parser.add_argument("--faults", type=str, default=",".join(FAULTS), help="comma-separated faults to draw from")
    parser.add_argument("--run-limit", type=float, default=60.0, help="seconds after which a run counts as hung")
    parser.add_argument("--out", type=str, default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)
    faults = tuple(args.faults.split(","))
    unknown = set(faults) - set(FAULTS)
    if unknown:
        parser.error(f"unknown faults {sorted(unknown)}; choose from {', '.join(FAULTS)}")
    logging.basicConfig(level=logging.CRITICAL)  # the loaders log the injected failures; the table says enough
    start = time.perf_counter()
    outcomes = campaign(args.runs, args.seed, args.run_limit, faults)
    report = summarize(outcomes)
    report["seconds"] = time.perf_counter() - start
    report["seed"] = args.seed
    report["failures"] = [_failure(o) for o in outcomes if not o.ok]
    report["machine"] = machine_info()
    rows = [
        [fault, r["runs"], r["ended_with_error"], r["epochs"], 0, r["leaked"], r["wrong"], r["lost"]]
        for fault, r in sorted(report["by_fault"].items())
    ]
    t = report["total"]
    rows.append(["all", t["runs"], t["ended_with_error"], t["epochs"], 0, t["leaked"], t["wrong"], t["lost"]])
    headers = ["fault", "runs", "ended by an error", "epochs completed", "hangs", "leaked threads",
               "wrong exceptions", "lost or duplicated"]  # fmt: skip
    print(format_table(headers, rows))
    print(f"{args.runs} runs from seed {args.seed} in {report['seconds']:.0f} s")
    write_json(Path(args.out) / "faults.json", report)
    return report


if __name__ == "__main__":
    sys.exit(0 if not main()["failures"] else 1)
