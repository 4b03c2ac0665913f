"""Batches made from a dataset written one sample at a time.

A *sample dataset* has ``len()`` samples and gives one sample for an index, as
``dataset[i]`` (PyTorch's habit) or ``dataset(i)``. ``SampleBatches`` turns it
into a batch-level yield function. ``on_epoch_begin(epoch)`` fixes the epoch's
order of the samples, shuffled from the seed and the epoch. ``self(i)`` makes
batch ``i`` from its samples in one call. So one loader thread does all the work
of a batch, the decoding that runs outside the GIL included.
``DataLoader(..., batch_size=...)`` wraps a sample dataset in it.

Batch ``i`` of an epoch depends on the seed, the epoch and ``i`` alone. So the
batches are the same whichever thread makes them and however many threads there
are. Every sample is in exactly one batch of an epoch. With ``drop_last``, the
samples past the last full batch are in none.

A loader may skip failures (``on_error="skip"``), and tells this through the
error sink (see ``error_sink``). A sample that raises is then replaced by another,
drawn from ``(seed, epoch, batch, place in the batch, attempt)``. So the batch
still comes full and stays reproducible. A sample that failed for a lasting reason
(see ``quarantine.lasting``) is not fetched again in the run: later draws of it
are replaced at once. Each bad sample is one record in the loader's ``errors``,
with the count of its draws replaced. A replacement is drawn from all the
samples, so it may also be in another batch of the epoch: "every sample once"
then holds for the samples that do not fail.
"""

from __future__ import annotations

import functools
import itertools
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .._core.checks import check_bool, check_int
from .._faults.error_budget import error_context
from .._faults.quarantine import Quarantine, lasting
from .._faults.results import NEVER_SKIPPED
from .yield_function import YieldFunction, check_instance, checked_len, has_epoch_hooks

__all__ = ["SampleBatches", "default_collate"]

# A word of the random key of the sample order, so that it differs from the
# loader's batch order and from any random stream the dataset draws from the seed.
_SAMPLE_ORDER_KEY = 0x53414D504C45
# The same for the draws that replace a bad sample: [seed, REPLACE_KEY, epoch, batch, place, attempt].
_REPLACE_KEY = 0x5245504C4143
# Draws tried for one place of a batch before the batch is given up as one that cannot be made.
_MAX_ATTEMPTS = 64


