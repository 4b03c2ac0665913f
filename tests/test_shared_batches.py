"""The shared-memory transport: batches split, written, rebuilt as views; blocks reused, bounded, unlinked."""

import gc
import os

import numpy as np
import pytest

from parallel_loader._calls.shared_batches import (
    INLINE_BYTES,
    ArrayRef,
    BlockPool,
    WorkerMappings,
    split_arrays,
    write_arrays,
)


def shm_names(prefix: str) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]


@pytest.fixture
def pool(request):
    pool = BlockPool(capacity=2, prefix=f"pltest{os.getpid()}_")
    yield pool
    pool.close()
    gc.collect()
    assert shm_names(pool.prefix) == []


def send(pool: BlockPool, batch):
    """What a worker and the consumer do with a batch: split, write into a block, rebuild."""
    skeleton, arrays, nbytes = split_arrays(batch)
    block = None
    if arrays:
        block = pool.acquire(nbytes)
        write_arrays(block.name, block.size, skeleton, arrays)
    return pool.build(skeleton, block)


def test_tuples_lists_and_dicts_of_arrays_come_back_equal_as_views_of_one_block(pool):
    image = np.arange(4 * 96 * 96 * 3, dtype=np.uint8).reshape(4, 96, 96, 3)
    labels = np.arange(300, dtype=np.int64)
    batch = ({"image": image, "name": "clip"}, [labels, np.float32(2.5)], 7)
    out = send(pool, batch)
    assert type(out) is tuple and type(out[0]) is dict and type(out[1]) is list
    np.testing.assert_array_equal(out[0]["image"], image)
    np.testing.assert_array_equal(out[1][0], labels)
    assert out[0]["image"].dtype == np.uint8 and out[1][0].dtype == np.int64
    assert (out[0]["name"], out[1][1], out[2]) == ("clip", np.float32(2.5), 7)
    assert not out[0]["image"].flags.owndata  # a view of the block, not a copy
    assert pool.in_use == 1 and pool.made == 1


def test_the_skeleton_holds_refs_in_place_of_large_arrays_only():
    big = np.zeros(INLINE_BYTES, np.uint8)
    small = np.zeros(3, np.float32)
    objects = np.array([object(), None], dtype=object)
    skeleton, arrays, nbytes = split_arrays({"big": big, "small": small, "objects": objects})
    assert type(skeleton["big"]) is ArrayRef
    assert skeleton["small"] is small and skeleton["objects"] is objects  # pickled with the skeleton
    assert len(arrays) == 1 and arrays[0] is big and nbytes >= big.nbytes


def test_a_non_contiguous_array_is_written_in_order(pool):
    base = np.arange(256 * 256, dtype=np.float64).reshape(256, 256)
    strided = base[::2, ::-3]
    out = send(pool, [strided])
    np.testing.assert_array_equal(out[0], strided)


def test_a_batch_without_large_arrays_needs_no_block(pool):
    batch = (1, "a", np.zeros(2))
    out = send(pool, batch)
    assert out[:2] == (1, "a") and pool.made == 0


def test_a_block_returns_to_the_pool_when_the_last_view_is_dropped_and_is_reused(pool):
    out = send(pool, (np.ones(20_000),))
    first = pool.names()
    kept = out[0][10:20]  # a view of a view keeps the block too
    del out
    gc.collect()
    assert pool.in_use == 1
    del kept
    gc.collect()
    assert (pool.in_use, pool.free) == (0, 1)
    again = send(pool, (np.ones(16_000),))
    assert pool.names() == first and pool.made == 1  # the same block, written again
    np.testing.assert_array_equal(again[0], np.ones(16_000))


def test_free_blocks_stay_within_capacity_the_rest_are_unlinked(pool):
    batches = [send(pool, (np.full(20_000, i),)) for i in range(5)]
    assert pool.in_use == 5 and len(shm_names(pool.prefix)) == 5
    for i, batch in enumerate(batches):
        assert batch[0][0] == i  # every batch kept its own block
    del batches, batch
    gc.collect()
    assert (pool.in_use, pool.free) == (0, 2)
    assert len(shm_names(pool.prefix)) == 2


def test_a_larger_batch_gets_a_larger_block_and_the_smallest_fitting_free_one_is_chosen(pool):
    small = send(pool, (np.zeros(10_000),))
    large = send(pool, (np.zeros(200_000),))
    del small, large
    gc.collect()
    sizes = sorted(b.size for b in pool._free)
    block = pool.acquire(100)
    assert block.size == sizes[0]
    pool.release(block)


def test_close_unlinks_every_block_while_a_held_batch_stays_readable(pool):
    held = send(pool, (np.arange(12_000.0),))
    send(pool, (np.zeros(12_000),))  # dropped at once: free
    assert len(shm_names(pool.prefix)) == 2
    pool.close()
    assert shm_names(pool.prefix) == []
    np.testing.assert_array_equal(held[0], np.arange(12_000.0))
    del held
    gc.collect()
    with pytest.raises(RuntimeError, match="closed"):
        pool.acquire(10)


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity"):
        BlockPool(0)


def test_a_workers_mappings_are_kept_for_the_next_write_and_bounded(pool):
    mappings = WorkerMappings(keep=1)
    batch = (np.arange(9_000.0),)
    skeleton, arrays, nbytes = split_arrays(batch)
    first, second = pool.acquire(nbytes), pool.acquire(nbytes)
    write_arrays(first.name, first.size, skeleton, arrays, mappings)
    kept = mappings.get(first.name, first.size)
    assert mappings.get(first.name, first.size) is kept  # the same mapping again
    write_arrays(second.name, second.size, skeleton, arrays, mappings)
    assert kept.closed  # only the latest one is kept
    np.testing.assert_array_equal(pool.build(skeleton, second)[0], batch[0])
    pool.release(first)
