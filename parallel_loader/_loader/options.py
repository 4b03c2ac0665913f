"""Every argument of ``DataLoader``, checked in one place before anything is made, and where the calls run.

``LoaderOptions.check`` takes the constructor's arguments as given, and returns
them checked and settled. With ``batch_size``, the sample dataset is wrapped in
``SampleBatches``, which then does the shuffling. ``num_threads="auto"`` gets its
tuner and first count. It settles whether epochs can overlap, and draws a seed
when none was given. A wrong argument fails here, before any thread or file
exists; the message names it and what is allowed. ``LoaderOptions.calls`` then
chooses where the calls run: in the loader threads, or in worker processes.
See :doc:`/guide/threads_and_processes`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._calls.ray_calls import RayCalls
from .._calls.ray_workers import RayWorkers
from .._calls.thread_calls import Report, ThreadCalls, YieldCalls
from .._calls.worker_processes import ProcessCalls
from .._core.checks import check_bool, check_callable, check_int, check_timeout
from .._data.batching import SampleBatches
from .._data.keras_source import KerasSource, as_yield_function
from .._data.yield_function import epoch_length, has_epoch_hooks
from .autotune import ThreadTuner
from .placement import THREADS_DEFAULT, auto_placement
from .sharding import Remainder, check_shard

__all__ = ["LoaderOptions"]


@dataclass
class LoaderOptions:
    """A ``DataLoader``'s arguments, checked (see ``DataLoader`` for each)."""

    yield_fn: Any
    samples: SampleBatches | None  # the wrapper made for batch_size, which is also yield_fn
    stream: bool  # yield_fn has no __len__
    num_threads: int
    tuner: ThreadTuner | None
    max_len: int
    shuffle: bool  # shuffle whole batches (with batch_size, SampleBatches shuffles the samples instead)
    seed: int
    seed_given: bool
    ordered: bool
    name: str
    first_epoch: int
    batches_per_epoch: int | None
    on_error: str
    max_errors: int | float | None
    error_log: str | os.PathLike[str] | None
    call_timeout: float | None
    thread_init: Callable[[int], Any] | None
    num_shards: int
    shard_index: int
    shard_remainder: Remainder
    replicas: int
    overlap_epochs: bool
    telemetry: bool
    processes: int
    workers: RayWorkers | None
    gil_split: bool = False  # processes="auto": a worker its GIL holds back hands threads to new ones

    @classmethod
    def check(
        cls,
        yield_fn: Callable[..., Any],
        num_threads: int | str | ThreadTuner | None,
        max_len: int,
        shuffle: bool,
        seed: int | None,
        ordered: bool,
        name: str,
        first_epoch: int,
        batches_per_epoch: int | None,
        *,
        batch_size: int | None,
        drop_last: bool,
        collate: Callable[[list[Any]], Any] | None,
        on_error: str,
        max_errors: int | float | None,
        error_log: str | os.PathLike[str] | None,
        call_timeout: float | None,
        thread_init: Callable[[int], Any] | None,
        num_shards: int,
        shard_index: int,
        shard_remainder: Remainder,
        overlap_epochs: bool,
        min_threads: int | None,
        max_threads: int | None,
        telemetry: bool,
        processes: int | str = 0,
        replicas: int = 1,
        workers: RayWorkers | None = None,
    ) -> LoaderOptions:
        """Check every argument; return them settled.

        Raises:
            TypeError, ValueError: an argument is of the wrong type or out of range;
                the message says which and what is allowed.
        """
        yield_fn = as_yield_function(yield_fn)  # a Keras PyDataset becomes a KerasSource
        shuffle, ordered = check_bool("shuffle", shuffle), check_bool("ordered", ordered)
        seed_given = seed is not None
        samples: SampleBatches | None = None
        num_shards, shard_index, shard_remainder = check_shard(num_shards, shard_index, shard_remainder)
        replicas = check_int("replicas", replicas, minimum=1)
        if num_shards > 1 and shuffle and seed is None:
            raise ValueError(
                "shuffle=True with num_shards > 1 needs a seed, the same on every shard: "
                "each draws the epoch's global order from it"
            )
        if batch_size is not None and isinstance(yield_fn, KerasSource):
            raise ValueError(
                "a Keras PyDataset/Sequence gives whole batches (dataset[i] is batch i): leave batch_size out"
            )
        if batch_size is not None:
            # The adapter shuffles the samples, so the batches need no other order than the one they are made in.
            samples = yield_fn = SampleBatches(
                yield_fn, batch_size, drop_last=drop_last, collate=collate, shuffle=shuffle, seed=seed
            )
            shuffle, seed = False, samples.seed
        elif check_bool("drop_last", drop_last) or collate is not None:
            raise ValueError("drop_last and collate batch samples: pass batch_size too")
        telemetry = check_bool("telemetry", telemetry)
        gil_split = processes == "auto"
        if processes == "auto":
            if workers is not None:
                raise ValueError('processes="auto" and workers=RayWorkers(...) both say where the calls run')
            given = num_threads if isinstance(num_threads, int) else None
            processes, sized = auto_placement(given)
            if num_threads in (None, "auto"):
                num_threads = sized  # anything else is checked, and refused, below as for processes=P
        elif num_threads is None:
            num_threads = THREADS_DEFAULT
        tuner = _tuner(num_threads, min_threads, max_threads, telemetry)
        if tuner is not None:
            tuner.name = name
            num_threads = tuner.initial
        num_threads = check_int("num_threads", num_threads, minimum=1)
        processes = check_int("processes", processes, minimum=0)
        _check_workers(workers, processes)
        if (processes or workers is not None) and tuner is not None:
            raise ValueError(
                'num_threads="auto" tunes the threads of this process: with processes or workers, give an int'
            )
        max_len = check_int("max_len", max_len, minimum=1)
        first_epoch = check_int("first_epoch", first_epoch, minimum=0)
        if seed is not None:
            seed = check_int("seed", seed, minimum=0)
        if on_error not in ("raise", "skip"):
            raise ValueError(f'on_error must be "raise" or "skip", got {on_error!r}')
        call_timeout = check_timeout(call_timeout, "call_timeout")
        if call_timeout == 0:
            raise ValueError("call_timeout must be more than 0 seconds, or None for no watchdog")
        check_callable("thread_init", thread_init)
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__} {name!r}")
        stream = epoch_length(yield_fn) is None  # also checks yield_fn, early
        batches_per_epoch = _check_stream_options(stream, shuffle, ordered, (num_shards, replicas), batches_per_epoch)
        # get_batch(index, epoch): calls that name their epoch, so two epochs' calls may run at once.
        overlap_epochs = (
            check_bool("overlap_epochs", overlap_epochs)
            and not stream
            and (getattr(yield_fn, "get_batch", None) is not None or not has_epoch_hooks(yield_fn))
        )
        return cls(
            yield_fn=yield_fn,
            samples=samples,
            stream=stream,
            num_threads=num_threads,
            tuner=tuner,
            max_len=max_len,
            shuffle=shuffle,
            # With no seed, draw one now, so that each epoch's order still differs from the last.
            seed=seed if seed is not None else int(np.random.SeedSequence().entropy % 2**63),
            seed_given=seed_given,
            ordered=ordered,
            name=name,
            first_epoch=first_epoch,
            batches_per_epoch=batches_per_epoch,
            on_error=on_error,
            max_errors=max_errors,
            error_log=error_log,
            call_timeout=call_timeout,
            thread_init=thread_init,
            num_shards=num_shards,
            shard_index=shard_index,
            shard_remainder=shard_remainder,
            replicas=replicas,
            overlap_epochs=overlap_epochs,
            telemetry=telemetry,
            processes=processes,
            workers=workers,
            gil_split=gil_split,
        )

    def calls(self, report: Report) -> YieldCalls:
        """Where the calls run: ``ThreadCalls``, ``ProcessCalls`` with ``processes``, ``RayCalls`` with ``workers``.

        Args:
            report: the loader's error sink, for a yield function that reports what it skips.

        Raises:
            TypeError: with processes or workers, the yield function or ``thread_init`` cannot be pickled.
            ValueError: with processes or workers, the yield function is a stream.
            ConnectionError: with workers, the Ray cluster's address does not answer.
        """
        if self.workers is not None:
            return RayCalls(
                self.workers, self.yield_fn, stream=self.stream, thread_init=self.thread_init, report=report,
                name=self.name,
            )  # fmt: skip
        if not self.processes:
            return ThreadCalls(self.yield_fn, self.stream, self.thread_init, report)
        return ProcessCalls(
            self.yield_fn,
            self.processes,
            self.num_threads,
            stream=self.stream,
            thread_init=self.thread_init,
            report=report,
            name=self.name,
            # The most batches the loader holds at once: the shared-memory blocks kept.
            max_batches=self.max_len + self.processes * self.num_threads,
            gil_split=self.gil_split,
        )