class SampleBatches(YieldFunction):
    """A batch-level yield function over a sample dataset.

    Args:
        samples: the sample dataset: ``len(samples)`` samples, and
            ``samples[i]`` (used when its class defines ``__getitem__``) or else
            ``samples(i)`` returning sample ``i``. Called from several loader
            threads at once, so it must be thread-safe. A dataset whose samples
            change each epoch defines ``get_sample(index, epoch)``, used instead:
            epochs then still overlap. Its own ``on_epoch_begin(epoch)`` and
            ``on_epoch_end(epoch)``, if any, are called through this one, and keep epochs apart.
        batch_size: samples per batch.
        drop_last: leave out the last batch of an epoch when it is short; by
            default it is kept, with the samples left over.
        collate: makes a batch from the list of its samples; ``default_collate``
            (stack arrays and numbers, recurse into tuples, lists and dicts) by default.
        shuffle: a new order of the samples each epoch, drawn from ``(seed, epoch)``,
            so batches differ each epoch.
        seed: makes the shuffled orders reproducible; one is drawn when ``None``.

    Raises:
        TypeError, ValueError: an argument is of the wrong type or out of range;
            the message says which and what is allowed.
    """

    def __init__(
        self,
        samples: Any,
        batch_size: int,
        *,
        drop_last: bool = False,
        collate: Callable[[list[Any]], Any] | None = None,
        shuffle: bool = False,
        seed: int | None = None,
    ) -> None:
        check_instance(samples, "the sample dataset")
        if not hasattr(type(samples), "__len__"):
            raise TypeError(
                f"batch_size needs a sample dataset with __len__ (the number of samples); {type(samples).__name__} "
                "has none. A stream (a function without __len__) returns whole batches: leave batch_size out"
            )
        # get_sample(index, epoch): a sample whose randomness comes from its epoch, with epochs still overlapping.
        self._get_sample: Callable[[int, int], Any] | None = getattr(samples, "get_sample", None)
        if hasattr(type(samples), "__getitem__"):
            self._get: Callable[[int], Any] = samples.__getitem__
        elif callable(samples):
            self._get = samples
        elif self._get_sample is None:
            raise TypeError(
                f"a sample dataset needs __getitem__(index) or __call__(index) returning one sample; "
                f"{type(samples).__name__} has neither"
            )
        if collate is not None and not callable(collate):
            raise TypeError(f"collate must be callable (a list of samples -> a batch), got {type(collate).__name__}")
        self.samples = samples
        self.batch_size = check_int("batch_size", batch_size, minimum=1)
        self.drop_last = check_bool("drop_last", drop_last)
        self.shuffle = check_bool("shuffle", shuffle)
        self.collate = default_collate if collate is None else collate
        self.seed = check_int("seed", seed, minimum=0) if seed is not None else _draw_seed()
        self._epoch = 0
        self._order = self._sample_order(0)
        self._sink: Any = None  # the loader's error sink (see error_sink), or None
        self.quarantine = Quarantine()  # samples that failed for a lasting reason, keyed "sample <i>"
        self._bad: dict[str, BaseException] = {}  # why each one in quarantine failed, for its later reports
        if not has_epoch_hooks(samples):
            # The samples do not depend on the epoch, so batches of two epochs can be
            # made at once: the loader then overlaps epochs (see DataLoader).
            self._order_cached = functools.lru_cache(maxsize=4)(self._sample_order)
            self.get_batch = self._get_batch

    def __getstate__(self) -> dict[str, Any]:
        # The order cache and get_batch refer to this instance's methods: made again on unpickling
        # (worker processes get the loader's SampleBatches by pickle).
        state = dict(self.__dict__)
        state.pop("_order_cached", None)
        state.pop("get_batch", None)
        state["_sink"] = None  # the loader's, in this process: a worker process is given its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if not has_epoch_hooks(self.samples):
            self._order_cached = functools.lru_cache(maxsize=4)(self._sample_order)
            self.get_batch = self._get_batch

    def __len__(self) -> int:
        """Batches per epoch, from the number of samples now."""
        count = checked_len(self.samples, "samples")
        return count // self.batch_size if self.drop_last else -(-count // self.batch_size)

    def __call__(self, index: int) -> Any:
        """Make batch ``index`` of the current epoch: collate its samples, fetched in this thread."""
        return self._collate_batch(index, self._order, self._epoch)

    def _get_batch(self, index: int, epoch: int) -> Any:
        """Make batch ``index`` of ``epoch``, whatever the current one (``get_batch`` when the samples allow it)."""
        return self._collate_batch(index, self._order if epoch == self._epoch else self._order_cached(epoch), epoch)

    def set_error_sink(self, sink: Any) -> None:
        """Take the loader's error sink (see ``error_sink``); the samples get it too if they take one."""
        self._sink = sink
        forward = getattr(self.samples, "set_error_sink", None)
        if forward is not None:
            forward(sink)

    def _collate_batch(self, index: int, order: Sequence[int], epoch: int) -> Any:
        start = index * self.batch_size
        positions = order[start : start + self.batch_size]
        if index < 0 or not len(positions):
            raise IndexError(f"batch {index} is out of range: the epoch has {len(self)} batches")
        sink = self._sink
        if sink is None or not getattr(sink, "skip", False):
            return self.collate([self._fetch(int(position), epoch) for position in positions])
        count = len(order)
        return self.collate([self._replacing_get(int(p), epoch, index, k, count) for k, p in enumerate(positions)])

    def _replacing_get(self, sample: int, epoch: int, index: int, place: int, count: int) -> Any:
        """Sample ``sample``, or, if it fails, another drawn for this place of batch ``index``; report each bad draw.

        Attempt ``k > 0`` draws from its own generator. So the sample that takes a
        bad one's place depends on which samples are bad, not on which thread
        found them bad first. A sample in quarantine fails its attempt as it would
        if tried.
        """
        failure: BaseException | None = None
        for attempt in itertools.count():
            if attempt:
                if attempt >= _MAX_ATTEMPTS or len(self.quarantine) >= count:
                    raise RuntimeError(
                        f"batch {index}: no sample left to replace a bad one with after {attempt} attempts "
                        f"({len(self.quarantine)} of {count} samples failed for good)"
                    ) from failure
                rng = np.random.default_rng([self.seed, _REPLACE_KEY, epoch, index, place, attempt])
                sample = int(rng.integers(count))
            key = f"sample {sample}"
            known = self._bad.get(key) if key in self.quarantine else None
            if known is not None:
                self._sink(index, known, self._context(sample, known))
                continue
            try:
                return self._fetch(sample, epoch)
            except Exception as exc:
                if isinstance(exc, NEVER_SKIPPED):
                    raise
                failure = exc
                if lasting(exc) and self.quarantine.add(key, f"{type(exc).__name__}: {exc}"):
                    self._bad[key] = exc
                self._sink(index, exc, self._context(sample, exc))
        raise AssertionError("unreachable: itertools.count() never ends")

    def _fetch(self, sample: int, epoch: int) -> Any:
        """Sample ``sample`` of ``epoch``: ``get_sample(sample, epoch)`` if the dataset has it, else ``samples[i]``."""
        return self._get(sample) if self._get_sample is None else self._get_sample(sample, epoch)

    def _context(self, sample: int, exc: BaseException) -> dict[str, Any]:
        """What a bad sample's record says: what the samples and the exception know of it, and its key."""
        context = error_context(self.samples, sample, exc) or {}
        return {**context, "sample": sample, "key": f"sample {sample}"}

    @property
    def epoch(self) -> int:
        """The epoch whose order of the samples the batches follow."""
        return self._epoch

    def on_epoch_begin(self, epoch: int) -> None:
        """Call the dataset's ``on_epoch_begin``, then fix this epoch's order of the samples.

        The loader calls it in the consuming thread while no call runs; without a
        loader, call it to move to another epoch.
        """
        forward = getattr(self.samples, "on_epoch_begin", None)
        if forward is not None:
            forward(epoch)
        self._order = self._sample_order(epoch)
        self._epoch = epoch

    def on_epoch_end(self, epoch: int) -> None:
        """Call the dataset's ``on_epoch_end``, if it has one."""
        forward = getattr(self.samples, "on_epoch_end", None)
        if forward is not None:
            forward(epoch)

    def __repr__(self) -> str:
        return (
            f"<SampleBatches of {type(self.samples).__name__}: batch_size={self.batch_size} "
            f"drop_last={self.drop_last} shuffle={self.shuffle} epoch={self._epoch}>"
        )

    def _sample_order(self, epoch: int) -> Sequence[int]:
        count = checked_len(self.samples, "samples")
        if not self.shuffle:
            return range(count)
        return np.random.default_rng([self.seed, _SAMPLE_ORDER_KEY, epoch]).permutation(count)


