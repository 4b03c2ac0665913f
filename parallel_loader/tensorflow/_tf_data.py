"""A ``tf.data.Dataset`` fed by loader threads, so that Keras ``model.fit`` can train from them.

It also serves as the input function of ``tf.distribute`` training. With an
``InputContext``, each worker's dataset reads its own shard of every epoch
(``sharding``). Batches can be copied onto the accelerator ahead of the step
(``device_prefetch``).

TensorFlow is imported inside ``as_tf_dataset`` only, so ``import parallel_loader``
stays light for code that never touches TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .._calls.ray_workers import RayWorkers
from .._core.checks import check_int
from .._data.yield_function import epoch_length
from .._loader.data_loader import DataLoader
from .._loader.placement import training_placement
from .._loader.sharding import Remainder, check_shard
from ._device_prefetch import prefetch_dataset
from ._loader_dataset import LoaderFeed, check_whole_epoch, is_loader_dataset, loader_dataset

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = ["as_tf_dataset", "infer_signature", "loader_of"]


def as_tf_dataset(
    source: DataLoader | Callable[..., Any],
    output_signature: Any = None,
    *,
    num_threads: int | str | None = None,
    max_len: int = 8,
    shuffle: bool = False,
    seed: int | None = None,
    ordered: bool = False,
    name: str = "tf-loader",
    batch_size: int | None = None,
    drop_last: bool = False,
    collate: Callable[[list[Any]], Any] | None = None,
    num_shards: int = 1,
    shard_index: int = 0,
    shard_remainder: Remainder = "pad",
    input_context: tf.distribute.InputContext | None = None,
    replicas: int | None = None,
    prefetch_to_device: str | None = None,
    device_buffer: int = 2,
    processes: int | str | None = None,
    workers: RayWorkers | None = None,
) -> tf.data.Dataset:
    """Wrap a ``DataLoader`` or a yield function as a ``tf.data.Dataset`` of its batches.

    Each iteration of the dataset is one epoch of the loader, so the dataset
    can be iterated again and again. The loader's epoch is finished, and the
    yield function's ``on_epoch_end`` called, before the last batch of an epoch
    is handed on. So a consumer that stops after exactly the epoch's batches
    still moves the epoch on.

    With Keras:

    * ``model.fit(dataset, epochs=n)``: pass the dataset as it is; each ``fit``
      epoch is one loader epoch. Do not add ``.repeat()``, which would make the
      first ``fit`` epoch endless.
    * ``model.fit(dataset.repeat(), epochs=n, steps_per_epoch=k)``: with
      ``steps_per_epoch``, Keras keeps one iterator across its epochs. Without
      ``.repeat()``, it runs out at the end of each loader epoch ("Your input ran
      out of data") and cuts that ``fit`` epoch short. With ``.repeat()``, every
      step gets a batch. Each pass of the repeat is a new loader epoch, and the
      yield function's ``on_epoch_begin`` is given its number. So seeded
      augmentation differs per pass, and ``fit`` epochs need not line up with
      loader epochs.

    Who owns the threads:

    * Given a yield function (or a Keras ``PyDataset``), the dataset makes one
      ``DataLoader`` with the keyword arguments here. It keeps it for its whole
      lifetime, and every iteration is the next epoch of that loader. So epochs
      overlap as with ``Train``: the next epoch's first batches are made while
      ``fit`` finishes this one and validates. ``num_threads="auto"`` keeps its
      thread count from epoch to epoch. ``loader_of(dataset)`` (and
      ``parallel_loader.keras.LoaderStats(dataset)``) sees the whole run.
      Its threads start at the first iteration. They end at the first of:
      ``dataset.close()`` or the end of a ``with dataset:`` block; the dataset no
      longer referenced (garbage collected); interpreter exit. A loader thread
      that fails closes the loader. The error is raised in that iteration, and
      later iterations raise ``LoaderClosed``.
    * Given a ``DataLoader``, the caller owns it. The dataset only iterates it,
      one epoch per dataset iteration. The caller closes it when done: use it as
      a context manager around ``fit``. ``dataset.close()`` leaves it open.
      Do not iterate the loader elsewhere at the same time.

    One iterator at a time iterates the dataset. An iteration started while
    another is in progress raises ``RuntimeError`` rather than share the epoch.
    TensorFlow raises it as the error of that iteration's first ``next``. An
    iterator dropped part way (a ``fit`` stopped early) ends its epoch when
    TensorFlow releases the iterator. The next iteration starts a clean new
    epoch. An epoch left part way does not call ``on_epoch_end``. Epoch numbers
    go on from one iteration to the next, so seeded shuffling differs per epoch
    and ``on_epoch_begin`` gets each epoch's number.

    With ``tf.distribute`` (``strategy.distribute_datasets_from_function``), pass
    the ``InputContext`` that the strategy gives the dataset function as
    ``input_context``. Each input pipeline (one per worker) then reads shard
    ``input_pipeline_id`` of ``num_input_pipelines`` of every epoch (see
    ``DataLoader``'s ``num_shards``). The shards are disjoint and equally long, so
    every worker runs the same number of steps. Each batch the dataset yields goes
    to one replica as it is. So the yield function must make batches of the
    per-replica size, ``input_context.get_per_replica_batch_size(global_batch_size)``.
    A worker with several replicas (GPUs) hands them consecutive batches. So each
    epoch's length is kept a multiple of the worker's replicas, by ``shard_remainder``.
    No step then gets a partial global batch. Shuffle with the same ``seed`` on every worker.
    See :doc:`/guide/training` and :doc:`/guide/distributed`.

    Args:
        source: a ``DataLoader``, a ``YieldFunction`` (or any callable with
            ``__len__`` taking an index), or a Keras ``PyDataset``/``Sequence``.
            It may also be a zero-argument callable (a stream), or with
            ``batch_size`` a sample dataset.
        output_signature: the ``tf.TypeSpec`` structure of one batch, as
            ``tf.data.Dataset.from_generator`` takes it. By default it is inferred
            from batch 0, made once here in the calling thread (see
            ``infer_signature``). A stream needs it given, since a call would
            consume a batch.
        num_threads, processes: where the calls run. With neither given, in worker
            processes sized from the host's cores. A source that cannot cross to a
            process uses 4 threads here, and a log line says why. ``num_threads``
            alone: threads in this process. See :doc:`/guide/host_scale`.
        max_len, shuffle, seed, ordered, name: the ``DataLoader`` arguments, used
            when ``source`` is not a ``DataLoader`` already.
        batch_size, drop_last, collate, workers: the same.
        num_shards, shard_index, shard_remainder: the same. A ``DataLoader`` given
            keeps its own sharding, which must be the one asked for here, if any.
            It must not be restored mid-epoch (see ``Raises``).
        input_context: a ``tf.distribute.InputContext``: shard by its
            ``num_input_pipelines`` and ``input_pipeline_id`` instead of
            ``num_shards`` and ``shard_index``.
        replicas: the replicas one step feeds from this dataset's consecutive
            batches. Each epoch's length is kept a multiple of it (``"pad"`` tops up, ``"drop"`` leaves out).
            By default, the input context's replicas per input pipeline, else 1.
        prefetch_to_device: a device such as ``"/GPU:0"``. The batches are copied
            there while the consumer works on earlier ones, so the elements arrive
            on it. This is ``device_prefetch.prefetch_dataset``: tf.data's
            ``copy_to_device`` and a ``prefetch`` on the device. The dataset's
            cardinality is then unknown. A device this process does not have is
            logged and ignored. Not with ``input_context``: a strategy copies
            batches to its replicas itself.
        device_buffer: the most batches waiting on the device, ahead of the one in use.

    Returns:
        A ``LoaderDataset`` whose elements are the batches. It is a
        ``tf.data.Dataset`` with ``close()``, and a context manager. Its
        cardinality is the number of batches per epoch (of this shard) when the
        source has a length. Prefetched to a device, its cardinality is unknown.
        ``loader_of(dataset)`` gives the loader it iterates (for
        ``parallel_loader.keras.LoaderStats``).

    Raises:
        TypeError: a stream without ``output_signature``, a class where an
            instance is expected, or a batch whose structure cannot be turned into tensors.
        ValueError: an argument is out of range, a ``DataLoader`` given is not
            sharded as asked, or there is no batch to infer the signature from.
            Or the ``DataLoader`` given was restored mid-epoch by ``load_state_dict``:
            resume ``fit`` with ``parallel_loader.keras.BackupAndRestore`` instead.
    """
    import tensorflow as tf

    device_buffer = check_int("device_buffer", device_buffer, minimum=1)
    sharding = _sharding(num_shards, shard_index, shard_remainder, input_context, prefetch_to_device)
    replicas = _replicas(replicas, input_context)
    if isinstance(source, DataLoader):
        if batch_size is not None:
            raise ValueError("batch_size is for a sample dataset; give it to the DataLoader instead")
        loader, owned = source, False
        _check_loader_sharding(loader, sharding, explicit=input_context is not None or sharding[0] > 1)
        if replicas not in (None, loader.replicas):
            raise ValueError(
                f"the DataLoader given keeps its epochs a multiple of replicas={loader.replicas}, but {replicas} "
                "was asked for: build the DataLoader with that replicas, or pass its yield function instead"
            )
    else:
        # The dataset's one loader, made now so that bad arguments fail here rather than in
        # TensorFlow's generator thread; its threads start at the first iteration.
        num_threads, processes = training_placement(
            source, num_threads, 0 if workers is not None else processes, name=name, also=(collate,)
        )
        loader = DataLoader(source, num_threads, max_len, shuffle, seed, ordered, name, batch_size=batch_size,
                            drop_last=drop_last, collate=collate, processes=processes, replicas=replicas or 1,
                            workers=workers, **_shard_kwargs(sharding))  # fmt: skip
        owned = True
    full_length = epoch_length(loader.yield_fn)
    length = loader.batches_per_epoch if full_length is None else len(loader)
    if length is not None and not owned:
        check_whole_epoch(loader)  # restored mid-epoch, fit would fail at that epoch's end
    try:
        output_signature = _signature(loader.yield_fn, full_length, output_signature)
    except BaseException:
        if owned:
            loader.close()
        raise

    feed = LoaderFeed(loader, owned, declared=length is not None)
    dataset = tf.data.Dataset.from_generator(feed.epoch, output_signature=output_signature)
    if length is not None:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(length))
    if prefetch_to_device is not None:
        dataset = prefetch_dataset(dataset, prefetch_to_device, device_buffer)
    return loader_dataset(dataset, feed)


def _signature(yield_fn: Callable[..., Any], length: int | None, given: Any) -> Any:
    """The output signature given, or one inferred from batch 0, made here in the calling thread."""
    if given is not None:
        return given
    if length is None:
        raise TypeError(
            f"{type(yield_fn).__name__} is a stream (no __len__): pass output_signature, "
            "since inferring it would consume a batch"
        )
    if length == 0:
        raise ValueError("the source has no batches: nothing to infer output_signature from")
    return infer_signature(yield_fn(0))


def loader_of(dataset: Any) -> DataLoader:
    """The ``DataLoader`` that a dataset made by ``as_tf_dataset`` iterates.

    The ``DataLoader`` given to ``as_tf_dataset``, or the one loader the dataset
    made from a yield function, for every iteration of the dataset.

    Raises:
        TypeError: ``dataset`` was not made by ``as_tf_dataset`` (a dataset derived
            from one with ``.map`` or ``.repeat`` is another object: pass the one
            ``as_tf_dataset`` returned).
    """
    if not is_loader_dataset(dataset):
        raise TypeError(
            f"{type(dataset).__name__} was not made by as_tf_dataset (a dataset derived from one with "
            ".map(), .repeat() etc. is a new object): pass the DataLoader, or the dataset as_tf_dataset returned"
        )
    return dataset.loader


def _sharding(
    num_shards: int,
    shard_index: int,
    remainder: Remainder,
    input_context: tf.distribute.InputContext | None,
    prefetch_to_device: str | None,
) -> tuple[int, int, Remainder]:
    """``(num_shards, shard_index, remainder)``, from the input context if there is one, checked."""
    if input_context is not None:
        if (num_shards, shard_index) != (1, 0):
            raise ValueError(
                "pass either input_context or num_shards/shard_index, not both: "
                "the input context says which shard this input pipeline reads"
            )
        if prefetch_to_device is not None:
            raise ValueError(
                "prefetch_to_device does not go with input_context: the strategy copies each batch to its "
                "replica's device itself (tf.distribute.InputOptions(experimental_fetch_to_device=True), the default)"
            )
        num_shards, shard_index = input_context.num_input_pipelines, input_context.input_pipeline_id
    return check_shard(num_shards, shard_index, remainder)


def _replicas(replicas: int | None, input_context: tf.distribute.InputContext | None) -> int | None:
    """The replicas one step feeds from this dataset: as given, else the input context's per pipeline."""
    if replicas is not None:
        replicas = check_int("replicas", replicas, minimum=1)
    if input_context is None:
        return replicas
    local = max(1, input_context.num_replicas_in_sync // input_context.num_input_pipelines)
    if replicas not in (None, local):
        raise ValueError(
            f"replicas={replicas}, but the input context feeds {local} replicas per input pipeline: leave replicas out"
        )
    return local


def _shard_kwargs(sharding: tuple[int, int, Remainder]) -> dict[str, Any]:
    return dict(zip(("num_shards", "shard_index", "shard_remainder"), sharding, strict=True))


def _check_loader_sharding(loader: DataLoader, sharding: tuple[int, int, Remainder], explicit: bool) -> None:
    """A given DataLoader reads the shard it was built for: it must be the one asked for, if one was."""
    built, asked = (loader.num_shards, loader.shard_index), sharding[:2]
    if explicit and built != asked:
        raise ValueError(
            f"the DataLoader given reads shard {built[1]} of {built[0]}, but shard {asked[1]} of {asked[0]} "
            "was asked for: build the DataLoader with those num_shards and shard_index, or pass its yield "
            "function instead"
        )


def infer_signature(batch: Any) -> Any:
    """The ``tf.TensorSpec`` structure of a batch, with the first dimension of each array left unknown.

    Arrays (and numbers) become ``TensorSpec``; tuples, lists and dicts keep their
    structure. An array of ``str`` or ``bytes`` objects (a WebDataset caption a
    clip) becomes ``tf.string``. The first dimension is left as ``None`` because
    the last batch of an epoch may be smaller.

    Raises:
        TypeError: a part of the batch cannot be a tensor (e.g. an object array of dicts, or ``None``).
    """
    import tensorflow as tf

    if isinstance(batch, Mapping):
        return {key: infer_signature(value) for key, value in batch.items()}
    if isinstance(batch, tuple | list):
        return tuple(infer_signature(value) for value in batch)
    array = np.asarray(batch)
    text = array.dtype == object and array.ndim > 0 and all(isinstance(v, str | bytes) for v in array.flat)
    if not text and (array.dtype == object or array.dtype.kind not in "biufcUS"):
        raise TypeError(
            f"cannot make a tensor of a batch part of type {type(batch).__name__} (dtype {array.dtype}); "
            "batches must be arrays, numbers, arrays of str or bytes, or tuples/lists/dicts of them"
        )
    shape = (None, *array.shape[1:]) if array.ndim else ()
    dtype = tf.string if text or array.dtype.kind in "US" else tf.as_dtype(array.dtype)
    return tf.TensorSpec(shape=shape, dtype=dtype)