def _check_workers(workers: RayWorkers | None, processes: int) -> None:
    """Refuse ``workers`` that is not a ``RayWorkers``, or that comes with ``processes``."""
    if workers is None:
        return
    if not isinstance(workers, RayWorkers):
        raise TypeError(f"workers must be a parallel_loader.ray.RayWorkers or None, got {type(workers).__name__}")
    if processes:
        raise ValueError("workers=RayWorkers(...) and processes=P both say where the calls run: pass one of them")


def _check_stream_options(
    stream: bool, shuffle: bool, ordered: bool, parts: tuple[int, int], batches_per_epoch: int | None
) -> int | None:
    """Refuse what a stream cannot do, and ``batches_per_epoch`` for anything else; return it checked."""
    if not stream:
        if batches_per_epoch is not None:
            raise ValueError(
                "batches_per_epoch is for a stream; a yield function with __len__ gives its own epoch length"
            )
        return None
    for option, value in (("shuffle", shuffle), ("ordered", ordered)):
        if value:
            raise ValueError(
                f"{option}=True needs a yield function with __len__ (a YieldFunction); "
                "a stream has no indices to put in order"
            )
    for option, value in zip(("num_shards", "replicas"), parts, strict=True):
        if value > 1:
            raise ValueError(
                f"{option} > 1 needs a yield function with __len__ (a YieldFunction); "
                "a stream has no positions to share out among the shards and replicas"
            )
    if batches_per_epoch is not None:
        return check_int("batches_per_epoch", batches_per_epoch, minimum=1)
    return None


def _tuner(
    num_threads: int | str | ThreadTuner,
    min_threads: int | None,
    max_threads: int | None,
    telemetry: bool,
) -> ThreadTuner | None:
    """The tuner that ``num_threads`` asks for, or ``None`` for a fixed count; checks the bounds go with it."""
    if isinstance(num_threads, str):
        if num_threads != "auto":
            raise TypeError(f'num_threads must be an int or "auto", got {num_threads!r}')
        tuner = ThreadTuner(1 if min_threads is None else min_threads, max_threads)
    elif isinstance(num_threads, ThreadTuner):
        tuner = num_threads
    else:
        tuner = None
    if (tuner is None or isinstance(num_threads, ThreadTuner)) and (min_threads, max_threads) != (None, None):
        raise ValueError('min_threads and max_threads bound num_threads="auto"; pass num_threads="auto" with them')
    if tuner is not None and not telemetry:
        raise ValueError('num_threads="auto" tunes from the telemetry: it needs telemetry=True')
    return tuner