def default_collate(samples: Sequence[Any]) -> Any:
    """Make a batch of samples: stack arrays and numbers, keep the structure of tuples, lists and dicts.

    ``[(x0, y0), (x1, y1)]`` becomes ``(stack([x0, x1]), stack([y0, y1]))``, and a
    list of dicts a dict of stacked values; a named tuple stays one. Numbers
    become a 1-D array, arrays gain a first dimension of ``len(samples)``.

    Raises:
        TypeError: the samples differ in structure, or a part is not an array, a
            number, a string, or a tuple, list or dict of them.
        ValueError: arrays to stack differ in shape.
    """
    first = samples[0]
    if isinstance(first, Mapping):
        keys = list(first)
        for sample in samples:
            if not isinstance(sample, Mapping) or list(sample) != keys:
                raise TypeError(f"cannot batch samples with different keys: {keys} and {_keys(sample)}")
        return {key: default_collate([sample[key] for sample in samples]) for key in keys}
    if isinstance(first, tuple | list):
        for sample in samples:
            if not isinstance(sample, tuple | list) or len(sample) != len(first):
                raise TypeError(
                    f"cannot batch samples of different structure: a {type(first).__name__} of {len(first)} "
                    f"and {type(sample).__name__} {_length(sample)}"
                )
        parts = [default_collate([sample[i] for sample in samples]) for i in range(len(first))]
        if hasattr(first, "_fields"):  # a named tuple
            return type(first)(*parts)
        return tuple(parts) if isinstance(first, tuple) else parts
    if isinstance(first, np.ndarray | np.generic | numbers.Number | str | bytes):
        arrays = [np.asarray(sample) for sample in samples]
        shapes = sorted({array.shape for array in arrays})
        if len(shapes) > 1:
            raise ValueError(
                f"cannot stack samples of different shapes {shapes}: make every sample the same shape, "
                "or pass collate= to batch them another way"
            )
        return np.stack(arrays)
    raise TypeError(
        f"default_collate cannot batch a sample part of type {type(first).__name__}: return numpy arrays, "
        "numbers, or tuples, lists and dicts of them, or pass collate="
    )


def _draw_seed() -> int:
    return int(np.random.SeedSequence().entropy % 2**63)


def _keys(sample: Any) -> Any:
    return list(sample) if isinstance(sample, Mapping) else type(sample).__name__


def _length(sample: Any) -> str:
    return f"of {len(sample)}" if isinstance(sample, tuple | list) else "(not a sequence)"
