"""Sharding: each of ``num_shards`` workers takes its own share of an epoch's global order.

Multi-worker training (``tf.distribute.MultiWorkerMirroredStrategy``) has one
input pipeline per worker. Every worker must read a disjoint part of each epoch.
Every worker must also run the same number of steps, or a collective waits for
ever. The rule here is the one of PyTorch's ``DistributedSampler`` and of
``tf.data.Dataset.shard``. Every worker computes the same global order of the
epoch: the same permutation from the same seed. It keeps every
``num_shards``-th position of it, starting at its ``shard_index``.

When the epoch's length is not a multiple of ``num_shards``, the remainder is:

* ``"pad"``: topped up from the start of the global order, so that every shard
  gets ``ceil(length / num_shards)`` positions. Nothing is left out. The first
  few positions of the order are read twice: once by their own shard, and once
  by a shard that is short. ``VideoFolder`` fills its last training batch the
  same way.
* ``"drop"``: left out, so that every shard gets ``length // num_shards``
  positions and none is read twice. The dropped positions are the last ones of
  the order, so with shuffling they are different ones each epoch.

Under ``tf.distribute``, one step takes a batch for each of a worker's
``replicas``. So each shard's length is also kept a multiple of ``replicas``, by
the same rule: the epoch is cut into ``num_shards * replicas`` equal parts.

Nothing here knows of threads, loaders or TensorFlow: these are pure functions
of their arguments. See :doc:`/guide/distributed`.
"""

from __future__ import annotations

from typing import Literal

from .._core.checks import check_int

__all__ = ["REMAINDERS", "Remainder", "check_shard", "shard_length", "shard_positions"]

Remainder = Literal["pad", "drop"]
REMAINDERS: tuple[Remainder, ...] = ("pad", "drop")


def check_shard(num_shards: object, shard_index: object, remainder: object = "pad") -> tuple[int, int, Remainder]:
    """Check the sharding arguments and return them as ``(num_shards, shard_index, remainder)``.

    Raises:
        TypeError: ``num_shards`` or ``shard_index`` is not an int (numpy ints are).
        ValueError: ``num_shards`` < 1, ``shard_index`` not in ``range(num_shards)``,
            or ``remainder`` neither ``"pad"`` nor ``"drop"``.
    """
    num_shards = check_int("num_shards", num_shards, minimum=1)
    shard_index = check_int("shard_index", shard_index, minimum=0)
    if shard_index >= num_shards:
        raise ValueError(
            f"shard_index must be in range(num_shards) = 0..{num_shards - 1}, got {shard_index}; "
            "give each worker its own index, counted from 0"
        )
    if remainder not in REMAINDERS:
        raise ValueError(f"shard_remainder must be 'pad' or 'drop', got {remainder!r}")
    return num_shards, shard_index, remainder


def shard_length(length: int, num_shards: int, remainder: Remainder = "pad", replicas: int = 1) -> int:
    """The number of positions every shard gets of an epoch of ``length`` positions.

    ``ceil(length / num_shards)`` with ``"pad"``, ``length // num_shards`` with ``"drop"``.
    With ``replicas``, the epoch is cut into ``num_shards * replicas`` parts, and each shard gets ``replicas`` of them.

    Raises:
        ValueError: with ``"drop"``, an epoch shorter than ``num_shards * replicas``
            (but not empty) would leave every shard empty and lose the whole epoch.
    """
    length = check_int("length", length, minimum=0)
    num_shards, _, remainder = check_shard(num_shards, 0, remainder)
    replicas = check_int("replicas", replicas, minimum=1)
    parts = num_shards * replicas
    if remainder == "pad":
        return -(-length // parts) * replicas
    if 0 < length < parts:
        cut = f"{num_shards} shards" if replicas == 1 else f"{num_shards} shard(s) of {replicas} replicas"
        raise ValueError(
            f"an epoch of {length} batches cut into {cut} with shard_remainder='drop' leaves every "
            "shard empty: use shard_remainder='pad', fewer shards, or more batches per epoch"
        )
    return length // parts * replicas


def shard_positions(
    length: int, num_shards: int, shard_index: int, remainder: Remainder = "pad", replicas: int = 1
) -> range | list[int]:
    """This shard's positions in an epoch's global order of ``length`` positions.

    Shard ``i`` of ``n`` gets positions ``i, i + n, i + 2n, ...``. Apart from the
    padding, the shards are disjoint, and together they are the whole epoch.
    Every shard gets ``shard_length(length, n, remainder, replicas)`` positions.
    With ``"pad"``, the positions past the end wrap round to the start of the order
    (``p % length``). With ``"drop"``, the last positions go to no shard.

    The positions index the epoch's order, not the data: a loader that shuffles
    maps position ``p`` to ``order[p]``, with the same order on every shard.
    Used in step ``k``, the shards together take positions ``k * n`` to
    ``k * n + n - 1``, so the global order is consumed front to back.

    Args:
        length: positions in the epoch (its batches), the same on every shard.
        num_shards: how many shards (workers) share the epoch.
        shard_index: which one this is, ``0 <= shard_index < num_shards``.
        remainder: ``"pad"`` or ``"drop"``, see the module docstring.
        replicas: the replicas one step of this shard feeds; its length is kept a multiple of it.

    Returns:
        The positions, in the order this shard should deliver them.

    Raises:
        TypeError, ValueError: an argument is out of range (see ``check_shard``),
            or ``"drop"`` would leave every shard empty (see ``shard_length``).
    """
    num_shards, shard_index, remainder = check_shard(num_shards, shard_index, remainder)
    per_shard = shard_length(length, num_shards, remainder, replicas)
    stop = per_shard * num_shards
    if stop <= length:
        return range(shard_index, stop, num_shards)
    return [p % length for p in range(shard_index, stop, num_shards)]
