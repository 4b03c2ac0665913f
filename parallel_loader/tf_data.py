"""A ``tf.data.Dataset`` fed by loader threads, so that Keras ``model.fit`` can train from them.

TensorFlow is imported inside ``as_tf_dataset`` only, so ``import parallel_loader``
stays light for code that never touches TensorFlow.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .data_loader import DataLoader
from .yield_function import epoch_length

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = ["as_tf_dataset", "infer_signature"]


def as_tf_dataset(
    source: DataLoader | Callable[..., Any],
    output_signature: Any = None,
    *,
    num_threads: int = 4,
    max_len: int = 8,
    shuffle: bool = False,
    seed: int | None = None,
    ordered: bool = False,
    name: str = "tf-loader",
    batch_size: int | None = None,
    drop_last: bool = False,
    collate: Callable[[list[Any]], Any] | None = None,
) -> tf.data.Dataset:
    """Wrap a ``DataLoader`` or a yield function as a ``tf.data.Dataset`` of its batches.

    Each iteration of the dataset is one epoch of the loader, so the dataset
    can be iterated again and again. The loader's epoch is finished, and the
    yield function's ``on_epoch_end`` called, before the last batch of an epoch
    is handed on, so a consumer that stops after exactly the epoch's batches
    still moves the epoch on.

    With Keras:

    * ``model.fit(dataset, epochs=n)``: pass the dataset as it is; each ``fit``
      epoch is one loader epoch. Do not add ``.repeat()``, which would make the
      first ``fit`` epoch endless.
    * ``model.fit(dataset.repeat(), epochs=n, steps_per_epoch=k)``: with
      ``steps_per_epoch``, Keras keeps one iterator across its epochs, and
      without ``.repeat()`` it runs out at the end of each loader epoch ("Your
      input ran out of data") and cuts that ``fit`` epoch short. With
      ``.repeat()`` every step gets a batch; each pass of the repeat is a new
      loader epoch, whose number the yield function's ``on_epoch_begin`` is
      given (so seeded augmentation differs per pass), and ``fit`` epochs need
      not line up with loader epochs.

    Who owns the threads:

    * Given a ``DataLoader``, the caller owns it: the dataset only iterates it,
      one epoch per dataset iteration, and the caller closes it when done (use it
      as a context manager around ``fit``). Do not iterate the loader elsewhere
      at the same time.
    * Given a yield function, the dataset owns its threads: each iteration starts
      a ``DataLoader`` with the keyword arguments here and closes it when the
      iteration ends. An iterator dropped part way (a ``fit`` with a smaller
      ``steps_per_epoch``) closes its loader when TensorFlow releases the
      iterator, which may be a moment later, in another thread. Epoch numbers
      go on from one iteration to the next, so seeded shuffling differs per
      epoch and ``on_epoch_begin`` gets each epoch's number; an epoch left part
      way does not call ``on_epoch_end``.

    Args:
        source: a ``DataLoader``, a ``YieldFunction`` (or any callable with
            ``__len__`` taking an index), a zero-argument callable (a stream), or
            with ``batch_size`` a sample dataset.
        output_signature: the ``tf.TypeSpec`` structure of one batch, as
            ``tf.data.Dataset.from_generator`` takes it. By default it is inferred
            from batch 0, made once here in the calling thread (see
            ``infer_signature``); a stream needs it given, since a call would
            consume a batch.
        num_threads, max_len, shuffle, seed, ordered, name, batch_size, drop_last, collate:
            the ``DataLoader`` arguments, used when ``source`` is not a ``DataLoader`` already.

    Returns:
        A dataset whose elements are the batches; its cardinality is the number of
        batches per epoch when the source has a length.

    Raises:
        TypeError: a stream without ``output_signature``, a class where an
            instance is expected, or a batch whose structure cannot be turned into tensors.
        ValueError: a loader argument is out of range, or there is no batch to
            infer the signature from.
    """
    import tensorflow as tf

    if isinstance(source, DataLoader):
        if batch_size is not None:
            raise ValueError("batch_size is for a sample dataset; give it to the DataLoader instead")
        # The yield function is read for inference only; the loader keeps calling it.
        yield_fn = source.yield_fn
    else:
        # Check the loader's arguments now rather than in TensorFlow's generator thread. The
        # loaders made below take its yield function (the batching adapter with batch_size),
        # and its seed, so every iteration follows one sequence of shuffled orders.
        checked = DataLoader(source, num_threads, max_len, shuffle, seed, ordered, name, batch_size=batch_size,
                             drop_last=drop_last, collate=collate)  # fmt: skip
        checked.close()
        yield_fn, shuffle, seed = checked.yield_fn, checked.shuffle, checked.seed
    length = epoch_length(yield_fn)
    if length is None and isinstance(source, DataLoader):
        length = source.batches_per_epoch
    if output_signature is None:
        if length is None:
            raise TypeError(
                f"{type(yield_fn).__name__} is a stream (no __len__): pass output_signature, "
                "since inferring it would consume a batch"
            )
        if length == 0:
            raise ValueError("the source has no batches: nothing to infer output_signature from")
        output_signature = infer_signature(yield_fn(0))

    if isinstance(source, DataLoader):

        def generate() -> Iterator[Any]:
            yield from _completing(source)

    else:
        epochs = itertools.count()

        def generate() -> Iterator[Any]:
            with DataLoader(
                yield_fn, num_threads, max_len, shuffle, seed, ordered, name, first_epoch=next(epochs)
            ) as loader:
                yield from _completing(loader)

    dataset = tf.data.Dataset.from_generator(generate, output_signature=output_signature)
    if length is not None:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(length))
    return dataset


def _completing(loader: DataLoader) -> Iterator[Any]:
    """Yield one epoch of ``loader``, finishing the epoch before the last batch goes out.

    Holding one batch back means the loader's epoch is complete (and the yield
    function's ``on_epoch_end`` called) by the time the consumer has the last
    batch, even if it never asks for more: ``dataset.take(n)``, or a ``fit``
    that counts its steps.
    """
    batches = iter(loader)
    try:
        held = next(batches)
    except StopIteration:
        return
    for batch in batches:
        yield held
        held = batch
    yield held


def infer_signature(batch: Any) -> Any:
    """The ``tf.TensorSpec`` structure of a batch, with the first dimension of each array left unknown.

    Arrays (and numbers) become ``TensorSpec``; tuples, lists and dicts keep their
    structure. The first dimension is left as ``None`` because the last batch of
    an epoch may be smaller.

    Raises:
        TypeError: a part of the batch cannot be a tensor (e.g. an object array or ``None``).
    """
    import tensorflow as tf

    if isinstance(batch, Mapping):
        return {key: infer_signature(value) for key, value in batch.items()}
    if isinstance(batch, tuple | list):
        return tuple(infer_signature(value) for value in batch)
    array = np.asarray(batch)
    if array.dtype == object or array.dtype.kind not in "biufcUS":
        raise TypeError(
            f"cannot make a tensor of a batch part of type {type(batch).__name__} (dtype {array.dtype}); "
            "batches must be arrays, numbers, or tuples/lists/dicts of them"
        )
    shape = (None, *array.shape[1:]) if array.ndim else ()
    dtype = tf.string if array.dtype.kind in "US" else tf.as_dtype(array.dtype)
    return tf.TensorSpec(shape=shape, dtype=dtype)
